/* The agent's stack unwinder (unwind.c). */
#include <stdint.h>

/* Hidden, as everything of the agent's own (see agent.h). */

/* Makes the table of frame rules (once, at start). */
__attribute__((visibility("hidden"))) void unwind_init(void);

/* Fills `out` with up to `depth` callers above the frame that returns to
 * `ip` (each return address minus one: the call), given that frame's
 * stack pointer after the return and its rbp. Returns how many, or -1
 * when some frame needs what this unwinder does not follow (then use
 * backtrace()). */
__attribute__((visibility("hidden"))) int unwind_callers(uint64_t ip, uint64_t sp, uint64_t bp, uint64_t *out, int depth);
