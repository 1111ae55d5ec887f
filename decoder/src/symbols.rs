//! Symbolization: from a pc in the traced process to function, file, line,
//! column and inlined frames, using the trace's module map.
//!
//! - Function means the containing symbol (as valgrind reports it), from the
//!   static or dynamic symbol table, demangled (Rust without the hash, C++).
//!   Inlined frames from DWARF are extra detail.
//! - File/line/column come from the DWARF line table (the innermost inlined
//!   location, as cachegrind attributes lines).
//! - DWARF is read from the module itself (compressed sections included) or,
//!   when the module has none, from `/usr/lib/debug/.build-id/xx/yyyy.debug`.
//! - A module without debug info gives names from its symbol table, `??`
//!   lines and one warning; a missing module gives `??`. Never a failure.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object::{Object, ObjectKind, ObjectSection, ObjectSegment, ObjectSymbol, ObjectSymbolTable, SymbolKind};
use serde::Serialize;
use trace_rt::format::Module;

type Reader = gimli::EndianArcSlice<gimli::RunTimeEndian>;

/// Where a pc is in the source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Location {
    /// Containing function (symbol), demangled; `??` when unknown.
    pub function: String,
    /// Source file of the innermost location.
    pub file: Option<String>,
    /// Line (1-based).
    pub line: Option<u32>,
    /// Column (1-based).
    pub column: Option<u32>,
    /// Inlined frames, innermost first (empty when nothing is inlined here).
    pub inlined: Vec<InlinedFrame>,
    /// File name of the module the pc belongs to.
    pub module: Option<String>,
}

impl Location {
    /// `file:line` for people, `??` parts when unknown.
    pub fn file_line(&self) -> String {
        let file = self.file.as_deref().map(short_path).unwrap_or("??");
        match self.line {
            Some(l) => format!("{file}:{l}"),
            None => format!("{file}:??"),
        }
    }

    fn unknown(module: Option<String>) -> Self {
        Location { function: "??".into(), file: None, line: None, column: None, inlined: Vec::new(), module }
    }
}

/// One inlined function at a pc.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InlinedFrame {
    /// The inlined function, demangled.
    pub function: String,
    /// Where its code at this pc comes from.
    pub file: Option<String>,
    /// Line.
    pub line: Option<u32>,
}

struct FunctionSymbol {
    address: u64,
    size: u64,
    name: String,
}

struct LoadedModule {
    bias: u64,
    functions: Vec<FunctionSymbol>,
    dwarf: Option<addr2line::Context<Reader>>,
}

struct ModuleEntry {
    path: String,
    build_id: Option<String>,
    ranges: Vec<(u64, u64)>,
    base: u64,
    loaded: Option<Option<LoadedModule>>,
}

/// Symbolizes pcs of one trace; caches per pc and loads modules lazily.
pub struct Symbolizer {
    modules: Vec<ModuleEntry>,
    cache: HashMap<u64, Arc<Location>>,
    warnings: Vec<String>,
    debug_root: PathBuf,
}

impl Symbolizer {
    /// A symbolizer for the modules of a trace.
    pub fn new(modules: &[Module]) -> Self {
        Self::with_debug_root(modules, Path::new("/usr/lib/debug"))
    }

    /// Like [`Symbolizer::new`], looking for separate debug files under
    /// `debug_root/.build-id/`.
    pub fn with_debug_root(modules: &[Module], debug_root: &Path) -> Self {
        let modules = modules
            .iter()
            .map(|m| ModuleEntry {
                path: m.path.clone(),
                build_id: m.build_id.clone(),
                ranges: m.ranges.iter().map(|r| (r.start, r.end)).collect(),
                base: m.ranges.iter().find(|r| r.file_offset == 0).map(|r| r.start).unwrap_or(0),
                loaded: None,
            })
            .collect();
        Symbolizer { modules, cache: HashMap::new(), warnings: Vec::new(), debug_root: debug_root.to_path_buf() }
    }

    /// Warnings so far (modules without debug info, unreadable modules).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The location of `pc`.
    pub fn locate(&mut self, pc: u64) -> Arc<Location> {
        if let Some(l) = self.cache.get(&pc) {
            return l.clone();
        }
        let location = Arc::new(self.lookup(pc));
        self.cache.insert(pc, location.clone());
        location
    }

