/* An exec inside the traced function: `launch` reads an array, then execs
 * /bin/echo, which prints its argument. The new program is not the traced
 * function's code and must run untraced. */
#include <stdio.h>
#include <unistd.h>

static int data[32];

__attribute__((noinline)) int launch(void) {
    int s = 0;
    for (int i = 0; i < 32; i++) s += data[i];
    fflush(stdout);
    execl("/bin/echo", "echo", "exec'd echo", (char *)0);
    return s; /* only if exec failed */
}

int main(void) {
    for (int i = 0; i < 32; i++) data[i] = i;
    printf("before exec\n");
    return launch();
}
