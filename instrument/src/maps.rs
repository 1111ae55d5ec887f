//! The target's memory map (`/proc/PID/maps`) as a list of modules.

use std::path::Path;

use trace_rt::format::{MappedRange, Module};

/// Parses the text of `/proc/PID/maps` into file-backed modules, in order of
/// first mapping. Anonymous and special mappings (`[heap]`, `[stack]`) are
/// left out: they belong to no file to symbolize.
pub fn parse_maps(text: &str) -> Vec<Module> {
    let mut modules: Vec<Module> = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_ascii_whitespace();
        let (Some(range), Some(perms), Some(offset), Some(_dev), Some(_inode)) =
            (fields.next(), fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let path: String = fields.collect::<Vec<_>>().join(" ");
        if !path.starts_with('/') {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(file_offset)) =
            (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16), u64::from_str_radix(offset, 16))
        else {
            continue;
        };
        let r = MappedRange { start, end, file_offset, perms: perms.to_string() };
        match modules.iter_mut().find(|m| m.path == path) {
            Some(m) => m.ranges.push(r),
            None => modules.push(Module { path, build_id: None, ranges: vec![r] }),
        }
    }
    modules
}

/// Every mapping of `pid`, as `[start, end)` in address order.
pub fn mapped_ranges(pid: i32) -> std::io::Result<Vec<(u64, u64)>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let (start, end) = l.split_ascii_whitespace().next()?.split_once('-')?;
            Some((u64::from_str_radix(start, 16).ok()?, u64::from_str_radix(end, 16).ok()?))
        })
        .collect())
}

/// Reads and parses the memory map of `pid`.
pub fn read_maps(pid: i32) -> std::io::Result<Vec<Module>> {
    Ok(parse_maps(&std::fs::read_to_string(format!("/proc/{pid}/maps"))?))
}

/// Finds the module mapped from `path` (comparing canonical paths).
pub fn find_module<'a>(modules: &'a [Module], path: &Path) -> Option<&'a Module> {
    let want = path.canonicalize().ok()?;
    modules.iter().find(|m| Path::new(&m.path).canonicalize().ok().as_deref() == Some(&want))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_file_mappings_and_skips_anonymous_ones() {
        let text = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 123 /tmp/my prog
55d0c0a01000-55d0c0a02000 r-xp 00001000 08:01 123 /tmp/my prog
55d0c1000000-55d0c1021000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000028000 r--p 00000000 08:01 456 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
";
        let m = parse_maps(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].path, "/tmp/my prog");
        assert_eq!(m[0].ranges.len(), 2);
        assert_eq!(m[0].ranges[1].file_offset, 0x1000);
        assert_eq!(m[0].ranges[1].perms, "r-xp");
        assert_eq!(decoder::symbols::elf::module_base(&m[1]), Some(0x7f0000000000));
    }
}
