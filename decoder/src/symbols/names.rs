//! Function names: demangling, compiler fragments, and resolving a name a
//! user typed to one function.

use super::SymbolError;

/// Demangles Rust (legacy and v0, hash dropped) and C++ names; others are
/// returned as they are.
pub fn demangle(raw: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(raw) {
        return format!("{d:#}");
    }
    if raw.starts_with("_Z") {
        // A GCC clone suffix (`_Z1fi.cold`) is demangled as `[clone .cold]`.
        if let Ok(Ok(s)) = cpp_demangle::Symbol::new(raw).map(|s| s.demangle(&Default::default())) {
            return s;
        }
    }
    raw.to_string()
}

/// Lowercase hex of a byte string (build-ids).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `ns::f(int, char)` -> `ns::f`; names without parameters are unchanged.
pub fn strip_params(name: &str) -> &str {
    match name.find('(') {
        Some(i) if i > 0 => &name[..i],
        _ => name,
    }
}

/// Suffixes compilers give the pieces they split off a function (GCC's
/// `.cold`, `.part.N`, `.isra.N`, `.constprop.N`, LTO's `.lto_priv.N`,
/// clang's `.llvm.N`). Such a piece is code of the function it came from.
const FRAGMENT_KINDS: [&str; 6] = ["cold", "part", "isra", "constprop", "lto_priv", "llvm"];

/// Splits a compiler fragment's name into its function and the fragment
/// kinds: `thrower.cold` -> `("thrower", ["cold"])`; `f(int) [clone
/// .isra.0] [clone .cold]` -> `("f(int)", ["isra", "cold"])`. Names that
/// are not fragments come back whole with no kinds.
pub fn split_fragment(name: &str) -> (&str, Vec<&'static str>) {
    // Demangled C++: trailing " [clone .x.N]" groups.
    let mut base = name;
    let mut kinds = Vec::new();
    while let Some(stripped) = base.strip_suffix(']') {
        let Some(open) = stripped.rfind(" [clone .") else { break };
        let inner = &stripped[open + " [clone .".len()..];
        let Some(found) = fragment_kinds(inner) else { break };
        kinds.splice(0..0, found);
        base = &stripped[..open];
    }
    if !kinds.is_empty() {
        return (base, kinds);
    }
    // Plain symbols: the first '.' after which only fragment parts follow.
    for (i, _) in name.match_indices('.') {
        if i == 0 {
            continue;
        }
        if let Some(found) = fragment_kinds(&name[i + 1..]) {
            return (&name[..i], found);
        }
    }
    (name, Vec::new())
}

/// `cold`, `part.0`, `constprop.0.isra.0` -> their kinds; `None` if any
/// part is not a fragment suffix.
fn fragment_kinds(suffix: &str) -> Option<Vec<&'static str>> {
    let mut kinds = Vec::new();
    for part in suffix.split('.') {
        if part.chars().all(|c| c.is_ascii_digit()) && !part.is_empty() {
            if kinds.is_empty() {
                return None;
            }
            continue;
        }
        kinds.push(*FRAGMENT_KINDS.iter().find(|k| **k == part)?);
    }
    (!kinds.is_empty()).then_some(kinds)
}

/// A function name for tables: the function a fragment belongs to, with
/// the fragment kinds in brackets (`thrower [cold]`).
pub fn display_with_fragments(base: &str, kinds: &[&str]) -> String {
    if kinds.is_empty() { base.to_string() } else { format!("{base} [{}]", kinds.join(", ")) }
}

/// Most candidates an ambiguity error lists.
pub const MAX_CANDIDATES: usize = 20;

/// A function that a name can resolve to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate<'a> {
    /// Which module it is in (an index the caller understands).
    pub module: usize,
    /// Link-time address (aliases share it).
    pub address: u64,
    /// The symbol as stored.
    pub raw: &'a str,
    /// Demangled.
    pub name: &'a str,
    /// Global or weak binding (visible outside its module).
    pub global: bool,
    /// File name of its module, to tell same-named functions apart.
    pub module_name: &'a str,
}

