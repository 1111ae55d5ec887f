//! ELF files: opened with care (module paths in a trace are untrusted
//! input), their function symbols, and the facts that place them in a
//! process (load bias, entry point, GOT slots of IFUNCs and imports).
//!
//! Function names come from `.symtab`, `.dynsym`, the PLT (`name@plt`), the
//! separate debug file under `/usr/lib/debug/.build-id/` (which carries the
//! `.symtab` a distribution strips: glibc's `__memmove_avx_unaligned_erms`
//! and friends) and MiniDebugInfo (`.gnu_debugdata`, an xz-compressed ELF
//! with a `.symtab`), merged.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use object::read::elf::{ElfFile64, Rela, SectionHeader, Sym};
use object::{Endianness, Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind, elf};
use trace_rt::format::Module;

use super::SymbolError;
use super::names::{demangle, hex};

/// Largest ELF file linetrace maps.
pub const MAX_ELF_BYTES: u64 = 4 << 30;
/// Largest MiniDebugInfo section, decompressed.
const MAX_DEBUGDATA_BYTES: u64 = 256 << 20;

/// A read-only map of an ELF file.
pub struct MappedElf {
    map: memmap2::Mmap,
    /// Where it was found.
    pub path: PathBuf,
}

impl std::ops::Deref for MappedElf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map
    }
}

/// Maps the ELF file at `path`, refusing what is not a regular file of a
/// sane size that starts like an ELF file: a path from a trace may name
/// `/dev/zero`, a FIFO or a huge file.
pub fn map_elf(path: &Path) -> Result<MappedElf, SymbolError> {
    let io = |cause| SymbolError::Io { path: path.to_path_buf(), cause };
    // O_NONBLOCK: opening a FIFO must not wait for a writer; the fstat
    // below then refuses it.
    let file: File =
        OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(SymbolError::NotRegularFile(path.to_path_buf()));
    }
    if meta.len() > MAX_ELF_BYTES {
        return Err(SymbolError::TooLarge { path: path.to_path_buf(), bytes: meta.len() });
    }
    let mut magic = [0u8; 4];
    if meta.len() < 64 || (&file).read_exact(&mut magic).is_err() || magic != *b"\x7fELF" {
        return Err(SymbolError::NotElf(path.to_path_buf()));
    }
    // SAFETY: the map is read-only and private to this process. A file
    // truncated by someone else while mapped could fault on access, which
    // is the risk every debugger and profiler reading binaries takes.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
    Ok(MappedElf { map, path: path.to_path_buf() })
}

/// One function symbol of an ELF file, at its link-time address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionSymbol {
    /// The symbol as stored (mangled).
    pub raw: String,
    /// Demangled name (Rust without the hash, C++ with parameters), or `raw`.
    pub name: String,
    /// Link-time address (add the load bias for PIE and libraries).
    pub address: u64,
    /// Size in bytes (unsized assembly labels get their section's extent).
    pub size: u64,
    /// An `STT_GNU_IFUNC` symbol: `address` is a resolver that picks the
    /// implementation at load time.
    pub ifunc: bool,
    /// Global or weak binding: visible outside the file.
    pub global: bool,
}

/// A global or static variable: a data symbol with a size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataSymbol {
    /// Demangled name.
    pub name: String,
    /// Link-time address.
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
}

/// What a GOT slot is filled with at load time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotTarget {
    /// `R_X86_64_IRELATIVE`: the result of the resolver at this link-time
    /// address (an IFUNC's selected implementation).
    Resolver(u64),
    /// `R_X86_64_JUMP_SLOT`/`GLOB_DAT`: the address of this symbol, wherever
    /// it is defined (for an IFUNC: its selected implementation).
    Symbol(String),
}

/// A GOT slot the dynamic linker (or static start-up code) fills.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GotSlot {
    /// Link-time address of the slot.
    pub slot: u64,
    /// What goes in it.
    pub target: SlotTarget,
}

/// Where to find symbols that are not next to the module.
#[derive(Clone, Debug)]
pub struct SymbolPaths {
    /// Roots with `.build-id/xx/yyyy.debug` separate debug files.
    pub debug_roots: Vec<PathBuf>,
    /// Directories searched, by file name and build-id, for a module that
    /// is missing or changed at its recorded path (a trace moved from
    /// another machine, a checked-in fixture).
    pub module_dirs: Vec<PathBuf>,
}

