/* A custom allocator for `record --allocations --alloc-fn`: a pool that
 * carves fixed-size-class blocks out of one malloc'd arena (16, 32 and 64
 * bytes, rounded up), frees them onto per-class free lists, and resets.
 *   pool [ROUNDS]   (default 1000)
 * Each round: 3 blocks of 24, 10 and 50 bytes from `make_node`,
 * `make_key` and `make_value`; the 10-byte one freed at once. Every 250
 * rounds the pool is reset. So with ROUNDS = 1000 (4 resets, the last at
 * the end): 3000 blocks handed out (24 + 10 + 50 = 84 bytes a round:
 * 84000 bytes), 1000 freed by pool_free, the other 2000 by the resets; the
 * peak is in the 250th round of the first 250, its key not freed yet: 249
 * rounds' node and value (249 x 74 bytes) and its three blocks (84): 501
 * blocks, 18510 bytes. The arena is one malloc block of 1 MiB; `main`
 * prints a checksum that must not change under the agent. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pool {
    char *arena;
    size_t used, size;
    void *free_list[3];
};

static size_t class_of(size_t n) {
    return n <= 16 ? 0 : n <= 32 ? 1 : 2;
}

__attribute__((noinline)) void *pool_alloc(struct pool *p, size_t n) {
    if (n > 64) return NULL;
    size_t c = class_of(n);
    if (p->free_list[c]) {
        void *b = p->free_list[c];
        p->free_list[c] = *(void **)b;
        return b;
    }
    size_t bytes = (size_t)16 << c;
    if (p->used + bytes > p->size) return NULL;
    void *b = p->arena + p->used;
    p->used += bytes;
    return b;
}

__attribute__((noinline)) void pool_free(struct pool *p, void *b, size_t n) {
    size_t c = class_of(n);
    *(void **)b = p->free_list[c];
    p->free_list[c] = b;
}

__attribute__((noinline)) void pool_reset(struct pool *p) {
    p->used = 0;
    memset(p->free_list, 0, sizeof p->free_list);
}

__attribute__((noinline)) static char *make_node(struct pool *p) { return pool_alloc(p, 24); }
__attribute__((noinline)) static char *make_key(struct pool *p) { return pool_alloc(p, 10); }
__attribute__((noinline)) static char *make_value(struct pool *p) { return pool_alloc(p, 50); }

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 1000;
    struct pool p = {malloc(1 << 20), 0, 1 << 20, {0}};
    long sum = 0;
    for (long i = 0; i < rounds; i++) {
        char *node = make_node(&p), *key = make_key(&p), *value = make_value(&p);
        node[0] = key[0] = value[0] = (char)i;
        sum += node[0] + value[0];
        pool_free(&p, key, 10);
        if ((i + 1) % 250 == 0) pool_reset(&p);
    }
    free(p.arena);
    printf("%ld\n", sum);
    return 0;
}
