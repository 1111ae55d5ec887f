/* (b) The same sum over 256 values, once from a contiguous array and once
 * by chasing a linked list whose nodes were allocated in shuffled order.
 * Trace `sum_array` and `sum_list` (or `run` for both). */
#include <stdio.h>
#include <stdlib.h>

#define N 256

struct node {
    struct node *next;
    long value;
    char payload[48]; /* one node per cache line */
};

__attribute__((noinline)) long sum_array(const long *values, int n) {
    long s = 0;
    for (int i = 0; i < n; i++) s += values[i];
    return s;
}

__attribute__((noinline)) long sum_list(const struct node *head) {
    long s = 0;
    for (; head; head = head->next) s += head->value;
    return s;
}

__attribute__((noinline)) long run(const long *values, const struct node *head) {
    return sum_array(values, N) + sum_list(head);
}

int main(void) {
    static long values[N];
    static struct node nodes[N];
    int order[N];
    for (int i = 0; i < N; i++) order[i] = i;
    unsigned seed = 12345; /* fixed shuffle: the output never changes */
    for (int i = N - 1; i > 0; i--) {
        seed = seed * 1103515245u + 12345u;
        int j = (int)((seed >> 8) % (unsigned)(i + 1));
        int t = order[i]; order[i] = order[j]; order[j] = t;
    }
    for (int i = 0; i < N; i++) {
        values[i] = i;
        nodes[order[i]].value = i;
        nodes[order[i]].next = i + 1 < N ? &nodes[order[i + 1]] : NULL;
    }
    printf("total=%ld\n", run(values, &nodes[order[0]]));
    return 0;
}
