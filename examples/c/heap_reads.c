/* Reads scattered over many small live heap blocks: the decode's hard case
 * for attributing accesses to blocks (benches/decode.rs). Trace `work`: it
 * mallocs BLOCKS blocks of 64 bytes, makes READS reads of a block picked by
 * an LCG (each read through the table of block pointers, itself a block),
 * frees and mallocs one block every 1024 reads, then frees them all.
 * PASSES calls of `work` (default 1): cachegrind's run of 2 less its run of
 * 1 is one traced call.
 *
 *   heap_reads BLOCKS READS [PASSES] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct block {
    uint64_t words[8];
};

__attribute__((noinline)) uint64_t work(long blocks, long reads) {
    struct block **table = malloc(blocks * sizeof *table);
    if (table == NULL) return 0;
    for (long i = 0; i < blocks; i++) {
        table[i] = malloc(sizeof(struct block));
        if (table[i] == NULL) return 0;
        table[i]->words[0] = (uint64_t)i;
    }
    uint64_t seed = 12345, sum = 0;
    for (long r = 0; r < reads; r++) {
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        long k = (long)((seed >> 33) % (uint64_t)blocks);
        sum += table[k]->words[0];
        if ((r & 1023) == 0) {
            free(table[k]);
            table[k] = malloc(sizeof(struct block));
            if (table[k] == NULL) return 0;
            table[k]->words[0] = (uint64_t)r;
        }
    }
    for (long i = 0; i < blocks; i++) free(table[i]);
    free(table);
    return sum;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: heap_reads BLOCKS READS [PASSES]\n");
        return 2;
    }
    long blocks = atol(argv[1]), reads = atol(argv[2]), passes = argc > 3 ? atol(argv[3]) : 1;
    if (blocks <= 0 || reads < 0) {
        fprintf(stderr, "heap_reads: BLOCKS must be positive and READS not negative\n");
        return 2;
    }
    uint64_t sum = 0;
    for (long p = 0; p < passes; p++) sum += work(blocks, reads);
    printf("%lu\n", (unsigned long)sum);
    return 0;
}