/// Resolves a user-given function name among `functions`: an exact match
/// on the mangled name, the demangled name, or the demangled name without
/// its parameters first; else (if `substrings`) a unique substring of the
/// demangled names.
/// Aliases (same module and address) count as one function; compiler
/// fragments (`f.cold`) and PLT stubs (`f@plt`) only match when named
/// exactly. `what` names where
/// the search happened, for the error.
pub fn resolve<'a>(
    functions: &[Candidate<'a>],
    query: &str,
    what: &str,
    substrings: bool,
) -> Result<Candidate<'a>, SymbolError> {
    let is_fragment = |c: &Candidate<'_>| !split_fragment(c.raw).1.is_empty() || c.raw.ends_with("@plt");
    let exact: Vec<&Candidate<'a>> = functions
        .iter()
        .filter(|c| c.raw == query || c.name == query || (strip_params(c.name) == query && !is_fragment(c)))
        .collect();
    let candidates: Vec<&Candidate<'a>> = if exact.is_empty() && substrings {
        functions.iter().filter(|c| c.name.contains(query) && !is_fragment(c)).collect()
    } else {
        exact
    };
    let same = |a: &Candidate<'_>, b: &Candidate<'_>| a.module == b.module && a.address == b.address;
    if let Some(first) = candidates.first() {
        if candidates.iter().all(|c| same(c, first)) {
            return Ok((*first).clone());
        }
        // One global function among local ones of the same name (libc's
        // exported strlen, ld.so's private one): the global one is meant.
        let global: Vec<&&Candidate<'a>> = candidates.iter().filter(|c| c.global).collect();
        if let Some(g) = global.first()
            && global.iter().all(|c| same(c, g))
            && candidates.iter().all(|c| c.name == g.name)
        {
            return Ok((**g).clone());
        }
        // Ambiguous: one entry per function, best matches first; a name
        // found in several modules says which.
        let mut entries: Vec<(u8, String)> = candidates
            .iter()
            .map(|c| {
                let clash = candidates.iter().any(|o| o.name == c.name && !same(o, c));
                let label = if clash && !c.module_name.is_empty() {
                    format!("{} ({})", c.name, c.module_name)
                } else {
                    c.name.to_string()
                };
                (match_rank(c.name, query), label)
            })
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.len().cmp(&b.1.len())).then(a.1.cmp(&b.1)));
        entries.dedup_by(|a, b| a.1 == b.1);
        let total = entries.len();
        return Err(SymbolError::AmbiguousFunction {
            name: query.to_string(),
            candidates: entries.into_iter().take(MAX_CANDIDATES).map(|(_, n)| n).collect(),
            more: total.saturating_sub(MAX_CANDIDATES),
        });
    }
    let mut scored: Vec<(f64, &str)> = functions
        .iter()
        .filter(|c| !is_fragment(c))
        .map(|c| (strsim::jaro_winkler(query, strip_params(c.name)), c.name))
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
    Err(SymbolError::FunctionNotFound { name: query.to_string(), searched: what.to_string(), closest })
}