impl Default for SymbolPaths {
    fn default() -> Self {
        SymbolPaths { debug_roots: vec![PathBuf::from("/usr/lib/debug")], module_dirs: Vec::new() }
    }
}

/// The function symbols and identity of one ELF file.
#[derive(Debug, Default)]
pub struct ElfSymbols {
    /// Functions, sorted by address; at one address the preferred alias
    /// (sized, public, shortest) comes first.
    pub functions: Vec<FunctionSymbol>,
    /// Whether the file itself has a static symbol table with functions
    /// (false for stripped files; `.dynsym` survives stripping).
    pub has_symtab: bool,
    /// Build-id and where its addresses land in a process.
    pub placement: Placement,
    /// Entry point (link-time).
    pub entry: u64,
    /// GOT slots filled at load time with IFUNC results and imports.
    pub got_slots: Vec<GotSlot>,
    /// The separate debug file found for it, if any.
    pub debug_file: Option<PathBuf>,
    /// Variables (data symbols with a size), sorted by address.
    pub variables: Vec<DataSymbol>,
}

impl ElfSymbols {
    /// Reads the symbols of the ELF file at `path` (x86-64 only), merging
    /// those of its separate debug file and MiniDebugInfo.
    pub fn load(path: &Path, paths: &SymbolPaths) -> Result<Self, SymbolError> {
        let data = map_elf(path)?;
        Self::parse(&data, path, paths)
    }

    /// Like [`ElfSymbols::load`], from a mapped file.
    pub fn parse(data: &[u8], path: &Path, paths: &SymbolPaths) -> Result<Self, SymbolError> {
        let file = parse_x86_64(data, path)?;
        let mut functions = function_symbols(&file);
        let mut variables = data_symbols(&file);
        let has_symtab = file.symbols().any(|s| s.kind() == SymbolKind::Text && !s.is_undefined());
        let extra = ExtraSymbolFiles::find(&file, paths);
        extra.for_each(|elf| {
            functions.extend(function_symbols(elf));
            variables.extend(data_symbols(elf));
        });
        functions.extend(plt_stubs(&file));
        sort_aliases(&mut functions);
        variables.sort_by(|a, b| a.address.cmp(&b.address).then(b.size.cmp(&a.size)).then(a.name.cmp(&b.name)));
        variables.dedup_by(|a, b| a.address == b.address);
        Ok(ElfSymbols {
            functions,
            has_symtab,
            placement: Placement::of(&file),
            entry: file.entry(),
            got_slots: got_slots(&file),
            debug_file: extra.debug.map(|d| d.path),
            variables,
        })
    }

    /// What to add to a link-time address of this file to get its address
    /// in a process where it is mapped as `module`.
    pub fn load_bias(&self, module: &Module) -> u64 {
        self.placement.load_bias(module)
    }

    /// The variable containing link-time `address`.
    pub fn variable_at(&self, address: u64) -> Option<&DataSymbol> {
        let i = self.variables.partition_point(|v| v.address <= address);
        let v = self.variables.get(i.checked_sub(1)?)?;
        (address < v.address.saturating_add(v.size)).then_some(v)
    }

    /// The function containing link-time `address`: its preferred alias.
    pub fn containing(&self, address: u64) -> Option<&FunctionSymbol> {
        let i = self.functions.partition_point(|f| f.address <= address);
        let at = self.functions.get(i.checked_sub(1)?)?.address;
        let first = self.functions.partition_point(|f| f.address < at);
        let f = &self.functions[first];
        (address < f.address.saturating_add(f.size.max(1))).then_some(f)
    }
}

/// The address at which file offset 0 of `module` is mapped.
pub fn module_base(module: &Module) -> Option<u64> {
    module.ranges.iter().find(|r| r.file_offset == 0).map(|r| r.start)
}

/// Where an ELF file's addresses land in a process, and which build it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// GNU build-id, lowercase hex.
    pub build_id: Option<String>,
    /// Whether the file is position independent (needs a load bias).
    pub position_independent: bool,
    /// Lowest virtual address of a loadable segment, page-aligned: the
    /// address that the mapping at file offset 0 corresponds to.
    pub first_segment_address: u64,
}

