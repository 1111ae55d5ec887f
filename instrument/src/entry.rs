//! Which address to stop at: the function the user named (`-f
//! [MODULE:]NAME`), resolved in the executable before it runs when that is
//! possible, else in the modules of the running process once the libraries
//! are mapped and relocated. An IFUNC (`strlen`: a resolver that picks an
//! implementation for the CPU) is followed to the implementation the
//! program really calls, read from the GOT slot that relocation filled.

use std::path::Path;

use decoder::symbols::elf::{GotSlot, SlotTarget};
use decoder::symbols::names::{self, Candidate};
use decoder::symbols::{ElfSymbols, SymbolError};
use trace_rt::format::Module;

use crate::InstrumentError;

/// The function as the user wrote it: `strlen`, `libc.so.6:strlen`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionSpec {
    /// File name (or its stem, `libc`) of the module to look in.
    pub module: Option<String>,
    /// The function name.
    pub name: String,
}

impl FunctionSpec {
    /// Splits `MODULE:NAME` at a single colon (`::` belongs to C++ and Rust
    /// paths and does not split).
    pub fn parse(text: &str) -> FunctionSpec {
        let bytes = text.as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            if b != b':' {
                continue;
            }
            let double = bytes.get(i + 1) == Some(&b':') || (i > 0 && bytes[i - 1] == b':');
            if !double && i > 0 && i + 1 < bytes.len() {
                return FunctionSpec { module: Some(text[..i].to_string()), name: text[i + 1..].to_string() };
            }
        }
        FunctionSpec { module: None, name: text.to_string() }
    }

    /// Whether a module file name is the one the spec names.
    fn names_module(&self, file_name: &str) -> bool {
        match &self.module {
            None => true,
            Some(m) => {
                file_name == m || file_name.strip_prefix(m.as_str()).is_some_and(|rest| rest.starts_with(['.', '-']))
            }
        }
    }
}

/// Where the traced function is, as far as the executable alone tells.
#[derive(Clone, Debug)]
pub enum Plan {
    /// A function of the executable at this link-time address, named so.
    InExecutable {
        /// Link-time address.
        address: u64,
        /// Demangled name.
        name: String,
    },
    /// Only the running process can tell (a library function, an IFUNC):
    /// resolve at the executable's entry (or, for a static executable whose
    /// IFUNCs are relocated by its start-up code, at `main`).
    Deferred {
        /// Link-time address of the stop where resolution happens.
        stop_at: u64,
    },
}

/// Decides how to find `spec` given the executable's symbols.
pub fn plan(spec: &FunctionSpec, exe: &ElfSymbols, path: &Path) -> Result<Plan, InstrumentError> {
    let exe_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let in_exe = spec.module.is_none() || spec.names_module(&exe_name);
    if in_exe {
        match names::resolve(&candidates(0, "", exe), &spec.name, &path.display().to_string(), true) {
            Ok(f) => {
                let ifunc = exe.functions.iter().any(|s| s.address == f.address && s.ifunc);
                if !ifunc {
                    return Ok(Plan::InExecutable { address: f.address, name: f.name.to_string() });
                }
            }
            Err(SymbolError::FunctionNotFound { .. }) if spec.module.is_none() && is_dynamic(exe) => {}
            Err(SymbolError::FunctionNotFound { .. }) if !exe.has_symtab && exe.functions.is_empty() => {
                return Err(SymbolError::Stripped(path.to_path_buf()).into());
            }
            Err(e) => return Err(e.into()),
        }
    }
    // IFUNCs of a static executable are relocated by its start-up code
    // (`apply_irel`), before `main`; a dynamic one is relocated by ld.so
    // (with LD_BIND_NOW, completely) before its entry point runs.
    let main = exe.functions.iter().find(|f| f.raw == "main").map(|f| f.address);
    let stop_at = if is_dynamic(exe) { exe.entry } else { main.unwrap_or(exe.entry) };
    Ok(Plan::Deferred { stop_at })
}

/// A dynamically linked executable has import slots or is PIE; a static
/// non-PIE one has neither.
fn is_dynamic(exe: &ElfSymbols) -> bool {
    exe.placement.position_independent || exe.got_slots.iter().any(|g| matches!(g.target, SlotTarget::Symbol(_)))
}

fn candidates<'a>(module: usize, module_name: &'a str, symbols: &'a ElfSymbols) -> Vec<Candidate<'a>> {
    symbols
        .functions
        .iter()
        .map(|f| Candidate { module, address: f.address, raw: &f.raw, name: &f.name, global: f.global, module_name })
        .collect()
}

/// A module of the running process with its symbols and load bias.
pub struct LoadedModule {
    /// The mapping.
    pub module: Module,
    /// Its symbols.
    pub symbols: ElfSymbols,
    /// Link-time to run-time offset.
    pub bias: u64,
}

