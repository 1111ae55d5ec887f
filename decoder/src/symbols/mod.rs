//! Symbols, shared by the recorder and the decoder: ELF function tables
//! ([`elf`]), names and name resolution ([`names`]), and the symbolizer that
//! turns a pc of a trace into function, file, line and inlined frames.
//!
//! - Function means the containing symbol (as valgrind reports it), from the
//!   static or dynamic symbol table, the separate debug file or
//!   MiniDebugInfo, demangled (Rust without the hash, C++). Inlined frames
//!   from DWARF are extra detail.
//! - File/line/column come from the DWARF line table (the innermost inlined
//!   location, as cachegrind attributes lines).
//! - DWARF is read from the module itself (compressed sections included) or,
//!   when the module has none, from its separate debug file.
//! - A module without debug info gives names from its symbol table, `??`
//!   lines and one warning; a missing or unreadable module gives `??` and a
//!   warning saying why. Never a failure: module paths come from the trace
//!   and are treated as untrusted ([`elf::map_elf`]).
//!
//! [`Symbolizer::locate`] takes `&self` (modules load once, behind locks), so
//! one symbolizer can serve several threads, e.g. as a Bevy resource.

pub mod elf;
pub mod names;

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use object::{Object, ObjectSection};
use serde::Serialize;
use trace_rt::format::Module;

pub use elf::{ElfSymbols, FunctionSymbol, SymbolPaths};
pub use names::demangle;

type Reader = gimli::EndianArcSlice<gimli::RunTimeEndian>;

/// Everything that can go wrong reading symbols or resolving a name.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SymbolError {
    /// A file could not be opened or read.
    #[error("cannot read {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        cause: std::io::Error,
    },
    /// The path names a directory, device, FIFO or socket.
    #[error("{0} is not a regular file")]
    NotRegularFile(PathBuf),
    /// The file is larger than linetrace maps.
    #[error("{path} is {bytes} bytes, larger than the {} bytes linetrace reads as a module", elf::MAX_ELF_BYTES)]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
    },
    /// The file does not start like an ELF file.
    #[error("{0} is not an ELF file")]
    NotElf(PathBuf),
    /// The file is ELF for another machine.
    #[error("{path} is a {arch} file; linetrace reads x86-64 only")]
    WrongArchitecture {
        /// The file.
        path: PathBuf,
        /// Its architecture.
        arch: String,
    },
    /// The ELF header names no machine at all (a damaged or fake file).
    #[error("{0} is a malformed ELF file (its header names no machine)")]
    NoMachine(PathBuf),
    /// The ELF structures are malformed.
    #[error("{path} is a malformed ELF file")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        #[source]
        cause: object::Error,
    },
    /// The file was rebuilt since the recording.
    #[error("{path} changed since the recording (build-id {found}, recorded {recorded})")]
    BuildIdMismatch {
        /// The file.
        path: PathBuf,
        /// Its build-id now.
        found: String,
        /// The build-id in the trace.
        recorded: String,
    },
    /// No function matched a name.
    #[error("no function named '{name}' in {searched}{}", closest_hint(closest))]
    FunctionNotFound {
        /// What the user asked for.
        name: String,
        /// Where it was looked for.
        searched: String,
        /// The nearest names.
        closest: Vec<String>,
    },
    /// Several functions matched a name.
    #[error("'{name}' matches several functions, name one: {}{}", candidates.join(", "), more_hint(*more))]
    AmbiguousFunction {
        /// What the user asked for.
        name: String,
        /// The best candidates (at most [`names::MAX_CANDIDATES`]).
        candidates: Vec<String>,
        /// How many more there are.
        more: usize,
    },
    /// The executable has no function symbols at all.
    #[error("{0} has no symbol table (stripped?): cannot find the function to trace; rebuild without -s")]
    Stripped(PathBuf),
}

fn closest_hint(closest: &[String]) -> String {
    if closest.is_empty() { String::new() } else { format!("; closest: {}", closest.join(", ")) }
}

fn more_hint(more: usize) -> String {
    if more == 0 { String::new() } else { format!(" and {more} more") }
}

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

struct LoadedModule {
    bias: u64,
    symbols: ElfSymbols,
    dwarf: Option<addr2line::Context<Reader>>,
}

struct ModuleEntry {
    module: Module,
    /// Loaded on first use; `None` when the file cannot be used. The lock
    /// is there because addr2line's context caches lazily (it is not Sync).
    loaded: OnceLock<Option<Mutex<LoadedModule>>>,
}

/// Symbolizes pcs of one trace; caches per pc and loads modules lazily.
pub struct Symbolizer {
    modules: Vec<ModuleEntry>,
    cache: Mutex<HashMap<u64, Arc<Location>>>,
    warnings: Mutex<Vec<String>>,
    paths: SymbolPaths,
}

impl Symbolizer {
    /// A symbolizer for the modules of a trace, with the default places for
    /// debug files.
    pub fn new(modules: &[Module]) -> Self {
        Self::with_paths(modules, SymbolPaths::default())
    }

    /// A symbolizer that also looks where `paths` says.
    pub fn with_paths(modules: &[Module], paths: SymbolPaths) -> Self {
        let modules = modules.iter().map(|m| ModuleEntry { module: m.clone(), loaded: OnceLock::new() }).collect();
        Symbolizer { modules, cache: Mutex::new(HashMap::new()), warnings: Mutex::new(Vec::new()), paths }
    }

