/* Four threads wait at a barrier, then call `work` at the same moment, twice
 * each: every call runs millions of scalar reads (a scrambled walk over the
 * thread's own array), so the calls overlap for their whole length and each
 * thread's record buffer (4M records) fills while the others run. Every
 * thread does the same work: each has exactly a quarter of the reads. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 4
#define CALLS 2
#ifndef STEPS
#define STEPS (5 << 20)
#endif
#define WORDS (1 << 16)

static unsigned *arrays[THREADS];
static unsigned long sums[THREADS];
static pthread_barrier_t start;

__attribute__((noinline)) unsigned long work(const unsigned *a, unsigned first) {
    unsigned long s = 0;
    unsigned i = first;
    for (long n = 0; n < STEPS; n++) {
        s += a[i];
        i = (i * 5 + 1) & (WORDS - 1);
    }
    return s;
}

static void *run(void *arg) {
    long id = (long)arg;
    pthread_barrier_wait(&start);
    for (int c = 0; c < CALLS; c++) sums[id] += work(arrays[id], (unsigned)c);
    return NULL;
}

int main(void) {
    pthread_t t[THREADS];
    pthread_barrier_init(&start, NULL, THREADS);
    for (int k = 0; k < THREADS; k++) {
        arrays[k] = malloc(WORDS * sizeof(unsigned));
        for (int i = 0; i < WORDS; i++) arrays[k][i] = (unsigned)(i % 7);
    }
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, run, (void *)i);
    unsigned long total = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        total += sums[i];
    }
    printf("total=%lu calls=%d\n", total, THREADS * CALLS);
    return 0;
}
