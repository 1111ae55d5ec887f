/* A function GCC splits: `thrower` keeps its hot loop, and the error path
 * (which calls a function marked cold) goes to `thrower.cold`. The fragment
 * is code of `thrower`: `-f thrower` is not ambiguous, and reports count
 * the fragment's accesses in thrower's row, as `thrower [cold]`. With an
 * argument the error path runs: it negates the array and exits 3. */
#include <stdio.h>
#include <stdlib.h>

static int data[64];
static int limit = 1000000;

__attribute__((cold, noinline)) static void report_failure(int s) { fprintf(stderr, "too large: %d\n", s); }

__attribute__((noinline)) int thrower(int n) {
    int s = 0;
    for (int i = 0; i < n; i++) s += data[i & 63];
    if (s > limit) {
        report_failure(s);
        for (int i = 0; i < 64; i++) data[i] = -data[i];
        fprintf(stderr, "limit %d\n", limit);
        exit(3);
    }
    return s;
}

int main(int argc, char **argv) {
    (void)argv;
    for (int i = 0; i < 64; i++) data[i] = i;
    if (argc > 1) limit = 10;
    printf("%d\n", thrower(128));
    return 0;
}