impl Placement {
    fn of(file: &ElfFile64<'_, Endianness>) -> Self {
        Placement {
            build_id: file.build_id().ok().flatten().map(hex),
            position_independent: file.kind() == object::ObjectKind::Dynamic,
            first_segment_address: file
                .segments()
                .filter(|s| s.size() > 0)
                .map(|s| s.address() & !0xfff)
                .min()
                .unwrap_or(0),
        }
    }

    /// What to add to a link-time address of this file to get its address
    /// in a process where it is mapped as `module`.
    pub fn load_bias(&self, module: &Module) -> u64 {
        if !self.position_independent {
            return 0;
        }
        module_base(module).unwrap_or(0).wrapping_sub(self.first_segment_address)
    }
}

/// Visits the link-time address and stored (mangled) name of every function
/// symbol of the ELF file at `path`, from the same tables as
/// [`ElfSymbols::load`] (PLT entries included), in no particular order and
/// possibly more than once; returns the file's placement.
///
/// This is what a recorder needs when the traced function starts (entry
/// points for tail calls, allocator entries by name): it neither demangles,
/// sorts nor keeps names. On glibc with its debug file that is ~0.4 ms
/// against ~4 ms for [`ElfSymbols::load`], a cost every recording pays
/// while the program waits at the function's entry.
pub fn scan_functions(
    path: &Path,
    paths: &SymbolPaths,
    mut visit: impl FnMut(u64, &str),
) -> Result<Placement, SymbolError> {
    let data = map_elf(path)?;
    let file = parse_x86_64(&data, path)?;
    let mut visit_file = |elf: &ElfFile64<'_, Endianness>| {
        for (symbol, name) in defined_functions(elf) {
            visit(symbol.address(), name);
        }
    };
    visit_file(&file);
    ExtraSymbolFiles::find(&file, paths).for_each(&mut visit_file);
    for stub in plt_stubs(&file) {
        visit(stub.address, &stub.raw);
    }
    Ok(Placement::of(&file))
}

/// Parses `data` as an x86-64 ELF file, saying what else it is when not.
fn parse_x86_64<'d>(data: &'d [u8], path: &Path) -> Result<ElfFile64<'d, Endianness>, SymbolError> {
    let wrong_machine = |arch: object::Architecture| match arch {
        object::Architecture::Unknown => SymbolError::NoMachine(path.to_path_buf()),
        arch => SymbolError::WrongArchitecture { path: path.to_path_buf(), arch: format!("{arch:?}") },
    };
    let file = ElfFile64::<Endianness>::parse(data).map_err(|cause| match object::File::parse(data) {
        Ok(other) if other.architecture() != object::Architecture::X86_64 => wrong_machine(other.architecture()),
        _ => SymbolError::Parse { path: path.to_path_buf(), cause },
    })?;
    if file.architecture() != object::Architecture::X86_64 {
        return Err(wrong_machine(file.architecture()));
    }
    Ok(file)
}

/// The symbol tables a module keeps outside its own: the separate debug
/// file found by build-id, and MiniDebugInfo.
struct ExtraSymbolFiles {
    debug: Option<MappedElf>,
    mini: Option<Vec<u8>>,
}

impl ExtraSymbolFiles {
    fn find(file: &ElfFile64<'_, Endianness>, paths: &SymbolPaths) -> Self {
        let debug = file.build_id().ok().flatten().and_then(|id| {
            paths.debug_roots.iter().find_map(|root| build_id_path(root, id).and_then(|p| map_elf(&p).ok()))
        });
        let mini = file.section_by_name(".gnu_debugdata").and_then(|s| s.data().ok()).and_then(decompress_xz);
        ExtraSymbolFiles { debug, mini }
    }

    /// Calls `f` with each of them that parses.
    fn for_each(&self, mut f: impl FnMut(&ElfFile64<'_, Endianness>)) {
        let debug = self.debug.as_deref();
        for data in debug.into_iter().chain(self.mini.as_deref()) {
            if let Ok(elf) = ElfFile64::<Endianness>::parse(data) {
                f(&elf);
            }
        }
    }
}

/// The function symbols of `.symtab` and `.dynsym` worth a name: defined,
/// at a non-zero address, named. The one filter behind
/// [`function_symbols`] and [`scan_functions`].
fn defined_functions<'f, 'd>(
    file: &'f ElfFile64<'d, Endianness>,
) -> impl Iterator<Item = (object::read::elf::ElfSymbol64<'d, 'f, Endianness>, &'d str)> {
    file.symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && !s.is_undefined() && s.address() != 0)
        .filter_map(|s| {
            let name = s.name().ok().filter(|n| !n.is_empty())?;
            Some((s, name))
        })
}

