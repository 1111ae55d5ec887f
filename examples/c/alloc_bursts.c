/* Allocation in bursts, for the heap analysis's burst finder: a steady
 * trickle (one block every 200 us from `tick`) through 600 ms of quiet
 * computing, interrupted twice: `fill_table` allocates 20000 blocks at 150
 * ms, `parse_lines` 8000 at 400 ms. Each burst takes a few milliseconds,
 * within one or two of the finder's 6 ms windows even when the machine is
 * busy; the report must name them, in that order. (Every block
 * is freed at the end: blocks nobody reads or frees, GCC may not allocate
 * at all.)
 *   alloc_bursts */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *kept[40000];
static int n_kept;

__attribute__((noinline)) static void tick(void) {
    kept[n_kept++ % 40000] = malloc(32);
}

__attribute__((noinline)) static void fill_table(void) {
    for (int i = 0; i < 20000; i++) kept[n_kept++ % 40000] = malloc(24 + i % 40);
}

__attribute__((noinline)) static void parse_lines(void) {
    for (int i = 0; i < 8000; i++) kept[n_kept++ % 40000] = malloc(64);
}

/* Computes (no allocation) until `until`, ticking every 0.2 ms. */
static double quiet(double start, double until) {
    double next = start, sum = 0;
    for (double t = now_ms(); t < until; t = now_ms()) {
        sum += t * 1e-9;
        if (t >= next) {
            tick();
            /* From now, not from the missed tick: a stalled machine must
             * not make a burst of ticks. */
            next = t + 0.2;
        }
    }
    return sum;
}

int main(void) {
    double t0 = now_ms(), sum = 0;
    sum += quiet(t0, t0 + 150);
    fill_table();
    sum += quiet(now_ms(), t0 + 400);
    parse_lines();
    sum += quiet(now_ms(), t0 + 600);
    printf("%d blocks %g\n", n_kept, sum);
    for (int i = 0; i < 40000 && i < n_kept; i++) free(kept[i]);
    return 0;
}
