/* What the agent's parts share (alloc_agent.c records, hooks.c patches
 * custom allocator functions). Hidden: a program's own function of the
 * same name must not take their place (the agent exports only the
 * allocator entry points it interposes). */
#include <stdint.h>

#define AGENT_INTERNAL __attribute__((visibility("hidden")))

/* Records one call of kind `kind` (alloc_agent.c's K_*): `stack` holds its
 * callers already unwound, or is NULL to unwind from the wrapper's
 * `frame`. Does nothing inside the agent's own calls. */
AGENT_INTERNAL void agent_record(uint32_t kind, uint64_t ptr_in, uint64_t ptr_out, uint64_t size, uint64_t align, void *ret,
                  void **frame, const uint64_t *stack);

/* Whether this thread is inside the agent (its allocations unrecorded). */
AGENT_INTERNAL int agent_busy(void);

/* Counts a custom allocator call left unrecorded (nested too deep). */
AGENT_INTERNAL void agent_count_too_deep(void);

/* Callers recorded per call. */
AGENT_INTERNAL int agent_stack_depth(void);

/* Patches the custom allocator functions LINETRACE_ALLOC_HOOKS describes
 * (hooks.c); returns which were patched, bit n for the n-th. */
AGENT_INTERNAL uint64_t hooks_init(void);
