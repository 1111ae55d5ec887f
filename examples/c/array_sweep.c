/* (a) The classic: a forward sweep that doubles every element, then a
 * backward half-sweep that halves the first 500. Trace `work`. */
#include <stdio.h>
#define ARRAY_SIZE 1000
int array[ARRAY_SIZE];
__attribute__((noinline)) void work(void) {
    for (int i = 0; i < ARRAY_SIZE; i++) array[i] *= 2;
    for (int i = ARRAY_SIZE / 2 - 1; i >= 0; i--) array[i] /= 2;
}
int main(void) {
    for (int i = 0; i < ARRAY_SIZE; i++) array[i] = i;
    work();
    long s = 0;
    for (int i = 0; i < ARRAY_SIZE; i++) s += array[i];
    printf("sum=%ld\n", s);
    return 0;
}
