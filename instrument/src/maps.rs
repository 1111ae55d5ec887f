//! The target's memory map (`/proc/PID/maps`): its modules, its data
//! mappings, its ranges, and a watch on its size.

use std::path::Path;

use trace_rt::format::{DataMapping, MappedRange, Module};

/// One line of `/proc/PID/maps`.
pub(crate) struct MapsLine<'a> {
    pub start: u64,
    pub end: u64,
    pub perms: &'a str,
    pub offset: u64,
    /// The file's path, or `[heap]`, `[stack]`, `[anon:NAME]`; empty for
    /// plain anonymous memory.
    pub path: String,
}

/// The lines of the text of `/proc/PID/maps` (`START-END PERMS OFFSET DEV
/// INODE [PATH]`), in address order; a line that does not parse is left
/// out.
pub(crate) fn maps_lines(text: &str) -> impl Iterator<Item = MapsLine<'_>> {
    text.lines().filter_map(|line| {
        let mut fields = line.split_ascii_whitespace();
        let (range, perms, offset, _dev, _inode) =
            (fields.next()?, fields.next()?, fields.next()?, fields.next()?, fields.next()?);
        let (start, end) = range.split_once('-')?;
        Some(MapsLine {
            start: u64::from_str_radix(start, 16).ok()?,
            end: u64::from_str_radix(end, 16).ok()?,
            perms,
            offset: u64::from_str_radix(offset, 16).ok()?,
            // A path may hold spaces.
            path: fields.collect::<Vec<_>>().join(" "),
        })
    })
}

/// Parses the text of `/proc/PID/maps` into file-backed modules, in order of
/// first mapping. Anonymous and special mappings (`[heap]`, `[stack]`) are
/// left out: they belong to no file to symbolize.
pub fn parse_maps(text: &str) -> Vec<Module> {
    let mut modules: Vec<Module> = Vec::new();
    for line in maps_lines(text).filter(|l| l.path.starts_with('/')) {
        let r =
            MappedRange { start: line.start, end: line.end, file_offset: line.offset, perms: line.perms.to_string() };
        match modules.iter_mut().find(|m| m.path == line.path) {
            Some(m) => m.ranges.push(r),
            None => modules.push(Module { path: line.path, build_id: None, ranges: vec![r] }),
        }
    }
    modules
}

/// Parses the text of `/proc/PID/maps` into the mappings of no module, in
/// address order: memory of no file (`[heap]`, `[stack]`, `[anon:NAME]`,
/// plain anonymous memory) and files whose path `is_module` does not claim
/// (locale data, which is no ELF file). They name the memory a program
/// allocated before a recording began.
pub fn parse_data_mappings(text: &str, is_module: impl Fn(&str) -> bool) -> Vec<DataMapping> {
    maps_lines(text)
        .filter(|l| !is_module(&l.path))
        .map(|l| DataMapping { start: l.start, end: l.end, name: l.path })
        .collect()
}

/// Reads and parses the mappings of `pid` of no module
/// ([`parse_data_mappings`]).
pub fn read_data_mappings(pid: i32, is_module: impl Fn(&str) -> bool) -> std::io::Result<Vec<DataMapping>> {
    Ok(parse_data_mappings(&std::fs::read_to_string(format!("/proc/{pid}/maps"))?, is_module))
}

/// Tells when a process's mappings may have changed: by its mapped size
/// (the first field of `/proc/PID/statm`), read from a file kept open. A
/// read takes a third of a microsecond here, where a read of the map took
/// about 20 (`record -f reads` of miss_heavy.c's 31,250 calls: 1.68 s, and
/// 2.4 s reading the map at every call). A mapping replaced by another of
/// the same size goes unseen.
pub struct MapWatch {
    statm: std::fs::File,
    size: Option<u64>,
}

impl MapWatch {
    /// Watches `pid`.
    pub fn open(pid: i32) -> std::io::Result<MapWatch> {
        Ok(MapWatch { statm: std::fs::File::open(format!("/proc/{pid}/statm"))?, size: None })
    }

    /// True when the mapped size differs from the last call's, at the
    /// first call, and when it cannot be read (the map's own read then
    /// says why).
    pub fn changed(&mut self) -> bool {
        use std::os::unix::fs::FileExt;
        let mut text = [0u8; 128];
        let size = self.statm.read_at(&mut text, 0).ok().and_then(|n| {
            let first = text[..n].split(|&b| b == b' ').next()?;
            std::str::from_utf8(first).ok()?.parse::<u64>().ok()
        });
        let changed = size.is_none() || size != self.size;
        self.size = size;
        changed
    }
}

/// Every mapping of `pid`, as `[start, end)` in address order.
pub fn mapped_ranges(pid: i32) -> std::io::Result<Vec<(u64, u64)>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    Ok(maps_lines(&text).map(|l| (l.start, l.end)).collect())
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

    #[test]
    fn a_new_mapping_changes_the_mapped_size() {
        let mut watch = MapWatch::open(std::process::id() as i32).expect("statm");
        assert!(watch.changed(), "the first look");
        let mapped = |len| {
            // SAFETY: a private anonymous mapping of our own, unmapped below.
            unsafe {
                libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
            }
        };
        // Another thread of the test binary may map memory meanwhile: a
        // change seen without a mapping of ours is possible, none missed is
        // what counts.
        let _ = watch.changed();
        let len = 64 << 20;
        let at = mapped(len);
        assert_ne!(at, libc::MAP_FAILED);
        assert!(watch.changed(), "64 MiB mapped");
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(at, len) };
        assert!(watch.changed(), "64 MiB unmapped");
    }

    #[test]
    fn data_mappings_are_the_ones_of_no_module() {
        let text = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 123 /tmp/my prog
55d0c1000000-55d0c1021000 rw-p 00000000 00:00 0 [heap]
7efff0000000-7efff0100000 rw-p 00000000 00:00 0
7efff0100000-7efff0200000 rw-p 00000000 00:00 0 [anon:my arena]
7f0000000000-7f0000028000 r--p 00000000 08:01 456 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000100000-7f0000200000 r--p 00000000 08:01 789 /usr/lib/locale/C.utf8/LC_CTYPE
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
";
        let mappings = parse_data_mappings(text, |path| path == "/tmp/my prog" || path.ends_with("libc.so.6"));
        let got: Vec<(u64, u64, &str)> = mappings.iter().map(|m| (m.start, m.end, m.name.as_str())).collect();
        assert_eq!(
            got,
            [
                (0x55d0c1000000, 0x55d0c1021000, "[heap]"),
                (0x7efff0000000, 0x7efff0100000, ""),
                (0x7efff0100000, 0x7efff0200000, "[anon:my arena]"),
                (0x7f0000100000, 0x7f0000200000, "/usr/lib/locale/C.utf8/LC_CTYPE"),
                (0x7ffd00000000, 0x7ffd00021000, "[stack]"),
            ]
        );
    }
}
