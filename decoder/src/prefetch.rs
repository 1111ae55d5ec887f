//! The one prefetch hint of the decoding pass's tables.

/// Starts loading the host cache line holding `p` into the CPU cache. A
/// hint: it reads nothing, changes nothing and cannot fault, so any
/// pointer will do (callers pass elements of their own tables, or places just
/// past them).
#[inline]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address; SSE is part
    // of every x86-64 CPU.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
