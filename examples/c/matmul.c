/* (c) Naive (i-j-k) versus blocked matrix multiply of 24x24 doubles.
 * Trace `matmul_naive` or `matmul_blocked`. An optional argument repeats
 * the naive multiply (the tests use it for a long-running trace).
 * -DN=40 scales the matrices; -DNO_INIT leaves them zero, so that the
 * first touch of their lines is in the multiply (the cache tests compare
 * a cold-start simulation with cachegrind's, which would otherwise start
 * warm with what main wrote). */
#include <stdio.h>
#include <stdlib.h>

#ifndef N
#define N 24
#endif
#define B 8

static double a[N][N], b[N][N], c[N][N];

__attribute__((noinline)) void matmul_naive(void) {
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < N; k++) s += a[i][k] * b[k][j];
            c[i][j] = s;
        }
}

__attribute__((noinline)) void matmul_blocked(void) {
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) c[i][j] = 0;
    for (int ii = 0; ii < N; ii += B)
        for (int kk = 0; kk < N; kk += B)
            for (int jj = 0; jj < N; jj += B)
                for (int i = ii; i < ii + B; i++)
                    for (int k = kk; k < kk + B; k++) {
                        double aik = a[i][k];
                        for (int j = jj; j < jj + B; j++) c[i][j] += aik * b[k][j];
                    }
}

static double checksum(void) {
    double s = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) s += c[i][j] * (i + 1) - j;
    return s;
}

int main(int argc, char **argv) {
    int repeat = argc > 1 ? atoi(argv[1]) : 1;
#ifndef NO_INIT
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            a[i][j] = i + j;
            b[i][j] = i - j;
        }
#else
    /* The arrays escape: the compiler may no longer fold them to zeros. */
    __asm__ volatile("" : : "r"(a), "r"(b) : "memory");
#endif
    for (int r = 0; r < repeat; r++) matmul_naive();
    double naive = checksum();
    matmul_blocked();
    printf("naive=%.1f blocked=%.1f\n", naive, checksum());
    return 0;
}
