/* Ends the program inside the traced function: `leave` sums a small array,
 * then calls exit(3) (atexit handlers and stdio run first, inside the
 * traced call) or _exit(4) (straight to the system call). Trace `leave`:
 * the exit system call itself counts as an instruction that ran, in both
 * backends, as cachegrind counts it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int values[64];

__attribute__((noinline)) int leave(const char *how) {
    int s = 0;
    for (int i = 0; i < 64; i++) s += values[i];
    if (strcmp(how, "exit") == 0) exit(3);
    if (strcmp(how, "_exit") == 0) _exit(4);
    return s;
}

int main(int argc, char **argv) {
    for (int i = 0; i < 64; i++) values[i] = i;
    printf("leave=%d\n", leave(argc > 1 ? argv[1] : "return"));
    return 0;
}
