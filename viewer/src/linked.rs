//! Linking the two views of one trace: the block under the pointer in the
//! access (cache-line) view opens in the allocations view, zoomed onto its
//! addresses with cushion cursors at its allocation and free; a block in
//! the allocations view opens in the access view over the reads of its
//! lifetime. Each view is its own window (its own `linetrace view`
//! process, so neither waits for the other's decoding); the key is `L`.

use std::ffi::OsString;
use std::path::Path;

use decoder::symbols::SymbolPaths;

/// What the other view needs to know of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkedBlock {
    /// First address.
    pub address: u64,
    /// Requested size.
    pub size: u64,
    /// Allocation event that created it, and that freed it.
    pub events: (u64, Option<u64>),
    /// Read column at which it was created, and freed.
    pub columns: (u64, Option<u64>),
}

impl From<&decoder::allocations::AllocationRecord> for LinkedBlock {
    fn from(r: &decoder::allocations::AllocationRecord) -> Self {
        LinkedBlock {
            address: r.address,
            size: r.size,
            events: (r.alloc_event, r.free_event),
            columns: (r.alloc_column, r.free_column),
        }
    }
}

impl From<&decoder::inspect::AllocationInfo> for LinkedBlock {
    fn from(b: &decoder::inspect::AllocationInfo) -> Self {
        LinkedBlock {
            address: b.address,
            size: b.size,
            events: (b.alloc_event, b.free_event),
            columns: (b.alloc_column, b.free_column),
        }
    }
}

/// Addresses shown around a block, in block sizes on each side: enough to
/// see its neighbours.
const MARGIN_BLOCKS: u64 = 8;

/// `linetrace` arguments of the allocations view of `block`: its
/// neighbourhood of addresses, a cursor where it was allocated and one
/// where it was freed.
pub fn allocations_view_args(trace: &Path, paths: &SymbolPaths, block: &LinkedBlock) -> Vec<OsString> {
    let margin = block.size.max(64).saturating_mul(MARGIN_BLOCKS);
    let lo = block.address.saturating_sub(margin);
    let hi = block.address.saturating_add(block.size.max(1)).saturating_add(margin);
    let mut args: Vec<OsString> = vec!["view".into(), "--allocations".into(), trace.into()];
    args.extend(["--addresses".into(), format!("{lo:#x}..{hi:#x}").into()]);
    let (alloc, free) = block.events;
    for t in std::iter::once(alloc).chain(free) {
        args.extend(["--cursor".into(), t.to_string().into()]);
    }
    args.extend(symbol_args(paths));
    args
}

/// `linetrace` arguments of the access view over the reads of `block`'s
/// lifetime (to the end of the trace if it was never freed); `None` when
/// its lifetime holds no read (`total_columns`: the trace's reads).
pub fn access_view_args(
    trace: &Path,
    paths: &SymbolPaths,
    block: &LinkedBlock,
    total_columns: u64,
) -> Option<Vec<OsString>> {
    let (from, to) = (block.columns.0, block.columns.1.unwrap_or(total_columns).min(total_columns));
    if to <= from {
        return None;
    }
    let mut args: Vec<OsString> = vec!["view".into(), trace.into(), "--columns".into(), format!("{from}..{to}").into()];
    args.extend(symbol_args(paths));
    Some(args)
}

/// The flags that give a new viewer the same places to look for symbols.
fn symbol_args(paths: &SymbolPaths) -> Vec<OsString> {
    let defaults = SymbolPaths::default();
    let mut args = Vec::new();
    for dir in &paths.module_dirs {
        args.extend(["--modules".into(), dir.into()]);
    }
    for dir in paths.debug_roots.iter().filter(|d| !defaults.debug_roots.contains(d)) {
        args.extend(["--debug-dir".into(), dir.into()]);
    }
    args
}

/// Starts `linetrace` (this executable) with `args` in the background.
pub fn open(args: &[OsString]) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find linetrace's own executable: {e}"))?;
    std::process::Command::new(exe)
        .args(args)
        .stdin(std::process::Stdio::null())
        .spawn()
        .map(drop)
        .map_err(|e| format!("cannot start the other view: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block() -> LinkedBlock {
        LinkedBlock { address: 0x10_0000, size: 0x100, events: (5, Some(9)), columns: (100, None) }
    }

    #[test]
    fn the_allocations_view_frames_the_block_with_cursors_at_its_life() {
        let paths = SymbolPaths { module_dirs: vec!["/m".into()], ..SymbolPaths::default() };
        let args = allocations_view_args(Path::new("t.lntrace"), &paths, &block());
        let text: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(
            text,
            [
                "view",
                "--allocations",
                "t.lntrace",
                "--addresses",
                "0xff800..0x100900",
                "--cursor",
                "5",
                "--cursor",
                "9",
                "--modules",
                "/m"
            ]
        );
    }

    #[test]
    fn the_access_view_spans_the_blocks_reads_or_says_there_are_none() {
        let paths = SymbolPaths::default();
        let args = access_view_args(Path::new("t.lntrace"), &paths, &block(), 500).expect("reads");
        let text: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(text, ["view", "t.lntrace", "--columns", "100..500"]);
        let freed_at_once = LinkedBlock { columns: (100, Some(100)), ..block() };
        assert_eq!(access_view_args(Path::new("t"), &paths, &freed_at_once, 500), None);
        assert_eq!(access_view_args(Path::new("t"), &paths, &block(), 0), None, "a trace without reads");
    }
}
