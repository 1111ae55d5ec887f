/* A custom allocator that calls itself (`record --allocations --alloc-fn
 * chain_alloc:size=ARG1`): chain_alloc(n, depth) first asks for the block
 * of depth - 1, then carves its own: 21 calls nested 21 deep from main.
 * The agent keeps track of 16 nested calls a thread; the 5 deepest run
 * unrecorded and are counted. Prints the bytes handed out (21 x 8 = 168). */
#include <stdio.h>
#include <stdlib.h>

static char arena[1 << 16];
static size_t used;

__attribute__((noinline)) void *chain_alloc(size_t n, int depth) {
    if (depth > 0) chain_alloc(n, depth - 1);
    void *b = arena + used;
    used += n;
    return b;
}

int main(void) {
    char *p = chain_alloc(8, 20);
    p[0] = 1;
    printf("%zu\n", used);
    return 0;
}
