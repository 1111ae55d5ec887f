/* A program that forks after calling the traced function; the child calls
 * it too. Trace `work`: the parent is traced, the child is released from
 * tracing at once (without the breakpoint it inherited) and runs freely. */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static int data[256];

__attribute__((noinline)) long work(void) {
    long s = 0;
    for (int i = 0; i < 256; i++) s += data[i];
    return s;
}

int main(void) {
    for (int i = 0; i < 256; i++) data[i] = i;
    long before = work();
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        printf("child work=%ld\n", work());
        return 3;
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("parent work=%ld child exit=%d\n", before + work(), WEXITSTATUS(status));
    return 0;
}
