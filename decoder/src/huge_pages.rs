//! Big tables of the decoding pass backed by huge pages where the kernel
//! offers them.
//!
//! The tables that every access looks up at a random place (the simulated
//! last-level cache's tags: 63 MB for the 480 MiB cache cachegrind
//! simulates on this project's machines; the table of every line the trace
//! touched) are far larger than what the CPU's TLB covers with 4 KiB pages,
//! so nearly every lookup also walked the page tables, and the prefetches
//! meant to hide the lookups' waits stalled on those walks instead
//! (`perf annotate` of the cache stage: 70% of its samples just after its
//! one prefetch). With 2 MiB pages the TLB covers them.
//!
//! Transparent huge pages are often given only to memory that asks for them
//! (`/sys/kernel/mm/transparent_hugepage/enabled` = `madvise`, as on this
//! project's machines); asking is a hint, so a kernel without them changes
//! nothing but the speed.
//!
//! On a virtual machine, the first touch of a huge page can be slow. This
//! project's machines are Firecracker guests with a balloon device, which
//! probably hands whole free 2 MiB blocks back to the host, so that a huge
//! page comes from a block the host must back again. Filling a fresh
//! 64 MiB region of huge pages (`/tmp/hp.c`, not in the repo: `mmap`,
//! `madvise`, `memset`) took 273-567 ms in three of four new processes
//! (7 ms in the fourth), and 7-54 ms when the same process filled another
//! region after freeing the first; with small pages it took 41-43 ms.
//! Filling 256 MiB took 2.2 s. The 100M-read benchmark trace's decode
//! spent 3.95% of its samples zeroing such pages as the line table grew
//! (`perf record`: 64 MiB in all, from 2^10 to 2^21 slots), most of them
//! in the pass's first second, while the cache stage held up the other
//! two. Still, there is little to gain:
//! - with small pages for that table, the pass was no faster (3 alternating
//!   rounds: 7.68-8.13 s, user CPU 14.50-15.13 s, against 7.67-8.15 s and
//!   14.13-14.66 s): what the kernel saved, the page walks took back;
//! - with free blocks backed again just before (a 160 MiB region of huge
//!   pages filled and freed), 6 alternating rounds: median 7.52 -> 7.33 s,
//!   faster in 4 of them. So that cost is at most about 2% of the pass.

/// Smallest table worth asking for: a few huge pages' worth.
const WORTH_ASKING: usize = 4 * HUGE_PAGE;

/// Size of an x86-64 huge page.
const HUGE_PAGE: usize = 2 << 20;

/// `len` copies of `value`, in memory the kernel is asked to back with
/// huge pages (asked before the first write, so the pages are huge from
/// the start).
pub(crate) fn filled_vec<T: Clone>(len: usize, value: T) -> Vec<T> {
    let mut table: Vec<T> = Vec::with_capacity(len);
    advise(table.as_ptr().cast(), len.saturating_mul(std::mem::size_of::<T>()));
    table.resize(len, value);
    table
}

/// `len` zero words in memory the kernel is asked to back with huge pages.
/// Nothing is written: the allocator takes fresh zero pages from the kernel
/// for a table this large, so a page costs memory only once something in it
/// is used (a short trace does not pay for a 63 MB table it barely touches).
pub(crate) fn zeroed_words(len: usize) -> Vec<u64> {
    let table = vec![0u64; len];
    advise(table.as_ptr().cast(), len.saturating_mul(std::mem::size_of::<u64>()));
    table
}

/// Asks for huge pages over the whole huge pages inside `[start, start +
/// bytes)`, if that is big enough to be worth it.
fn advise(start: *const u8, bytes: usize) {
    if bytes < WORTH_ASKING {
        return;
    }
    let first = (start as usize).next_multiple_of(HUGE_PAGE);
    let end = (start as usize + bytes) / HUGE_PAGE * HUGE_PAGE;
    if end > first {
        // SAFETY: the range lies inside an allocation this module owns, and
        // MADV_HUGEPAGE changes how it is backed, never its contents. A
        // refusal (no transparent huge pages) only leaves small pages.
        unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_hold_what_they_were_filled_with() {
        for len in [0, 1, 1000, WORTH_ASKING / 8 + 3] {
            let table = filled_vec(len, 7u64);
            assert_eq!(table.len(), len);
            assert!(table.iter().all(|&v| v == 7));
            let zeroed = zeroed_words(len);
            assert_eq!(zeroed.len(), len);
            assert!(zeroed.iter().all(|&v| v == 0));
        }
    }
}