/// The function resolved in the running process.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// Run-time address to stop at.
    pub address: u64,
    /// For people: `strlen`, or `strlen (__strlen_avx2)` for an IFUNC.
    pub name: String,
}

/// Resolves `spec` among the modules of the running process. `read_word`
/// reads the target's memory (GOT slots).
pub fn resolve_loaded(
    spec: &FunctionSpec,
    modules: &[LoadedModule],
    read_word: &mut dyn FnMut(u64) -> Option<u64>,
) -> Result<Resolved, InstrumentError> {
    let file_name = |m: &LoadedModule| Path::new(&m.module.path).file_name().map(|n| n.to_string_lossy().into_owned());
    let chosen: Vec<usize> =
        (0..modules.len()).filter(|&i| file_name(&modules[i]).is_some_and(|n| spec.names_module(&n))).collect();
    if chosen.is_empty() {
        let loaded: Vec<String> = modules.iter().filter_map(file_name).collect();
        return Err(InstrumentError::ModuleNotLoaded {
            module: spec.module.clone().unwrap_or_default(),
            loaded: loaded.join(", "),
        });
    }
    let module_names: Vec<String> = modules.iter().map(|m| file_name(m).unwrap_or_default()).collect();
    let all: Vec<Candidate<'_>> =
        chosen.iter().flat_map(|&i| candidates(i, &module_names[i], &modules[i].symbols)).collect();
    let searched = match &spec.module {
        Some(m) => m.clone(),
        None => "the program or its libraries".to_string(),
    };
    // Substrings only where the user pointed: across every library they
    // would match thousands of internal names.
    let f = names::resolve(&all, &spec.name, &searched, spec.module.is_some())?;
    let m = &modules[f.module];
    let ifunc = m.symbols.functions.iter().any(|s| s.address == f.address && s.ifunc);
    if !ifunc {
        return Ok(Resolved { address: f.address.wrapping_add(m.bias), name: f.name.to_string() });
    }
    let implementation = ifunc_target(f.module, f.address, f.raw, modules, read_word).ok_or_else(|| {
        let mut options: Vec<String> = m
            .symbols
            .functions
            .iter()
            .filter(|s| !s.ifunc && s.name.contains(names::strip_params(f.name)) && s.name != f.name)
            .map(|s| s.name.clone())
            .collect();
        options.sort();
        options.dedup();
        InstrumentError::UnresolvedIfunc { name: f.name.to_string(), options: options.join(", ") }
    })?;
    let implementation_name = modules
        .iter()
        .find_map(|lm| {
            let link = implementation.wrapping_sub(lm.bias);
            let inside = lm.module.ranges.iter().any(|r| (r.start..r.end).contains(&implementation));
            inside.then(|| lm.symbols.containing(link).map(|s| s.name.clone())).flatten()
        })
        .unwrap_or_else(|| format!("{implementation:#x}"));
    Ok(Resolved { address: implementation, name: format!("{} ({implementation_name})", f.name) })
}

/// The implementation an IFUNC resolved to: from an IRELATIVE slot that
/// names its resolver, else from any module's import slot for its name.
fn ifunc_target(
    module: usize,
    resolver: u64,
    raw: &str,
    modules: &[LoadedModule],
    read_word: &mut dyn FnMut(u64) -> Option<u64>,
) -> Option<u64> {
    let m = &modules[module];
    let irelative = m.symbols.got_slots.iter().find(|g| g.target == SlotTarget::Resolver(resolver));
    if let Some(GotSlot { slot, .. }) = irelative
        && let Some(v) = read_word(slot.wrapping_add(m.bias)).filter(|&v| v != 0)
    {
        return Some(v);
    }
    let bare = raw.split('@').next().unwrap_or(raw);
    modules.iter().find_map(|other| {
        let slot = other.symbols.got_slots.iter().find(|g| matches!(&g.target, SlotTarget::Symbol(n) if n == bare))?;
        read_word(slot.slot.wrapping_add(other.bias)).filter(|&v| v != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_split_at_a_single_colon() {
        assert_eq!(FunctionSpec::parse("strlen"), FunctionSpec { module: None, name: "strlen".into() });
        assert_eq!(
            FunctionSpec::parse("libc.so.6:strlen"),
            FunctionSpec { module: Some("libc.so.6".into()), name: "strlen".into() }
        );
        assert_eq!(FunctionSpec::parse("ns::f"), FunctionSpec { module: None, name: "ns::f".into() });
        assert_eq!(
            FunctionSpec::parse("libfoo.so:ns::f"),
            FunctionSpec { module: Some("libfoo.so".into()), name: "ns::f".into() }
        );
        let spec = FunctionSpec::parse("libc:strlen");
        assert!(spec.names_module("libc.so.6"));
        assert!(!spec.names_module("libcrypt.so.1"));
    }
}
