/* Crashes inside the traced function: `walk` sums a small array, then
 * dereferences the pointer it was given, which is NULL. Trace `walk`: the
 * trace must keep the reads before the crash and record the SIGSEGV. */
#include <stdio.h>

static int values[64];

__attribute__((noinline)) int walk(const int *p) {
    int s = 0;
    for (int i = 0; i < 64; i++) s += values[i];
    return s + *p;
}

int main(int argc, char **argv) {
    (void)argv;
    for (int i = 0; i < 64; i++) values[i] = i;
    fflush(stdout);
    /* argc == 1: p is NULL and walk crashes. */
    const int *p = argc > 1 ? &values[0] : NULL;
    printf("walk=%d\n", walk(p));
    return 0;
}
