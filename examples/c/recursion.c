/* Recursion and tail calls: `fib` calls itself (one traced invocation,
 * many nested frames); `dispatch` ends in a tail call (`jmp`) to `leaf`.
 * Reads n from stdin (default 10), so it also checks that stdin reaches
 * the traced program. */
#include <stdio.h>

static volatile int table[32];

__attribute__((noinline)) int fib(int n) {
    if (n < 2) return table[n];
    return fib(n - 1) + fib(n - 2);
}

__attribute__((noinline)) int leaf(int x) {
    return table[x & 31] + x;
}

__attribute__((noinline)) int dispatch(int x) {
    table[0] = 0;
    return leaf(x + 1); /* compiled as a tail call at -O2 */
}

int main(void) {
    int n = 10;
    if (scanf("%d", &n) != 1) n = 10;
    for (int i = 0; i < 32; i++) table[i] = i;
    printf("fib(%d)=%d dispatch=%d\n", n, fib(n), dispatch(n));
    return 0;
}
