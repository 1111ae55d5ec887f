/* A libc IFUNC from the traced program's point of view: `measure` calls
 * strlen, which glibc resolves at load time to an implementation for the
 * CPU (__strlen_avx2, __strlen_evex, __strlen_sse2, ...). Built both
 * dynamically and with -static; `-f strlen` must trace that
 * implementation, not the resolver. */
#include <stdio.h>
#include <string.h>

static char text[300];

__attribute__((noinline)) size_t measure(const char *s) { return strlen(s); }

int main(void) {
    memset(text, 'x', 257);
    size_t n = measure(text);
    printf("len=%zu\n", n);
    return 0;
}