/// Function symbols of `.symtab` and `.dynsym`, unsized ones bounded by
/// their section.
fn function_symbols(file: &ElfFile64<'_, Endianness>) -> Vec<FunctionSymbol> {
    let mut functions: Vec<FunctionSymbol> = defined_functions(file)
        .map(|(s, raw)| FunctionSymbol {
            raw: raw.to_string(),
            name: demangle(raw),
            address: s.address(),
            size: s.size(),
            ifunc: s.elf_symbol().st_type() == elf::STT_GNU_IFUNC,
            global: s.is_global(),
        })
        .collect();
    // Unsized symbols (assembly labels such as `_init`) would otherwise
    // swallow whatever follows them, the PLT included.
    for f in functions.iter_mut().filter(|f| f.size == 0) {
        if let Some(section) = file.sections().find(|s| (s.address()..s.address() + s.size()).contains(&f.address)) {
            f.size = section.address() + section.size() - f.address;
        }
    }
    functions
}

/// Data symbols with a size (variables), from `.symtab` and `.dynsym`.
fn data_symbols(file: &ElfFile64<'_, Endianness>) -> Vec<DataSymbol> {
    file.symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Data && !s.is_undefined() && s.size() > 0 && s.address() != 0)
        .filter_map(|s| {
            let raw = s.name().ok().filter(|n| !n.is_empty())?;
            Some(DataSymbol { name: demangle(raw), address: s.address(), size: s.size() })
        })
        .collect()
}

/// Sorts by address; among aliases at one address prefers sized symbols,
/// then public names (`calloc` over `__libc_calloc`), then the shortest
/// (`free`, not `cfree`); drops exact duplicates (a name in both the file
/// and its debug file).
fn sort_aliases(functions: &mut Vec<FunctionSymbol>) {
    let underscores = |n: &str| n.len() - n.trim_start_matches('_').len();
    functions.sort_by(|a, b| {
        a.address
            .cmp(&b.address)
            .then(b.size.cmp(&a.size))
            .then(underscores(&a.name).cmp(&underscores(&b.name)))
            .then(a.name.len().cmp(&b.name.len()))
            .then(a.raw.cmp(&b.raw))
    });
    functions.dedup_by(|a, b| a.address == b.address && a.raw == b.raw);
}

/// Names PLT entries `symbol@plt`: each entry jumps through a GOT slot
/// (`jmp *slot(%rip)`, possibly after `endbr64` and with a `bnd` prefix),
/// and the dynamic relocation of that slot names the symbol.
fn plt_stubs(file: &ElfFile64<'_, Endianness>) -> Vec<FunctionSymbol> {
    let slot_names: HashMap<u64, String> = got_slots(file)
        .into_iter()
        .filter_map(|g| match g.target {
            SlotTarget::Symbol(name) => Some((g.slot, demangle(&name))),
            SlotTarget::Resolver(_) => None,
        })
        .collect();
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
                stubs.push(FunctionSymbol {
                    raw: format!("{name}@plt"),
                    name: format!("{name}@plt"),
                    address,
                    size: ENTRY,
                    ifunc: false,
                    global: false,
                });
            }
        }
    }
    stubs
}

/// GOT slots filled at load time: IRELATIVE (static binaries and libc's own
/// IFUNC calls), JUMP_SLOT and GLOB_DAT (imports), from every `SHT_RELA`
/// section (static binaries keep IRELATIVE in `.rela.iplt`, which is not
/// linked to a dynamic symbol table).
fn got_slots(file: &ElfFile64<'_, Endianness>) -> Vec<GotSlot> {
    let endian = file.endian();
    let data = file.data();
    let sections = file.elf_section_table();
    let mut slots = Vec::new();
    for header in sections.iter() {
        let Ok(Some((relocations, link))) = header.rela(endian, data) else { continue };
        let symbols = sections.symbol_table_by_index(endian, data, link).ok();
        for r in relocations {
            let target = match r.r_type(endian, false) {
                elf::R_X86_64_IRELATIVE => SlotTarget::Resolver(r.r_addend(endian) as u64),
                elf::R_X86_64_JUMP_SLOT | elf::R_X86_64_GLOB_DAT => {
                    let Some(table) = &symbols else { continue };
                    let Ok(sym) = table.symbol(object::SymbolIndex(r.r_sym(endian, false) as usize)) else {
                        continue;
                    };
                    let Ok(name) = sym.name(endian, table.strings()) else { continue };
                    SlotTarget::Symbol(String::from_utf8_lossy(name).into_owned())
                }
                _ => continue,
            };
            slots.push(GotSlot { slot: r.r_offset(endian), target });
        }
    }
    slots
}

