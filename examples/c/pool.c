/* A custom allocator for `record --allocations --alloc-fn`: pools that
 * carve fixed-size-class blocks out of a malloc'd arena (16, 32 and 64
 * bytes, rounded up), free them onto per-class free lists, and reset.
 *   pool [ROUNDS]   (default 1000)
 * Two pools: `items` (a 1 MiB arena) and `labels` (64 KiB). Each round:
 * blocks of 24, 10 and 50 bytes from `make_node`, `make_key` and
 * `make_value` in items, one of 16 bytes from `make_label` in labels, then
 * the 10-byte one is freed. Every 250 rounds items is reset; labels never
 * is. So with ROUNDS = 1000 (4 resets of items, the last at the end): 4000
 * blocks handed out (84 + 16 = 100 bytes a round: 100000 bytes), 1000
 * freed by pool_free, 2000 by the resets, the 1000 labels (16000 bytes)
 * live at the end. The peak is in the last round, its key not freed yet:
 * 249 rounds' node and value (249 x 74 bytes), its own three blocks (84)
 * and 1000 labels (16000): 1501 blocks, 34510 bytes. `main` prints a
 * checksum that must not change under the agent. */
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
__attribute__((noinline)) static char *make_label(struct pool *p) { return pool_alloc(p, 16); }

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 1000;
    struct pool p = {malloc(1 << 20), 0, 1 << 20, {0}};
    struct pool labels = {malloc(1 << 16), 0, 1 << 16, {0}};
    long sum = 0;
    for (long i = 0; i < rounds; i++) {
        char *node = make_node(&p), *key = make_key(&p), *value = make_value(&p);
        char *label = make_label(&labels);
        node[0] = key[0] = value[0] = (char)i;
        sum += node[0] + value[0] + (label ? 1 : 0);
        pool_free(&p, key, 10);
        if ((i + 1) % 250 == 0) pool_reset(&p);
    }
    free(p.arena);
    free(labels.arena);
    printf("%ld\n", sum);
    return 0;
}
