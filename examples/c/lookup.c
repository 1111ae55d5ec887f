/* Two builds of one job for `linetrace diff` and `linetrace view A B`:
 * answer 32 lookups in a table of 256 keys.
 *   gcc -O1 -g lookup.c -o lookup_scan            (each query scans the table)
 *   gcc -O1 -g -DINDEXED lookup.c -o lookup_hash  (build an index first)
 * The indexed build reads more in `build` and far less in `query`: a
 * comparison shows one frame redder and the others bluer. Trace `work`. */
#include <stdio.h>

#define N 256
#define QUERIES 32
#define BUCKETS 512

static long keys[N];
static long values[N];
static int bucket_of[BUCKETS]; /* index + 1 of the key in a bucket; 0: empty */
static long queries[QUERIES];

__attribute__((noinline)) static unsigned hash(long key) {
    return (unsigned)(key * 2654435761u) % BUCKETS;
}

/* Without the index there is nothing to build but a checksum of the keys;
 * with it, every key is read and placed (linear probing). */
__attribute__((noinline)) static long build(void) {
    long check = 0;
#ifdef INDEXED
    for (int i = 0; i < N; i++) {
        unsigned b = hash(keys[i]);
        while (bucket_of[b]) b = (b + 1) % BUCKETS;
        bucket_of[b] = i + 1;
        check += keys[i];
    }
#else
    for (int i = 0; i < N; i += 8) check += keys[i];
#endif
    return check;
}

__attribute__((noinline)) static long query(long key) {
#ifdef INDEXED
    for (unsigned b = hash(key); bucket_of[b]; b = (b + 1) % BUCKETS) {
        if (keys[bucket_of[b] - 1] == key) return values[bucket_of[b] - 1];
    }
#else
    for (int i = 0; i < N; i++) {
        if (keys[i] == key) return values[i];
    }
#endif
    return -1;
}

__attribute__((noinline)) long work(void) {
    long sum = build();
    for (int q = 0; q < QUERIES; q++) sum += query(queries[q]);
    return sum;
}

int main(void) {
    for (int i = 0; i < N; i++) {
        keys[i] = 1000 + 7L * i;
        values[i] = i;
    }
    for (int q = 0; q < QUERIES; q++) queries[q] = keys[(q * 37) % N];
    printf("sum=%ld\n", work());
    return 0;
}
