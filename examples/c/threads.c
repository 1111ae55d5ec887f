/* (e) Four threads, each summing its own slice of a shared array in
 * `worker`. Trace `worker`: the first thread to enter it is stepped, the
 * others run freely. */
#include <pthread.h>
#include <stdio.h>

#define THREADS 4
#define SLICE 64

static int data[THREADS * SLICE];
static long sums[THREADS];

__attribute__((noinline)) long worker_sum(const int *slice) {
    long s = 0;
    for (int i = 0; i < SLICE; i++) s += slice[i];
    return s;
}

__attribute__((noinline)) void *worker(void *arg) {
    long id = (long)arg;
    sums[id] = worker_sum(&data[id * SLICE]);
    return NULL;
}

int main(void) {
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS * SLICE; i++) data[i] = i;
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    long total = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        total += sums[i];
    }
    printf("total=%ld\n", total);
    return 0;
}