    fn lookup(&mut self, pc: u64) -> Location {
        let Some(index) = self.modules.iter().position(|m| m.ranges.iter().any(|&(s, e)| (s..e).contains(&pc))) else {
            return Location::unknown(None);
        };
        if self.modules[index].loaded.is_none() {
            let entry = &self.modules[index];
            let loaded =
                match load_module(Path::new(&entry.path), entry.build_id.as_deref(), entry.base, &self.debug_root) {
                    Ok(m) => {
                        if m.dwarf.is_none() {
                            self.warnings.push(format!(
                                "{}: no debug info; functions from the symbol table, source lines unknown",
                                entry.path
                            ));
                        }
                        Some(m)
                    }
                    Err(e) => {
                        self.warnings.push(format!("{}: cannot read ({e}); its code shows as ??", entry.path));
                        None
                    }
                };
            self.modules[index].loaded = Some(loaded);
        }
        let entry = &self.modules[index];
        let module_name = Path::new(&entry.path).file_name().map(|n| n.to_string_lossy().into_owned());
        let Some(Some(m)) = &entry.loaded else {
            return Location::unknown(module_name);
        };
        let address = pc.wrapping_sub(m.bias);
        let mut location = Location::unknown(module_name);
        if let Some(f) = containing_function(&m.functions, address) {
            location.function = f.name.clone();
        }
        if let Some(ctx) = &m.dwarf {
            if let Ok(Some(l)) = ctx.find_location(address) {
                location.file = l.file.map(str::to_string);
                location.line = l.line;
                location.column = l.column;
            }
            if let Ok(mut frames) = ctx.find_frames(address).skip_all_loads() {
                let mut all = Vec::new();
                while let Ok(Some(frame)) = frames.next() {
                    let function = frame
                        .function
                        .as_ref()
                        .and_then(|f| f.raw_name().ok().map(|n| demangle(n.as_ref())))
                        .unwrap_or_else(|| "??".to_string());
                    let (file, line) = match &frame.location {
                        Some(l) => (l.file.map(str::to_string), l.line),
                        None => (None, None),
                    };
                    all.push(InlinedFrame { function, file, line });
                }
                // The last frame is the physical function; the ones before
                // it were inlined into it.
                if all.len() > 1 {
                    all.pop();
                    location.inlined = all;
                }
                if location.function == "??" {
                    if let Some(f) = location.inlined.last() {
                        location.function = f.function.clone();
                    }
                }
            }
        }
        if location.function == "??" {
            // Unnamed code still has a home: say which module it is in.
            if let Some(m) = &location.module {
                location.function = format!("?? ({m})");
            }
        }
        location
    }
}

fn containing_function(functions: &[FunctionSymbol], address: u64) -> Option<&FunctionSymbol> {
    let i = functions.partition_point(|f| f.address <= address);
    let f = functions.get(i.checked_sub(1)?)?;
    // Size 0 (hand-written assembly): accept up to the next symbol.
    (f.size == 0 || address < f.address.saturating_add(f.size)).then_some(f)
}

fn load_module(path: &Path, build_id: Option<&str>, base: u64, debug_root: &Path) -> Result<LoadedModule, String> {
    let data = std::fs::read(path).map_err(|e| e.to_string())?;
    let file = object::File::parse(&*data).map_err(|e| e.to_string())?;
    // A file rebuilt since the recording would name the wrong code.
    let found = file.build_id().ok().flatten().map(hex);
    if let (Some(want), Some(found)) = (build_id, found.as_deref()) {
        if want != found {
            return Err(format!("changed since the recording (build-id {found}, recorded {want})"));
        }
    }
    let first_segment = file.segments().filter(|s| s.size() > 0).map(|s| s.address() & !0xfff).min().unwrap_or(0);
    let bias = if file.kind() == ObjectKind::Dynamic { base.wrapping_sub(first_segment) } else { 0 };
    let mut functions = function_symbols(&file);
    let mut dwarf = if file.section_by_name(".debug_info").is_some() { load_dwarf(&file).ok() } else { None };
    if dwarf.is_none() {
        if let Some(debug_path) = file.build_id().ok().flatten().and_then(|id| build_id_path(debug_root, id)) {
            if let Ok(debug_data) = std::fs::read(&debug_path) {
                if let Ok(debug_file) = object::File::parse(&*debug_data) {
                    dwarf = load_dwarf(&debug_file).ok();
                    if functions.is_empty() {
                        functions = function_symbols(&debug_file);
                    }
                }
            }
        }
    }
    Ok(LoadedModule { bias, functions, dwarf })
}

fn function_symbols(file: &object::File<'_>) -> Vec<FunctionSymbol> {
    let mut functions: Vec<FunctionSymbol> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && !s.is_undefined() && s.address() != 0)
        .filter_map(|s| Some(FunctionSymbol { address: s.address(), size: s.size(), name: demangle(s.name().ok()?) }))
        .collect();
    // Unsized symbols (assembly labels such as `_init`) would otherwise
    // swallow whatever follows them, the PLT included: give them their own
    // section's extent at most.
    for f in functions.iter_mut().filter(|f| f.size == 0) {
        if let Some(section) = file.sections().find(|s| (s.address()..s.address() + s.size()).contains(&f.address)) {
            f.size = section.address() + section.size() - f.address;
        }
    }
    functions.extend(plt_stubs(file));
    // Among aliases at one address prefer sized symbols, then public names
    // (`calloc` over `__libc_calloc`), then the shortest (`free`, not `cfree`).
    let underscores = |n: &str| n.len() - n.trim_start_matches('_').len();
    functions.sort_by(|a, b| {
        a.address
            .cmp(&b.address)
            .then(b.size.cmp(&a.size))
            .then(underscores(&a.name).cmp(&underscores(&b.name)))
            .then(a.name.len().cmp(&b.name.len()))
            .then(a.name.cmp(&b.name))
    });
    functions.dedup_by_key(|f| f.address);
    functions
}

