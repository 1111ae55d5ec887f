/* A function of millions of reads that a fast interval timer interrupts
 * thousands of times. SIGALRM is ignored, yet a traced program is stopped
 * for every one (the kernel reports even ignored signals to a tracer), at
 * whatever instruction it is running: also in the middle of the
 * instrumentation that appends a record. Every read must still be recorded
 * exactly once. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>

#ifndef STEPS
#define STEPS (4 << 20)
#endif
#define WORDS (1 << 16)

__attribute__((noinline)) unsigned long work(const unsigned *a) {
    unsigned long s = 0;
    unsigned i = 0;
    for (long n = 0; n < STEPS; n++) {
        s += a[i];
        i = (i * 5 + 1) & (WORDS - 1);
    }
    return s;
}

int main(void) {
    unsigned *a = malloc(WORDS * sizeof(unsigned));
    if (!a) return 1;
    for (int i = 0; i < WORDS; i++) a[i] = (unsigned)(i % 7);
    signal(SIGALRM, SIG_IGN);
    struct itimerval every = {.it_interval = {0, 250}, .it_value = {0, 250}};
    setitimer(ITIMER_REAL, &every, NULL);
    unsigned long s = work(a);
    printf("%lu\n", s);
    return 0;
}
