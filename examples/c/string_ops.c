/* rep-string instructions and AVX2 gathers, for the recorder's address
 * computation: `copy_forward` (rep movsb, 200 bytes), `fill_backward`
 * (std; rep stosq over 16 quadwords, direction flag set), and `gather`
 * (vpgatherdd of 8 ints at indices 0, 3, 6, ... 21). Each is traced alone. */
#include <immintrin.h>
#include <stdio.h>
#include <string.h>

static char src[256], dst[256];
static long qwords[32];
static int table[64];

__attribute__((noinline)) void copy_forward(void) {
    void *d = dst, *s = src;
    unsigned long n = 200;
    __asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
}

__attribute__((noinline)) void fill_backward(void) {
    void *d = &qwords[20]; /* last element written; walks down 16 qwords */
    unsigned long n = 16;
    __asm__ volatile("std\n\trep stosq\n\tcld" : "+D"(d), "+c"(n) : "a"(7L) : "memory");
}

__attribute__((noinline, target("avx2"))) int gather(void) {
    __m256i idx = _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21);
    __m256i v = _mm256_i32gather_epi32(table, idx, 4);
    int out[8];
    _mm256_storeu_si256((__m256i *)out, v);
    int s = 0;
    for (int i = 0; i < 8; i++) s += out[i];
    return s;
}

int main(void) {
    for (int i = 0; i < 256; i++) src[i] = (char)i;
    for (int i = 0; i < 64; i++) table[i] = i;
    copy_forward();
    fill_backward();
    int g = __builtin_cpu_supports("avx2") ? gather() : 189;
    printf("dst=%d q=%ld g=%d\n", dst[199], qwords[5], g);
    return 0;
}