/// How well `name` matches `query` (lower is better): the whole name, a
/// whole `::` path segment (`-f std` and `std::rt::lang_start`), a prefix,
/// anything else.
fn match_rank(name: &str, query: &str) -> u8 {
    let bare = strip_params(name);
    if bare == query {
        0
    } else if bare.split("::").any(|segment| segment == query) {
        1
    } else if bare.starts_with(query) {
        2
    } else {
        3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cands<'a>(names: &'a [(&'a str, u64)]) -> Vec<Candidate<'a>> {
        names
            .iter()
            .map(|&(raw, address)| Candidate { module: 0, address, raw, name: raw, global: true, module_name: "" })
            .collect()
    }

    #[test]
    fn demangles_rust_and_cpp() {
        assert_eq!(demangle("_ZN7example4work17h0123456789abcdefE"), "example::work");
        assert_eq!(demangle("_ZN2ns4workEi"), "ns::work(int)");
        assert_eq!(demangle("_Z3addii"), "add(int, int)");
        assert_eq!(demangle("work"), "work");
    }

    #[test]
    fn fragments_split_off_their_function() {
        assert_eq!(split_fragment("thrower.cold"), ("thrower", vec!["cold"]));
        assert_eq!(split_fragment("f.part.0"), ("f", vec!["part"]));
        assert_eq!(split_fragment("f.constprop.0.isra.0"), ("f", vec!["constprop", "isra"]));
        assert_eq!(split_fragment("thrower(int) [clone .cold]"), ("thrower(int)", vec!["cold"]));
        assert_eq!(split_fragment("f(int) [clone .isra.0] [clone .cold]"), ("f(int)", vec!["isra", "cold"]));
        assert_eq!(split_fragment("a.b"), ("a.b", vec![]));
        assert_eq!(split_fragment("x.0"), ("x.0", vec![]));
        assert_eq!(split_fragment(".cold"), (".cold", vec![]));
        assert_eq!(display_with_fragments("thrower", &["cold"]), "thrower [cold]");
    }

    #[test]
    fn resolves_exact_then_unique_substring() {
        let names = [
            ("work", 0x10),
            ("work_helper", 0x20),
            ("ns::mangle(int)", 0x30),
            ("work.cold", 0x40),
            ("strlen@plt", 0x50),
        ];
        let c = cands(&names);
        assert_eq!(resolve(&c, "work", "x", true).expect("exact").address, 0x10);
        assert_eq!(resolve(&c, "helper", "x", true).expect("substring").address, 0x20);
        assert_eq!(resolve(&c, "ns::mangle", "x", true).expect("without params").address, 0x30);
        assert_eq!(resolve(&c, "work.cold", "x", true).expect("a fragment named exactly").address, 0x40);
        assert!(resolve(&c, "strlen", "x", true).is_err(), "a PLT stub is not the function");
        assert_eq!(resolve(&c, "strlen@plt", "x", true).expect("a stub named exactly").address, 0x50);
        match resolve(&c, "wor", "x", true) {
            Err(SymbolError::AmbiguousFunction { candidates, more, .. }) => {
                assert_eq!(candidates, ["work", "work_helper"], "the fragment is not a candidate");
                assert_eq!(more, 0);
            }
            other => panic!("expected ambiguity, got {other:?}"),
        }
        match resolve(&c, "wrk", "x", true) {
            Err(SymbolError::FunctionNotFound { closest, .. }) => assert_eq!(closest[0], "work"),
            other => panic!("expected not found, got {other:?}"),
        }
    }

    #[test]
    fn a_global_function_wins_over_local_namesakes() {
        let c = |module, address, global, module_name| Candidate {
            module,
            address,
            raw: "strlen",
            name: "strlen",
            global,
            module_name,
        };
        let libc = c(1, 0x10, true, "libc.so.6");
        let ld = c(2, 0x20, false, "ld.so");
        assert_eq!(resolve(&[ld.clone(), libc.clone()], "strlen", "x", true).expect("global"), libc);
        let other = c(3, 0x30, true, "libother.so");
        match resolve(&[libc, other], "strlen", "x", true) {
            Err(SymbolError::AmbiguousFunction { candidates, .. }) => {
                assert_eq!(candidates, ["strlen (libc.so.6)", "strlen (libother.so)"])
            }
            other => panic!("two globals are ambiguous: {other:?}"),
        }
    }

    #[test]
    fn aliases_are_one_function_and_long_lists_are_cut() {
        let names = [("malloc", 0x10), ("__libc_malloc", 0x10)];
        assert_eq!(resolve(&cands(&names), "malloc", "x", true).expect("alias").address, 0x10);
        let many: Vec<(String, u64)> = (0..50).map(|i| (format!("core::fmt::stdout_{i}"), i)).collect();
        let mut with_std: Vec<(&str, u64)> = many.iter().map(|(n, a)| (n.as_str(), *a)).collect();
        with_std.push(("std::rt::lang_start", 100));
        match resolve(&cands(&with_std), "std", "x", true) {
            Err(SymbolError::AmbiguousFunction { candidates, more, .. }) => {
                assert_eq!(candidates.len(), MAX_CANDIDATES);
                assert_eq!(more, 51 - MAX_CANDIDATES);
                assert_eq!(candidates[0], "std::rt::lang_start", "a whole path segment ranks first");
            }
            other => panic!("expected ambiguity, got {other:?}"),
        }
    }
}