/// Names PLT entries `symbol@plt`: each entry jumps through a GOT slot
/// (`jmp *slot(%rip)`, possibly after `endbr64` and with a `bnd` prefix),
/// and the dynamic relocation of that slot names the symbol.
fn plt_stubs(file: &object::File<'_>) -> Vec<FunctionSymbol> {
    let Some(relocations) = file.dynamic_relocations() else { return Vec::new() };
    let Some(dynsym) = file.dynamic_symbol_table() else { return Vec::new() };
    let mut slot_names: HashMap<u64, String> = HashMap::new();
    for (slot, reloc) in relocations {
        if let object::RelocationTarget::Symbol(index) = reloc.target() {
            if let Some(name) = dynsym.symbol_by_index(index).ok().and_then(|s| s.name().ok().map(demangle)) {
                slot_names.insert(slot, name);
            }
        }
    }
    const ENTRY: u64 = 16;
    let mut stubs = Vec::new();
    for section in file.sections() {
        if !matches!(section.name(), Ok(".plt" | ".plt.sec" | ".plt.got")) {
            continue;
        }
        let Ok(bytes) = section.data() else { continue };
        for (i, entry) in bytes.chunks(ENTRY as usize).enumerate() {
            let address = section.address() + i as u64 * ENTRY;
            let Some(p) = entry.windows(2).position(|w| w == [0xff, 0x25]) else { continue };
            let Some(rel) = entry.get(p + 2..p + 6) else { continue };
            let rel = i32::from_le_bytes([rel[0], rel[1], rel[2], rel[3]]);
            let slot = address.wrapping_add(p as u64 + 6).wrapping_add_signed(i64::from(rel));
            if let Some(name) = slot_names.get(&slot) {
                stubs.push(FunctionSymbol { address, size: ENTRY, name: format!("{name}@plt") });
            }
        }
    }
    stubs
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn build_id_path(root: &Path, id: &[u8]) -> Option<PathBuf> {
    let hex = hex(id);
    if hex.len() < 3 {
        return None;
    }
    let p = root.join(".build-id").join(&hex[..2]).join(format!("{}.debug", &hex[2..]));
    p.exists().then_some(p)
}

fn load_dwarf(file: &object::File<'_>) -> Result<addr2line::Context<Reader>, gimli::Error> {
    let endian = if file.is_little_endian() { gimli::RunTimeEndian::Little } else { gimli::RunTimeEndian::Big };
    let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
        // `uncompressed_data` undoes SHF_COMPRESSED and `.zdebug_*` alike.
        let data =
            file.section_by_name(id.name()).and_then(|s| s.uncompressed_data().ok()).unwrap_or(Cow::Borrowed(&[][..]));
        Ok(gimli::EndianArcSlice::new(Arc::from(&*data), endian))
    };
    let dwarf = gimli::Dwarf::load(load)?;
    addr2line::Context::from_dwarf(dwarf)
}

/// Demangles Rust (hash dropped) and C++ names; others are returned as is.
pub fn demangle(raw: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(raw) {
        return format!("{d:#}");
    }
    if raw.starts_with("_Z") {
        if let Ok(Ok(s)) = cpp_demangle::Symbol::new(raw).map(|s| s.demangle(&Default::default())) {
            return s;
        }
    }
    raw.to_string()
}

/// The last two components of a path: enough to recognise a file.
fn short_path(path: &str) -> &str {
    let mut cut = path.len();
    for _ in 0..2 {
        match path[..cut].rfind('/') {
            Some(i) => cut = i,
            None => return path,
        }
    }
    &path[cut + 1..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_paths() {
        assert_eq!(short_path("/a/b/c/d.c"), "c/d.c");
        assert_eq!(short_path("d.c"), "d.c");
        assert_eq!(short_path("c/d.c"), "c/d.c");
    }

    #[test]
    fn unknown_pcs_are_question_marks() {
        let mut s = Symbolizer::new(&[]);
        let l = s.locate(0x1234);
        assert_eq!(l.function, "??");
        assert_eq!(l.file_line(), "??:??");
    }

    #[test]
    fn demangles() {
        assert_eq!(demangle("_ZN3foo3bar17h0123456789abcdefE"), "foo::bar");
        assert_eq!(demangle("_Z3addii"), "add(int, int)");
        assert_eq!(demangle("main"), "main");
    }
}
