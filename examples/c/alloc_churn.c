/* (d) malloc/realloc/free churn with a fixed, known sequence.
 * Trace `churn`. The sequence (sizes and order) is what the tests expect:
 *   malloc(24) malloc(100) calloc(10, 16) realloc(p1, 200) free(p0)
 *   malloc(4000) posix_memalign(64, 256) aligned_alloc(128, 512) free(p1')
 *   free(p2) free(p3) free(p4) free(p5) mmap(8192) munmap(8192)
 * (mmap and munmap are system calls, recorded as such).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

char *volatile sink;

__attribute__((noinline)) long churn(void) {
    char *p0 = malloc(24);
    char *p1 = malloc(100);
    char *p2 = calloc(10, 16);
    memset(p0, 1, 24);
    memset(p1, 2, 100);
    p1 = realloc(p1, 200);
    sink = p0; /* escapes, so the compiler cannot elide the malloc/free pair */
    free(p0);
    char *p3 = malloc(4000);
    void *p4 = NULL;
    if (posix_memalign(&p4, 64, 256) != 0) return -1;
    char *p5 = aligned_alloc(128, 512);
    long sum = p1[99] + p2[5] + (p3 != NULL) + (p5 != NULL);
    free(p1);
    free(p2);
    free(p3);
    free(p4);
    free(p5);
    void *m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) {
        sum += ((volatile char *)m)[100];
        munmap(m, 8192);
    }
    return sum;
}

int main(int argc, char **argv) {
    printf("churn=%ld\n", churn());
    /* An exit code to check that linetrace passes it on. */
    return argc > 1 ? atoi(argv[1]) : 0;
}
