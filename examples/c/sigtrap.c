/* SIGTRAP raised by the traced function itself. `poke` reads an array, then
 * traps: with argument "int3" by an int3 instruction, else with
 * raise(SIGTRAP). With a second argument "handle" a handler counts the
 * traps and the program exits 0; without it, SIGTRAP kills the program
 * (exit status 133), natively and traced alike. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile int traps;
static int data[64];

static void on_trap(int sig) {
    (void)sig;
    traps++;
}

__attribute__((noinline)) int poke(int use_int3) {
    int s = 0;
    for (int i = 0; i < 64; i++) s += data[i];
    if (use_int3)
        __asm__ volatile("int3");
    else
        raise(SIGTRAP);
    return s;
}

int main(int argc, char **argv) {
    int use_int3 = argc > 1 && strcmp(argv[1], "int3") == 0;
    if (argc > 2 && strcmp(argv[2], "handle") == 0) signal(SIGTRAP, on_trap);
    for (int i = 0; i < 64; i++) data[i] = i;
    int s = poke(use_int3);
    printf("sum=%d traps=%d\n", s, traps);
    return 0;
}
