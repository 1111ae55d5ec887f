/* Four threads each call `work` three times; each call sums a slice and
 * sleeps a little, so calls on different threads overlap. Traced with
 * ptrace, one thread is stepped at a time: the calls other threads make
 * meanwhile are not traced, and must be counted. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#define THREADS 4
#define CALLS 3
#define SLICE 256

static int data[THREADS * SLICE];
static long sums[THREADS];

__attribute__((noinline)) long work(const int *slice) {
    long s = 0;
    for (int i = 0; i < SLICE; i++) s += slice[i];
    return s;
}

static void *run(void *arg) {
    long id = (long)arg;
    for (int c = 0; c < CALLS; c++) {
        sums[id] += work(&data[id * SLICE]);
        usleep(2000);
    }
    return NULL;
}

int main(void) {
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS * SLICE; i++) data[i] = 1;
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, run, (void *)i);
    long total = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        total += sums[i];
    }
    printf("total=%ld calls=%d\n", total, THREADS * CALLS);
    return 0;
}
