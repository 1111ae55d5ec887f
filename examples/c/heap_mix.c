/* An allocation-heavy program for `record --allocations`: each thread
 * keeps a pool of 512 slots and, ROUNDS times, picks a slot by a fixed
 * pseudo-random sequence and frees, reallocs or refills it with a block of
 * a size from every glibc class (fast, small, large, and now and then an
 * mmapped one of 200 KiB). Whatever the pool holds at the end is leaked on
 * purpose, and one in 64 freed blocks is leaked too.
 *   heap_mix [ROUNDS [THREADS [crash]]]   (default 20000 rounds, 1 thread)
 * With `crash` it dies of SIGSEGV once every thread is done, before it
 * exits: a recorder must keep every call made until then.
 * The sequence depends only on the thread's index: a run's totals never
 * change. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SLOTS 512

struct job {
    unsigned seed;
    long rounds;
    long checksum;
};

static unsigned next(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return *s >> 8;
}

static size_t pick_size(unsigned r) {
    switch (r % 16) {
    case 0: return 200 * 1024 + r % 4096;          /* mmapped */
    case 1: case 2: return 1024 + r % 30000;        /* large */
    case 3: case 4: case 5: return 121 + r % 880;   /* small */
    default: return 1 + r % 120;                    /* fast */
    }
}

static void *churn(void *arg) {
    struct job *job = arg;
    char *slot[SLOTS] = {0};
    size_t size[SLOTS] = {0};
    unsigned s = job->seed;
    for (long i = 0; i < job->rounds; i++) {
        unsigned r = next(&s);
        int k = (int)(r % SLOTS);
        unsigned what = next(&s) % 8;
        if (slot[k] && what < 3) {
            if (what == 0 && next(&s) % 64 == 0) {
                slot[k] = NULL; /* leaked */
            } else {
                free(slot[k]);
                slot[k] = NULL;
            }
        } else if (slot[k] && what < 5) {
            size_t n = pick_size(next(&s));
            char *p = realloc(slot[k], n);
            if (p) {
                slot[k] = p;
                size[k] = n;
            }
        } else if (!slot[k]) {
            size_t n = pick_size(next(&s));
            slot[k] = (what == 7) ? calloc(1, n) : malloc(n);
            if (slot[k]) {
                size[k] = n;
                slot[k][0] = (char)i;
            }
        }
        if (slot[k]) job->checksum += slot[k][0] + (long)size[k];
    }
    return NULL;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 20000;
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    if (threads < 1 || threads > 64 || rounds < 0) {
        fputs("usage: heap_mix [ROUNDS [THREADS (1-64)]]\n", stderr);
        return 2;
    }
    struct job jobs[64];
    pthread_t ids[64];
    for (int t = 0; t < threads; t++) {
        jobs[t] = (struct job){.seed = 1234u + 77u * (unsigned)t, .rounds = rounds, .checksum = 0};
        if (threads == 1) {
            churn(&jobs[t]);
        } else if (pthread_create(&ids[t], NULL, churn, &jobs[t]) != 0) {
            return 1;
        }
    }
    long sum = 0;
    for (int t = 0; t < threads; t++) {
        if (threads > 1) pthread_join(ids[t], NULL);
        sum += jobs[t].checksum;
    }
    if (argc > 3 && strcmp(argv[3], "crash") == 0) *(volatile int *)0 = 0;
    /* write(2), not printf: stdio's buffer would be one more block. */
    char line[64];
    int n = snprintf(line, sizeof line, "checksum=%ld\n", sum);
    return write(1, line, (size_t)n) == n ? 0 : 1;
}
