/* Workloads of the recorder benchmark (`cargo bench --bench rewrite`): each
 * runs in `kernel`, called once after an untraced setup. Usage:
 *   kernels matmul N | blocked N | list N | hash N | sort N | outside N
 * matmul/blocked: N x N doubles, naive and 16-blocked; list: walks a list of
 * N shuffled nodes (one per cache line) 8 times; hash: N inserts into an
 * open-addressing table, then 2N lookups; sort: qsort of N ints (the
 * comparator is an indirect call); outside: a trivial kernel, then N
 * untraced iterations of work (the recorder's cost outside the function).
 * Prints a checksum so that nothing is optimized away. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct node {
    struct node *next;
    long value;
    char payload[48];
};

static double *A, *B, *C;
static struct node *nodes;
static unsigned long *keys, *table;
static int *ints;

static unsigned long mix(unsigned long x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdUL;
    x ^= x >> 33;
    return x;
}

/* Hash-table slots: the power of two at least 4n (a quarter full). */
static unsigned long slots(long n) {
    unsigned long s = 1;
    while (s < 4 * (unsigned long)n) s <<= 1;
    return s;
}

static int compare_ints(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

__attribute__((noinline)) long kernel(const char *what, long n) {
    long s = 0;
    if (!strcmp(what, "matmul")) {
        for (long i = 0; i < n; i++)
            for (long j = 0; j < n; j++) {
                double t = 0;
                for (long k = 0; k < n; k++) t += A[i * n + k] * B[k * n + j];
                C[i * n + j] = t;
            }
        s = (long)C[n + 1];
    } else if (!strcmp(what, "blocked")) {
        const long b = 16;
        for (long ii = 0; ii < n; ii += b)
            for (long kk = 0; kk < n; kk += b)
                for (long jj = 0; jj < n; jj += b)
                    for (long i = ii; i < ii + b; i++)
                        for (long k = kk; k < kk + b; k++) {
                            double a = A[i * n + k];
                            for (long j = jj; j < jj + b; j++) C[i * n + j] += a * B[k * n + j];
                        }
        s = (long)C[n + 1];
    } else if (!strcmp(what, "list")) {
        for (int walk = 0; walk < 8; walk++)
            for (struct node *p = &nodes[0]; p; p = p->next) s += p->value;
    } else if (!strcmp(what, "hash")) {
        unsigned long mask = slots(n) - 1;
        for (long i = 0; i < n; i++) {
            unsigned long h = mix(keys[i]) & mask;
            while (table[h]) h = (h + 1) & mask;
            table[h] = keys[i];
        }
        for (long i = 0; i < 2 * n; i++) {
            unsigned long key = keys[i % n] + (i >= n), h = mix(key) & mask;
            while (table[h] && table[h] != key) h = (h + 1) & mask;
            s += table[h] == key;
        }
    } else if (!strcmp(what, "sort")) {
        qsort(ints, n, sizeof *ints, compare_ints);
        s = ints[n / 2];
    } else {
        s = n;
    }
    return s;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s matmul|blocked|list|hash|sort|outside N\n", argv[0]);
        return 2;
    }
    const char *what = argv[1];
    long n = atol(argv[2]);
    if (n < 16) n = 16;
    long extra = 0;
    if (!strcmp(what, "matmul") || !strcmp(what, "blocked")) {
        A = malloc(n * n * sizeof *A);
        B = malloc(n * n * sizeof *B);
        C = calloc(n * n, sizeof *C);
        for (long i = 0; i < n * n; i++) A[i] = i % 7, B[i] = i % 5;
    } else if (!strcmp(what, "list")) {
        nodes = malloc(n * sizeof *nodes);
        long *order = malloc(n * sizeof *order);
        for (long i = 0; i < n; i++) order[i] = i;
        for (long i = n - 1; i > 1; i--) {
            long j = 1 + (long)(mix(i) % (unsigned long)i), t = order[i];
            order[i] = order[j], order[j] = t;
        }
        for (long i = 0; i < n; i++) {
            nodes[order[i]].value = i;
            nodes[order[i]].next = i + 1 < n ? &nodes[order[i + 1]] : NULL;
        }
        free(order);
    } else if (!strcmp(what, "hash")) {
        keys = malloc(n * sizeof *keys);
        table = calloc(slots(n), sizeof *table);
        for (long i = 0; i < n; i++) keys[i] = 2 * (mix(i + 1) | 1);
    } else if (!strcmp(what, "sort")) {
        ints = malloc(n * sizeof *ints);
        for (long i = 0; i < n; i++) ints[i] = (int)(mix(i) % 1000000);
    } else if (!strcmp(what, "outside")) {
        for (long i = 0; i < n; i++) extra += (long)(mix(i) & 0xff);
    } else {
        fprintf(stderr, "unknown workload %s\n", what);
        return 2;
    }
    long s = kernel(what, n);
    printf("%s %ld: %ld\n", what, n, s + (extra & 1));
    return 0;
}
