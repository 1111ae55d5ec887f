/* Allocations through a wrapper: every block comes from xmalloc, so the
 * calling instruction alone says nothing; `record --allocations
 * --alloc-stack N` shows who called xmalloc. Leaks, on purpose: 10 nodes
 * of 48 bytes (make_node) and 1 name of 16 bytes (make_name); 3 names are
 * freed. */
#include <stdlib.h>

__attribute__((noinline)) void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) abort();
    return p;
}

__attribute__((noinline)) void *make_node(void) { return xmalloc(48); }

__attribute__((noinline)) void *make_name(void) { return xmalloc(16); }

int main(void) {
    for (int i = 0; i < 10; i++) make_node();
    for (int i = 0; i < 3; i++) free(make_name());
    make_name();
    return 0;
}
