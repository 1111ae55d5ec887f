//! Function symbols of ELF files: loading, demangling and resolving a name
//! the user typed to one function.

use std::path::Path;

use object::{Object, ObjectKind, ObjectSegment, ObjectSymbol, SymbolKind};

use crate::InstrumentError;

/// One function symbol of an ELF file, at its link-time address.
#[derive(Clone, Debug)]
pub struct FunctionSymbol {
    /// The symbol's name as stored (mangled).
    pub raw: String,
    /// Demangled name (Rust without the hash, C++ with parameters), or `raw`.
    pub demangled: String,
    /// Link-time address (add the load bias for PIE and libraries).
    pub address: u64,
    /// Size in bytes (0 when unknown).
    pub size: u64,
}

/// The function symbols and identity of one ELF file.
#[derive(Debug)]
pub struct ElfSymbols {
    /// Functions from `.symtab` and `.dynsym`, sorted by address.
    pub functions: Vec<FunctionSymbol>,
    /// Whether the file has a static symbol table (false for stripped files).
    pub has_symtab: bool,
    /// GNU build-id, lowercase hex.
    pub build_id: Option<String>,
    /// Whether the file is position independent (needs a load bias).
    pub position_independent: bool,
    /// Lowest virtual address of a loadable segment, page-aligned: the
    /// address that the mapping at file offset 0 corresponds to.
    pub first_segment_address: u64,
}

impl ElfSymbols {
    /// Reads the symbols of the ELF file at `path`.
    pub fn load(path: &Path) -> Result<Self, InstrumentError> {
        let data = std::fs::read(path).map_err(|e| InstrumentError::Io { path: path.to_path_buf(), cause: e })?;
        let file = object::File::parse(&*data).map_err(|_| InstrumentError::NotElf(path.to_path_buf()))?;
        if file.format() != object::BinaryFormat::Elf {
            return Err(InstrumentError::NotElf(path.to_path_buf()));
        }
        if file.architecture() != object::Architecture::X86_64 {
            return Err(InstrumentError::WrongArchitecture {
                path: path.to_path_buf(),
                arch: format!("{:?}", file.architecture()),
            });
        }
        let mut functions = Vec::new();
        for sym in file.symbols().chain(file.dynamic_symbols()) {
            if sym.kind() != SymbolKind::Text || sym.is_undefined() || sym.address() == 0 {
                continue;
            }
            let Ok(raw) = sym.name() else { continue };
            if raw.is_empty() {
                continue;
            }
            functions.push(FunctionSymbol {
                raw: raw.to_string(),
                demangled: demangle(raw),
                address: sym.address(),
                size: sym.size(),
            });
        }
        // What matters for a stripped executable is whether `.symtab` itself
        // has functions (`.dynsym` survives stripping).
        let has_symtab = file.symbols().any(|s| s.kind() == SymbolKind::Text && !s.is_undefined());
        functions.sort_by(|a, b| a.address.cmp(&b.address).then_with(|| a.raw.cmp(&b.raw)));
        functions.dedup_by(|a, b| a.address == b.address && a.raw == b.raw);
        let build_id = file.build_id().ok().flatten().map(hex);
        let first_segment_address =
            file.segments().filter(|s| s.size() > 0).map(|s| s.address() & !0xfff).min().unwrap_or(0);
        Ok(ElfSymbols {
            functions,
            has_symtab,
            build_id,
            position_independent: file.kind() == ObjectKind::Dynamic,
            first_segment_address,
        })
    }

