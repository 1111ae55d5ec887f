/* backtrace() inside the traced function: `work` recurses three deep and
 * `show` prints its callers. Traced with the rewrite backend the frames must
 * be the native ones (return addresses stay the original ones). Addresses
 * are cut off (ASLR); function names and offsets remain. Trace `work`. */
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) void show(void) {
    void *frames[32];
    int n = backtrace(frames, 32);
    char **names = backtrace_symbols(frames, n);
    if (!names) return;
    for (int i = 0; i < n; i++) {
        char *cut = strchr(names[i], '[');
        if (cut) *cut = 0;
        printf("%s\n", names[i]);
    }
    free(names);
}

__attribute__((noinline)) int work(int depth) {
    if (depth == 0) {
        show();
        return 0;
    }
    return 1 + work(depth - 1);
}

int main(void) {
    printf("depth=%d\n", work(3));
    return 0;
}
