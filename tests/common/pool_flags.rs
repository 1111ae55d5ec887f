//! examples/c/pool.c's allocator functions as `record` flags, shared by the
//! tests and `cargo bench --bench alloc` (which includes this file alone).

/// `record` flags declaring examples/c/pool.c's allocator functions: alloc
/// from an arena, free, and an arena's reset.
pub const POOL_ALLOC_FNS: [&str; 6] = [
    "--alloc-fn",
    "pool_alloc:size=ARG2,arena=ARG1",
    "--alloc-fn",
    "pool_free:free=ARG2",
    "--alloc-fn",
    "pool_reset:reset=ARG1",
];