    /// Warnings so far (modules without debug info, unreadable modules).
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn warn(&self, text: String) {
        self.warnings.lock().unwrap_or_else(|e| e.into_inner()).push(text);
    }

    /// The location of `pc`.
    pub fn locate(&self, pc: u64) -> Arc<Location> {
        if let Some(l) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&pc) {
            return l.clone();
        }
        let location = Arc::new(self.lookup(pc));
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).insert(pc, location.clone());
        location
    }

    /// The variable (data symbol) holding `addr`, with the offset into it,
    /// if a module maps `addr` and names it.
    pub fn variable_at(&self, addr: u64) -> Option<(String, u64)> {
        // `.bss` past the file's last page is an anonymous mapping next to
        // the module's own: also ask the module mapped just below.
        let entry = match self.modules.iter().find(|m| m.module.ranges.iter().any(|r| (r.start..r.end).contains(&addr)))
        {
            Some(entry) => entry,
            None => {
                self.modules
                    .iter()
                    .filter_map(|m| {
                        m.module.ranges.iter().map(|r| r.end).filter(|&end| end <= addr).max().map(|end| (m, end))
                    })
                    .max_by_key(|&(_, end)| end)?
                    .0
            }
        };
        let loaded = entry.loaded.get_or_init(|| self.load(&entry.module)).as_ref();
        let m = loaded?.lock().unwrap_or_else(|e| e.into_inner());
        let link = addr.wrapping_sub(m.bias);
        m.symbols.variable_at(link).map(|v| (v.name.clone(), link - v.address))
    }

    /// The file name of the module mapping `addr`, if any.
    pub fn module_name_at(&self, addr: u64) -> Option<String> {
        let entry = self.modules.iter().find(|m| m.module.ranges.iter().any(|r| (r.start..r.end).contains(&addr)))?;
        Path::new(&entry.module.path).file_name().map(|n| n.to_string_lossy().into_owned())
    }

    /// The module file holding `pc` and the link-time address of `pc` in
    /// it (what `addr2line -e FILE ADDRESS` takes), if the module loads.
    pub fn link_address(&self, pc: u64) -> Option<(PathBuf, u64)> {
        let (entry, loaded) = self.module_of(pc)?;
        let bias = loaded?.lock().unwrap_or_else(|e| e.into_inner()).bias;
        let path = elf::find_module_file(&entry.module, &self.paths).ok()?;
        Some((path, pc.wrapping_sub(bias)))
    }

    /// The module whose mapping holds `pc`, loaded.
    fn module_of(&self, pc: u64) -> Option<(&ModuleEntry, Option<&Mutex<LoadedModule>>)> {
        let entry = self.modules.iter().find(|m| m.module.ranges.iter().any(|r| (r.start..r.end).contains(&pc)))?;
        let loaded = entry.loaded.get_or_init(|| self.load(&entry.module)).as_ref();
        Some((entry, loaded))
    }

    fn load(&self, module: &Module) -> Option<Mutex<LoadedModule>> {
        let loaded = elf::find_module_file(module, &self.paths).and_then(|path| {
            let data = elf::map_elf(&path)?;
            let symbols = ElfSymbols::parse(&data, &path, &self.paths)?;
            let bias = symbols.load_bias(module);
            let file = object::File::parse(&*data).map_err(|cause| SymbolError::Parse { path: path.clone(), cause })?;
            let mut dwarf = if file.section_by_name(".debug_info").is_some() { load_dwarf(&file).ok() } else { None };
            if dwarf.is_none()
                && let Some(debug_path) = &symbols.debug_file
                && let Ok(debug_data) = elf::map_elf(debug_path)
                && let Ok(debug_file) = object::File::parse(&*debug_data)
            {
                dwarf = load_dwarf(&debug_file).ok();
            }
            Ok(LoadedModule { bias, symbols, dwarf })
        });
        match loaded {
            Ok(m) => {
                if m.dwarf.is_none() {
                    self.warn(format!(
                        "{}: no debug info; functions from the symbol table, source lines unknown",
                        module.path
                    ));
                }
                Some(Mutex::new(m))
            }
            Err(e) => {
                self.warn(format!("{}; its code shows as ??", error_chain(&e)));
                None
            }
        }
    }

    fn lookup(&self, pc: u64) -> Location {
        let Some((entry, loaded)) = self.module_of(pc) else {
            return Location::unknown(None);
        };
        let module_name = Path::new(&entry.module.path).file_name().map(|n| n.to_string_lossy().into_owned());
        let Some(loaded) = loaded else {
            return Location::unknown(module_name);
        };
        let m = loaded.lock().unwrap_or_else(|e| e.into_inner());
        let address = pc.wrapping_sub(m.bias);
        let mut location = Location::unknown(module_name);
        if let Some(f) = m.symbols.containing(address) {
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
                if location.function == "??"
                    && let Some(f) = location.inlined.last()
                {
                    location.function = f.function.clone();
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

/// An error and its causes on one line: `a: b: c`.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
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

/// The last two components of a path: enough to recognise a file.
pub fn short_path(path: &str) -> &str {
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
        let s = Symbolizer::new(&[]);
        let l = s.locate(0x1234);
        assert_eq!(l.function, "??");
        assert_eq!(l.file_line(), "??:??");
    }

    #[test]
    fn errors_print_each_cause_once() {
        let e = SymbolError::Io { path: "/x".into(), cause: std::io::Error::from_raw_os_error(27) };
        assert_eq!(error_chain(&e), "cannot read /x: File too large (os error 27)");
    }
}