    /// Resolves a user-given function name: exact match on the mangled name,
    /// the demangled name or the demangled name without its parameter list
    /// first; else a unique substring of the demangled names. Aliases (same
    /// address) count as one function.
    pub fn resolve(&self, name: &str, path: &Path) -> Result<&FunctionSymbol, InstrumentError> {
        let exact: Vec<&FunctionSymbol> = self
            .functions
            .iter()
            .filter(|f| f.raw == name || f.demangled == name || strip_params(&f.demangled) == name)
            .collect();
        if let Some(f) = unique_by_address(&exact) {
            return Ok(f);
        }
        let candidates = if exact.is_empty() {
            self.functions.iter().filter(|f| f.demangled.contains(name)).collect()
        } else {
            exact
        };
        if let Some(f) = unique_by_address(&candidates) {
            return Ok(f);
        }
        if candidates.is_empty() {
            if !self.has_symtab && self.functions.is_empty() {
                return Err(InstrumentError::Stripped(path.to_path_buf()));
            }
            let mut scored: Vec<(f64, &str)> = self
                .functions
                .iter()
                .map(|f| (strsim::jaro_winkler(name, strip_params(&f.demangled)), f.demangled.as_str()))
                .collect();
            scored.sort_by(|a, b| b.0.total_cmp(&a.0));
            let mut closest: Vec<String> = Vec::new();
            for (_, n) in scored {
                if !closest.iter().any(|c| c == n) {
                    closest.push(n.to_string());
                }
                if closest.len() == 5 {
                    break;
                }
            }
            let hint = if self.has_symtab { "" } else { " (the file has no .symtab: stripped?)" };
            return Err(InstrumentError::FunctionNotFound {
                name: name.to_string(),
                path: path.to_path_buf(),
                closest: closest.join(", ") + hint,
            });
        }
        let mut names: Vec<String> = candidates.iter().map(|f| f.demangled.clone()).collect();
        names.sort();
        names.dedup();
        Err(InstrumentError::AmbiguousFunction { name: name.to_string(), candidates: names.join(", ") })
    }
}

fn unique_by_address<'a>(candidates: &[&'a FunctionSymbol]) -> Option<&'a FunctionSymbol> {
    let first = candidates.first()?;
    candidates.iter().all(|f| f.address == first.address).then_some(*first)
}

/// Demangles Rust (legacy and v0, hash dropped) and C++ names.
pub fn demangle(raw: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(raw) {
        return format!("{d:#}");
    }
    if raw.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(raw) {
            if let Ok(s) = sym.demangle(&cpp_demangle::DemangleOptions::default()) {
                return s;
            }
        }
    }
    raw.to_string()
}

/// `ns::f(int, char)` -> `ns::f`; names without parameters are unchanged.
fn strip_params(name: &str) -> &str {
    match name.find('(') {
        Some(i) if i > 0 => &name[..i],
        _ => name,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(raw: &str, address: u64) -> FunctionSymbol {
        FunctionSymbol { raw: raw.into(), demangled: demangle(raw), address, size: 16 }
    }

    fn table(f: Vec<FunctionSymbol>) -> ElfSymbols {
        ElfSymbols {
            functions: f,
            has_symtab: true,
            build_id: None,
            position_independent: false,
            first_segment_address: 0,
        }
    }

    #[test]
    fn demangles_rust_and_cpp() {
        assert_eq!(demangle("_ZN7example4work17h0123456789abcdefE"), "example::work");
        assert_eq!(demangle("_ZN2ns4workEi"), "ns::work(int)");
        assert_eq!(demangle("work"), "work");
    }

    #[test]
    fn resolves_exact_then_unique_substring() {
        let t = table(vec![
            sym("work", 0x10),
            sym("work_helper", 0x20),
            sym("_ZN2ns6mangleEi", 0x30),
            sym("_ZN7example3run17h0123456789abcdefE", 0x40),
        ]);
        let p = Path::new("x");
        assert_eq!(t.resolve("work", p).expect("exact").address, 0x10);
        assert_eq!(t.resolve("helper", p).expect("substring").address, 0x20);
        assert_eq!(t.resolve("ns::mangle", p).expect("without params").address, 0x30);
        assert_eq!(t.resolve("example::run", p).expect("rust").address, 0x40);
        match t.resolve("wor", p) {
            Err(InstrumentError::AmbiguousFunction { candidates, .. }) => {
                assert_eq!(candidates, "work, work_helper")
            }
            other => panic!("expected ambiguity, got {other:?}"),
        }
        match t.resolve("wrk", p) {
            Err(InstrumentError::FunctionNotFound { closest, .. }) => {
                assert!(closest.starts_with("work"))
            }
            other => panic!("expected not found, got {other:?}"),
        }
    }

    #[test]
    fn aliases_are_one_function() {
        let t = table(vec![sym("malloc", 0x10), sym("__libc_malloc", 0x10)]);
        assert_eq!(t.resolve("malloc", Path::new("x")).expect("alias").address, 0x10);
    }
}
