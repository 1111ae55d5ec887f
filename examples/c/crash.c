/* Crashes inside the traced function: `walk` sums a small array, then
 * dereferences the pointer it was given, which is NULL. Trace `walk`: the
 * trace must keep the reads before the crash and record the SIGSEGV.
 *
 * `crash store` and `crash divide` crash in `bump` instead, between a load
 * and a store of the same base register (which the rewrite recorder
 * records once, for both): `store` writes to read-only memory (SIGSEGV at
 * the store), `divide` divides by zero between the two (SIGFPE). The trace
 * must hold the load and not the store. */
#include <stdio.h>

static int values[64];
static const int frozen[2] = {1, 2};

__attribute__((noinline)) int bump(int *p, int d) {
    int v = p[0];
    p[1] = v / d;
    return v;
}

__attribute__((noinline)) int walk(const int *p) {
    int s = 0;
    for (int i = 0; i < 64; i++) s += values[i];
    return s + *p;
}

int main(int argc, char **argv) {
    for (int i = 0; i < 64; i++) values[i] = i;
    fflush(stdout);
    if (argc > 1 && argv[1][0] == 's') return bump((int *)frozen, 1);
    if (argc > 1 && argv[1][0] == 'd') return bump(values, argc - 2);
    /* argc == 1: p is NULL and walk crashes. */
    const int *p = argc > 1 ? &values[0] : NULL;
    printf("walk=%d\n", walk(p));
    return 0;
}
