/* Allocations from stacks of every shape an unwinder meets, for the
 * agent's unwinder (`record --allocations`, LINETRACE_ALLOC_UNWIND_CHECK):
 * - a recursion DEPTH frames deep, each frame allocating (CFA = rsp + N);
 * - a frame with alloca (CFA = rbp + 16: the frame's size is dynamic);
 * - calls through a function pointer;
 * - main with a 64-byte aligned local, which makes GCC realign the stack
 *   and describe main's frame by an expression (the agent leaves such
 *   stacks to backtrace()).
 *   deep_stack [DEPTH]   (default 40) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *(*volatile allocate)(size_t) = malloc;
static void *kept[256];
static int n_kept;

__attribute__((noinline)) static void keep(void *p) {
    if (n_kept < 256) kept[n_kept++] = p;
    else free(p);
}

__attribute__((noinline)) static int with_alloca(int n) {
    char *buf = __builtin_alloca((size_t)n * 16 + 1);
    memset(buf, n, (size_t)n * 16 + 1);
    keep(allocate((size_t)n + 8));
    return buf[n];
}

__attribute__((noinline)) static int descend(int depth) {
    keep(malloc((size_t)depth * 8 + 1));
    if (depth == 0) return with_alloca(3);
    int r = descend(depth - 1) + 1;
    keep(calloc(1, (size_t)depth + 1));
    return r;
}

int main(int argc, char **argv) {
    int depth = argc > 1 ? atoi(argv[1]) : 40;
    if (depth < 0 || depth > 10000) {
        fputs("usage: deep_stack [DEPTH (0-10000)]\n", stderr);
        return 2;
    }
    /* An aligned local filled with vector stores, and a dynamic size:
     * GCC keeps main's frame in r10 and describes it by expressions. */
    double aligned[8] __attribute__((aligned(64)));
    memset(aligned, argc, sizeof aligned);
    char *scratch = __builtin_alloca((size_t)argc * 100);
    memset(scratch, 0, (size_t)argc * 100);
    keep(malloc(100 + (size_t)aligned[1] + (size_t)scratch[3]));
    int r = descend(depth) + (int)aligned[2];
    for (int i = 0; i < n_kept; i++) free(kept[i]);
    printf("%d\n", r);
    return 0;
}
