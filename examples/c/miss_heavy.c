/* The view bench's miss-heavy reads, made by a program: the peer that
 * times valgrind's cachegrind on the same accesses the synthetic trace
 * holds (benches/common/mod.rs, Pattern::MissHeavy). Read i is a 16-byte
 * read sweeping a 1 MiB array (and every fourth of those a 16-byte write of
 * the same bytes), but every third read is an 8-byte read scattered over a
 * 16 MiB table by the same LCG; a call every 64 reads.
 *
 *   miss_heavy READS */
#include <emmintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define ARRAY_BYTES (1u << 20)
#define TABLE_WORDS (1u << 21)

static __m128i array[ARRAY_BYTES / 16];
static uint64_t table[TABLE_WORDS];
static uint64_t seed = 0x12345678u;

/* Reads first .. first+count-1, as the trace writer's loop does. */
__attribute__((noinline)) static uint64_t reads(uint64_t first, uint64_t count) {
    __m128i sum = _mm_setzero_si128();
    uint64_t scattered = 0;
    for (uint64_t i = first; i < first + count; i++) {
        if (i % 3 == 2) {
            seed = seed * 6364136223846793005u + 1442695040888963407u;
            scattered += *(volatile uint64_t *)&table[(seed >> 33) % TABLE_WORDS];
        } else {
            volatile __m128i *slot = &array[(i * 16) % ARRAY_BYTES / 16];
            __m128i v = *slot;
            sum = _mm_add_epi64(sum, v);
            if (i % 4 == 0) *slot = v;
        }
    }
    return scattered + (uint64_t)_mm_cvtsi128_si64(sum);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: miss_heavy READS\n");
        return 2;
    }
    uint64_t total = strtoull(argv[1], NULL, 10), sum = 0;
    for (uint64_t first = 0; first < total; first += 64)
        sum += reads(first, total - first < 64 ? total - first : 64);
    printf("%llu reads, sum %llu\n", (unsigned long long)total, (unsigned long long)sum);
    return 0;
}
