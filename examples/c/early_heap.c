/* Memory allocated before the traced function began: each call of `work`
 * reads eight lines of a small block (from the heap of brk) and eight
 * lines of a large one (malloc maps it on its own: anonymous memory),
 * allocated in `main` before the call. The recorder sees no allocation of
 * them; the row labels still name the heap and the anonymous mapping.
 * Between the two calls, `main` grows the heap by 4 MiB and allocates the
 * second call's small block past that: the heap the recorder found at the
 * first call does not hold it. Trace `work`; prints the blocks' addresses. */
#include <stdio.h>
#include <stdlib.h>

#define SMALL_LONGS 64          /* 512 bytes: eight lines */
#define LARGE_BYTES (1 << 20)   /* past malloc's mmap threshold */
#define GROWTH 4096             /* blocks of 1 KiB between the calls */

__attribute__((noinline)) long work(const long *small, const long *large) {
    long sum = 0;
    for (int i = 0; i < SMALL_LONGS; i += 8) sum += small[i];
    for (int i = 0; i < SMALL_LONGS; i += 8) sum += large[i];
    return sum;
}

static long call(int round) {
    long *small = malloc(SMALL_LONGS * sizeof *small);
    long *large = malloc(LARGE_BYTES);
    if (small == NULL || large == NULL) exit(1);
    for (int i = 0; i < SMALL_LONGS; i++) small[i] = large[i] = i;
    long sum = work(small, large);
    printf("round=%d small=%p large=%p sum=%ld\n", round, (void *)small, (void *)large, sum);
    free(large);
    return sum;
}

int main(void) {
    long total = call(0);
    for (int i = 0; i < GROWTH; i++) {
        volatile char *grown = malloc(1024);
        if (grown == NULL) return 1;
        grown[0] = 1;
    }
    total += call(1);
    return total == 2 * 448 ? 0 : 1;
}
