/* A handler that runs hundreds of times while a recorder runs `work` (a
 * 1 ms interval timer), and looks at where each signal interrupted the program:
 * the pc in its ucontext must lie in the program's own code (the code that
 * was mapped before `work` began), never in a recorder's code cache. The
 * handler also reads memory of its own, and `work` must compute the same
 * sum as natively: a recorder whose handler clobbered the interrupted
 * code's state would show here. How many signals interrupted `work` goes
 * to stderr (it varies from run to run). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <ucontext.h>
#include <unistd.h>

#ifndef STEPS
#define STEPS (4 << 20)
#endif
#define WORDS (1 << 16)
#define MAX_RANGES 64

static unsigned long code_lo[MAX_RANGES], code_hi[MAX_RANGES];
static int code_ranges;
static volatile sig_atomic_t signals, outside, in_work;
/* `work` is alone in its section: the linker marks where it starts and
 * stops. */
extern char __start_work_text[], __stop_work_text[];
static unsigned history[256];

/* The executable mappings of the process now. */
static void read_code_ranges(void) {
    static char text[1 << 16];
    int fd = open("/proc/self/maps", O_RDONLY);
    if (fd < 0) return;
    ssize_t n, len = 0;
    while ((n = read(fd, text + len, sizeof text - 1 - len)) > 0) len += n;
    close(fd);
    text[len] = 0;
    for (char *line = strtok(text, "\n"); line && code_ranges < MAX_RANGES; line = strtok(NULL, "\n")) {
        unsigned long lo, hi;
        char perms[5];
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && perms[2] == 'x') {
            code_lo[code_ranges] = lo;
            code_hi[code_ranges++] = hi;
        }
    }
}

static void on_alarm(int sig, siginfo_t *info, void *context) {
    (void)sig;
    (void)info;
    unsigned long pc = (unsigned long)((ucontext_t *)context)->uc_mcontext.gregs[REG_RIP];
    int known = 0;
    /* All MAX_RANGES entries (unused ones are empty): the same reads in
     * every run, whatever the process has mapped. */
    for (int i = 0; i < MAX_RANGES; i++) known |= (pc >= code_lo[i]) & (pc < code_hi[i]);
    if (!known) outside++;
    /* Branch-free: every run of the handler reads and writes the same. */
    in_work += pc >= (unsigned long)__start_work_text && pc < (unsigned long)__stop_work_text;
    history[signals & 255] += (unsigned)pc;
    signals++;
}

/* A weighted walk over the array: millions of scalar reads. */
__attribute__((noinline, section("work_text"))) unsigned long work(const unsigned *a) {
    unsigned long s = 0;
    for (unsigned n = 0, i = 0; n < STEPS; n++, i = (i * 5 + 1) & (WORDS - 1)) s += a[i] * (unsigned long)(n & 3);
    return s;
}

int main(void) {
    unsigned *a = calloc(WORDS, sizeof(unsigned));
    if (!a) return 1;
    for (int i = 0; i < WORDS; i += 1) a[i] = (unsigned)(i % 7);
    read_code_ranges();
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_sigaction = on_alarm;
    act.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGALRM, &act, NULL);
    struct itimerval every = {.it_interval = {0, 1000}, .it_value = {0, 1000}};
    setitimer(ITIMER_REAL, &every, NULL);
    unsigned long s = work(a);
    struct itimerval off = {0};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("sum %lu\n", s);
    printf("pcs outside the program's code: %d\n", (int)outside);
    fprintf(stderr, "signals in work %d\n", (int)in_work);
    return 0;
}
