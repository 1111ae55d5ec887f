/* Recursion through the traced function's caller: trace `visit`. `walk`
 * calls `visit` for each child, and `visit` calls `walk` again. The inner
 * calls of `visit` return to the same instruction of `walk` as the
 * outermost one, where the invocation must end: a recorder that learnt
 * that return target inside the invocation must not follow it out of it.
 * The tree is walked twice, so a second round of invocations meets code
 * the first one already translated. */
#include <stdio.h>

struct node {
    struct node *left, *right;
    long value;
};

static struct node nodes[15];

long visit(struct node *n);

__attribute__((noinline)) long walk(struct node *n) {
    long sum = 0;
    if (n->left) sum += visit(n->left);
    if (n->right) sum += visit(n->right);
    return sum + n->value;
}

__attribute__((noinline)) long visit(struct node *n) {
    n->value += 1;
    long below = walk(n);
    return below * 2;
}

int main(void) {
    for (int i = 0; i < 15; i++) {
        nodes[i].value = i;
        if (2 * i + 2 < 15) {
            nodes[i].left = &nodes[2 * i + 1];
            nodes[i].right = &nodes[2 * i + 2];
        }
    }
    long first = walk(&nodes[0]);
    long second = walk(&nodes[0]);
    printf("%ld %ld\n", first, second);
    return 0;
}