/// `root/.build-id/xx/yyyy.debug` for a build-id, if the file exists.
fn build_id_path(root: &Path, id: &[u8]) -> Option<PathBuf> {
    let hex = hex(id);
    if hex.len() < 3 {
        return None;
    }
    let p = root.join(".build-id").join(&hex[..2]).join(format!("{}.debug", &hex[2..]));
    p.is_file().then_some(p)
}

/// Decompresses MiniDebugInfo, refusing anything that grows past
/// [`MAX_DEBUGDATA_BYTES`].
fn decompress_xz(data: &[u8]) -> Option<Vec<u8>> {
    struct Capped(Vec<u8>);
    impl std::io::Write for Capped {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if (self.0.len() + buf.len()) as u64 > MAX_DEBUGDATA_BYTES {
                return Err(std::io::Error::other("MiniDebugInfo too large"));
            }
            self.0.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Capped(Vec::new());
    lzma_rs::xz_decompress(&mut std::io::BufReader::new(data), &mut out).ok()?;
    Some(out.0)
}

/// Finds the file for a recorded module: its recorded path when that file
/// has the recorded build-id, else a file of the same name with that
/// build-id in one of `paths.module_dirs`. Returns the path to use, or why
/// none fits.
pub fn find_module_file(module: &Module, paths: &SymbolPaths) -> Result<PathBuf, SymbolError> {
    let recorded = Path::new(&module.path);
    let fits = |p: &Path| -> Result<(), SymbolError> {
        let found = build_id_of(p)?;
        match (&module.build_id, found) {
            (Some(want), Some(found)) if *want != found => {
                Err(SymbolError::BuildIdMismatch { path: p.to_path_buf(), found, recorded: want.clone() })
            }
            _ => Ok(()),
        }
    };
    let first = match fits(recorded) {
        Ok(()) => return Ok(recorded.to_path_buf()),
        Err(e) => e,
    };
    if let Some(name) = recorded.file_name() {
        for dir in &paths.module_dirs {
            let candidate = dir.join(name);
            if candidate.is_file() && fits(&candidate).is_ok() {
                return Ok(candidate);
            }
        }
    }
    Err(first)
}

/// The build-id of the ELF file at `path`.
pub fn build_id_of(path: &Path) -> Result<Option<String>, SymbolError> {
    let data = map_elf(path)?;
    let file = object::File::parse(&*data).map_err(|cause| SymbolError::Parse { path: path.to_path_buf(), cause })?;
    Ok(file.build_id().ok().flatten().map(hex))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The files this test process runs: itself (Rust, with a PLT) and the
    /// C library it links (with its separate debug file where installed).
    fn running_files() -> Vec<PathBuf> {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("own memory map");
        let libc = maps.lines().filter_map(|l| l.split_whitespace().nth(5)).find(|p| p.contains("/libc.so"));
        std::iter::once(std::env::current_exe().expect("own path")).chain(libc.map(PathBuf::from)).collect()
    }

    #[test]
    fn scanning_finds_exactly_the_functions_loading_finds() {
        let paths = SymbolPaths::default();
        let files = running_files();
        assert_eq!(files.len(), 2, "the test binary and libc: {files:?}");
        for path in files {
            let loaded = ElfSymbols::load(&path, &paths).expect("loads");
            let want: BTreeSet<(u64, String)> = loaded.functions.iter().map(|f| (f.address, f.raw.clone())).collect();
            let mut got = BTreeSet::new();
            let placement = scan_functions(&path, &paths, |address, raw| {
                got.insert((address, raw.to_string()));
            })
            .expect("scans");
            assert!(want.len() > 100, "{}: only {} functions", path.display(), want.len());
            let differ: Vec<_> = want.symmetric_difference(&got).take(5).collect();
            assert!(differ.is_empty(), "{}: found by only one of the two: {differ:?}", path.display());
            assert_eq!(placement, loaded.placement, "{}", path.display());
        }
    }
}
