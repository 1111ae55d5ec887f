/* linetrace's allocation agent: preloaded into a program (LD_PRELOAD) by
 * `linetrace record --allocations`, it records every call of the malloc
 * family, C++ operator new/delete and mmap/munmap/mremap, on every thread,
 * and lets the allocator run natively.
 *
 * Why it is built this way:
 * - Records go straight into a shared file mapping (LINETRACE_ALLOC_OUT),
 *   each thread filling 64 KiB chunks it claims with one atomic add: no
 *   lock, no system call per event, and what is written survives a crash
 *   of the program (the pages belong to the file).
 * - Chunks linetrace has read come back to the agent (the free ring) and
 *   are filled again: their pages are mapped already, where a fresh chunk
 *   costs the kernel a mapping per page (heap_mix under the agent: 0.38 s
 *   with fresh chunks, 0.27 s reusing them). So the claim table says,
 *   per claim, which chunk it was, and a record's marker is MARKER ^ its
 *   chunk's claim number: a reused chunk's old records do not count.
 * - The real allocator is called through glibc's __libc_* entry points, so
 *   the agent never calls back into itself and never needs dlsym (which
 *   allocates) on the hot path.
 * - Thread-local state uses the initial-exec TLS model: __tls_get_addr may
 *   allocate, and must not be reached from inside malloc.
 * - A record is valid once its last word (the marker) is written, after
 *   the rest: a reader skips records a crash cut in half.
 * The record layout is `trace_rt::agent::AgentRecord`; keep them equal. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include "agent.h"
#include "unwind.h"

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern size_t malloc_usable_size(void *);

/* Kinds: the first nine are trace_rt::format::AllocKind's values. */
enum {
    K_MALLOC = 0, K_CALLOC = 1, K_REALLOC = 2, K_FREE = 3, K_POSIX_MEMALIGN = 4,
    K_ALIGNED_ALLOC = 5, K_MEMALIGN = 6, K_MMAP = 7, K_MUNMAP = 8,
    K_NEW = 16, K_DELETE = 17, K_MREMAP = 18, K_BRK = 19,
    /* hooks.c's custom allocator functions: `align` holds the hook's index */
    K_CUSTOM_ALLOC = 20, K_CUSTOM_FREE = 21, K_CUSTOM_RESET = 22
};

#define MARKER 0x4c54414c4c4f4321ull /* "!COLLATL" */
#define CHUNK_BYTES (64ull << 10)
#define CAPACITY (64ull << 30) /* sparse: only written pages take space */
/* The log's layout (trace_rt::agent has the same constants): the header,
 * the claim table (the chunk of claim k at entry k % CLAIM_SLOTS, 0 once
 * linetrace has taken it), the free ring (chunks linetrace has read, to
 * fill again), then the chunks. */
#define CLAIM_TABLE_AT 4096ull
#define CLAIM_SLOTS 65536ull
#define FREE_RING_AT (CLAIM_TABLE_AT + 8 * CLAIM_SLOTS)
#define FREE_SLOTS 4096ull
#define FIRST_CHUNK (1ull << 20)

struct record {
    uint64_t seq;
    uint64_t time_ns;
    uint64_t ptr_in;
    uint64_t ptr_out;
    uint64_t size;
    uint64_t align;
    uint64_t callsite;
    uint64_t usable;
    uint32_t tid;
    uint32_t kind;
    uint64_t marker;
};

/* The words written often get a cache line each, so that linetrace's
 * polls of the claims do not take away the line every call writes (seq). */
struct header {
    uint64_t magic;
    _Atomic uint64_t next_chunk; /* high-water mark of fresh chunks */
    _Atomic uint64_t dropped;
    uint64_t record_bytes; /* sizeof(struct record) + 8 per stack frame */
    /* Stacks unwound by the agent's unwinder, by backtrace() (where the
     * unwinder does not follow the frames), and, with
     * LINETRACE_ALLOC_UNWIND_CHECK, where the two differ. */
    _Atomic uint64_t unwound_fast;
    _Atomic uint64_t unwound_slow;
    _Atomic uint64_t unwind_mismatch;
    /* Custom allocator functions patched: bit n for the n-th. */
    _Atomic uint64_t hooks_installed;
    /* Calls of them not recorded: nested deeper than hooks.c keeps. */
    _Atomic uint64_t hooks_too_deep;
    /* 1: records' time_ns holds the time stamp counter, which linetrace
     * turns into CLOCK_MONOTONIC nanoseconds. */
    uint64_t time_is_tsc;
    _Alignas(128) _Atomic uint64_t seq; /* the next call's number */
    _Alignas(64) _Atomic uint64_t claims; /* chunks claimed */
    _Alignas(64) _Atomic uint64_t free_taken; /* free ring: taken by the agent */
    _Alignas(64) _Atomic uint64_t free_given; /* free ring: given by linetrace */
};
_Static_assert(offsetof(struct header, time_is_tsc) == 72, "trace_rt::agent reads the header at these offsets");
_Static_assert(offsetof(struct header, seq) == 128, "trace_rt::agent reads the header at these offsets");
_Static_assert(offsetof(struct header, free_given) == 320, "trace_rt::agent reads the header at these offsets");

/* Callers recorded above the calling instruction (LINETRACE_ALLOC_STACK,
 * at most MAX_STACK): each record is followed by that many addresses. */
#define MAX_STACK 32
static int stack_depth;
static int check_unwind; /* LINETRACE_ALLOC_UNWIND_CHECK: both unwinders */
/* LINETRACE_ALLOC_CLOCK=tsc (linetrace says so where the kernel's clock is
 * the TSC itself): a call's time is read with rdtsc, ~10 ns here, where
 * clock_gettime took ~22 ns, a tenth of the agent's cost per call. */
static int time_is_tsc;

static char *base;
static char maps_path[4096]; /* where /proc/self/maps is copied */
static struct header *hdr;
static _Atomic int state; /* 0 new, 1 starting, 2 on, 3 off */
/* The program break as last recorded (0: not known yet). */
static _Atomic uint64_t last_break;

#define TLS __attribute__((tls_model("initial-exec"))) static __thread
TLS char *cur;
TLS char *end;
TLS uint64_t marker; /* MARKER ^ the claim number of cur's chunk */
TLS uint32_t my_tid;
TLS int busy;

static void start(void) {
    int expected = 0;
    if (!atomic_compare_exchange_strong(&state, &expected, 1)) return;
    const char *path = getenv("LINETRACE_ALLOC_OUT");
    int fd = path ? open(path, O_RDWR | O_CLOEXEC) : -1;
    const char *depth = getenv("LINETRACE_ALLOC_STACK");
    stack_depth = depth ? atoi(depth) : 0;
    if (stack_depth < 0) stack_depth = 0;
    if (stack_depth > MAX_STACK) stack_depth = MAX_STACK;
    check_unwind = getenv("LINETRACE_ALLOC_UNWIND_CHECK") != NULL;
    const char *clock = getenv("LINETRACE_ALLOC_CLOCK");
    time_is_tsc = clock && strcmp(clock, "tsc") == 0;
    const char *maps = getenv("LINETRACE_ALLOC_MAPS");
    if (maps && strlen(maps) < sizeof maps_path) strcpy(maps_path, maps);
    /* A program this one execs records nothing (the agent stays loaded
     * through LD_PRELOAD, and passes calls through). */
    unsetenv("LINETRACE_ALLOC_OUT");
    unsetenv("LINETRACE_ALLOC_MAPS");
    unsetenv("LINETRACE_ALLOC_STACK");
    unsetenv("LINETRACE_ALLOC_UNWIND_CHECK");
    unsetenv("LINETRACE_ALLOC_CLOCK");
    if (fd < 0 || ftruncate(fd, (off_t)CAPACITY) != 0) {
        atomic_store(&state, 3);
        return;
    }
    void *m = mmap(NULL, CAPACITY, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        atomic_store(&state, 3);
        return;
    }
    base = m;
    hdr = (struct header *)m;
    atomic_store(&last_break, (uint64_t)sbrk(0));
    if (hdr->magic != MARKER) {
        atomic_store(&hdr->next_chunk, FIRST_CHUNK);
        hdr->record_bytes = sizeof(struct record) + 8 * (uint64_t)stack_depth;
        hdr->time_is_tsc = (uint64_t)time_is_tsc;
        hdr->magic = MARKER;
    }
    atomic_store(&state, 2);
}

/* The callers above the calling instruction, innermost first, zeroes
 * after the last. `frame` is the wrapper's frame (built with frame
 * pointers: the caller's rbp at frame[0], `ret` at frame[1]). */
static void record_stack(uint64_t *stack, void *ret, void **frame) {
    int n = -1;
    if (frame && frame[1] == ret)
        n = unwind_callers((uint64_t)ret, (uint64_t)(frame + 2), (uint64_t)frame[0], stack, stack_depth);
    /* Outside the check the fast path counts nothing: the count is only
     * shown with the check, and a shared counter would cost a locked add
     * on every call. */
    if (n < 0 || check_unwind) {
        /* glibc's backtrace (libgcc's unwinder): find our caller's
         * return address, keep what is above it. */
        void *frames[MAX_STACK + 8];
        int got = backtrace(frames, stack_depth + 8);
        int k = 0;
        while (k < got && frames[k] != ret) k++;
        uint64_t slow[MAX_STACK];
        for (int i = 0; i < stack_depth; i++) {
            int at = k + 1 + i;
            slow[i] = (k < got && at < got && frames[at]) ? (uint64_t)frames[at] - 1 : 0;
        }
        if (n >= 0) {
            for (int i = n; i < stack_depth; i++) stack[i] = 0;
            if (memcmp(stack, slow, 8 * (size_t)stack_depth) != 0)
                atomic_fetch_add_explicit(&hdr->unwind_mismatch, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&hdr->unwound_fast, 1, memory_order_relaxed);
        } else {
            atomic_fetch_add_explicit(&hdr->unwound_slow, 1, memory_order_relaxed);
        }
        memcpy(stack, slow, 8 * (size_t)stack_depth);
        return;
    }
    for (int i = n; i < stack_depth; i++) stack[i] = 0;
}

/* A chunk linetrace has read to its end and handed back, or 0. An entry
 * is read before the taking compare-exchange: linetrace overwrites entry
 * t % FREE_SLOTS only once free_taken is past t, when that exchange fails. */
static uint64_t take_recycled(void) {
    _Atomic uint64_t *ring = (_Atomic uint64_t *)(base + FREE_RING_AT);
    uint64_t taken = atomic_load_explicit(&hdr->free_taken, memory_order_relaxed);
    for (;;) {
        uint64_t given = atomic_load_explicit(&hdr->free_given, memory_order_acquire);
        if (taken >= given) return 0;
        uint64_t at = atomic_load_explicit(&ring[taken % FREE_SLOTS], memory_order_relaxed);
        if (atomic_compare_exchange_weak_explicit(&hdr->free_taken, &taken, taken + 1, memory_order_acq_rel,
                                                  memory_order_relaxed))
            return at;
    }
}

/* Stops recording: the log is full. */
static void *log_full(void) {
    atomic_store(&state, 3);
    atomic_fetch_add(&hdr->dropped, 1);
    cur = end = NULL;
    return NULL;
}

/* Room for the next record in this thread's chunk (claiming a new chunk
 * when it is full), or NULL when the log is full: recording stops then. */
static struct record *claim(size_t bytes) {
    if (!cur || cur + bytes > end) {
        uint64_t at = take_recycled();
        if (!at) {
            at = atomic_fetch_add(&hdr->next_chunk, CHUNK_BYTES);
            /* One system call maps the whole chunk, instead of a page fault
             * per 4 KiB (Linux 5.14+; older ones say EINVAL and fault as
             * before). Any other failure means the log's file system is
             * full: touching the pages would kill the program with SIGBUS,
             * so recording stops and the calls from here on are counted
             * dropped. */
            if (at + CHUNK_BYTES > CAPACITY ||
                (madvise(base + at, CHUNK_BYTES, 23 /* MADV_POPULATE_WRITE */) != 0 && errno != EINVAL))
                return log_full();
        }
        /* Where this thread's records go next, in claim order. An entry not
         * taken yet means linetrace is CLAIM_SLOTS chunks (4 GiB) behind or
         * gone: recording stops rather than overwrite it. */
        uint64_t k = atomic_fetch_add(&hdr->claims, 1);
        _Atomic uint64_t *entry = (_Atomic uint64_t *)(base + CLAIM_TABLE_AT) + k % CLAIM_SLOTS;
        if (atomic_load_explicit(entry, memory_order_acquire) != 0) return log_full();
        atomic_store_explicit(entry, at, memory_order_release);
        cur = base + at;
        end = base + at + CHUNK_BYTES;
        marker = MARKER ^ k;
    }
    struct record *r = (struct record *)cur;
    cur += bytes;
    return r;
}

/* Fills in a claimed record and marks it complete (the marker last: a
 * reader takes a record only once its marker is there). */
static void fill(struct record *r, uint64_t seq, uint32_t kind, uint64_t time_ns, uint64_t ptr_in, uint64_t ptr_out,
                 uint64_t size, uint64_t align, void *ret, uint64_t usable) {
    r->seq = seq;
    r->time_ns = time_ns;
    r->ptr_in = ptr_in;
    r->ptr_out = ptr_out;
    r->size = size;
    r->align = align;
    /* The call instruction, not the return address: its source line. */
    r->callsite = ret ? (uint64_t)ret - 1 : 0;
    r->usable = usable;
    r->tid = my_tid;
    r->kind = kind;
    atomic_signal_fence(memory_order_seq_cst);
    r->marker = marker;
}

/* Records one call: `stack` holds its callers already unwound (a custom
 * allocator's, unwound at its entry), or is NULL to unwind them from the
 * wrapper's `frame`. */
void agent_record(uint32_t kind, uint64_t ptr_in, uint64_t ptr_out, uint64_t size, uint64_t align, void *ret,
                  void **frame, const uint64_t *stack) {
    if (busy) return;
    if (atomic_load_explicit(&state, memory_order_acquire) != 2) {
        start();
        if (atomic_load(&state) != 2) {
            if (hdr) atomic_fetch_add(&hdr->dropped, 1); /* stopped: the log is full */
            return;
        }
    }
    busy = 1;
    int saved_errno = errno; /* the program's, whatever the agent's calls do */
    size_t bytes = (size_t)hdr->record_bytes;
    struct record *r = claim(bytes);
    if (!r) {
        errno = saved_errno;
        busy = 0;
        return;
    }
    /* The call's number before the record's stores: a locked add waits
     * for every store before it to drain. */
    uint64_t seq = atomic_fetch_add_explicit(&hdr->seq, 1, memory_order_relaxed);
    if (!my_tid) my_tid = (uint32_t)syscall(SYS_gettid);
    uint64_t now;
    if (time_is_tsc) {
        now = __rdtsc();
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    }
    if (bytes > sizeof(struct record)) {
        if (stack) memcpy(r + 1, stack, bytes - sizeof(struct record));
        else record_stack((uint64_t *)(r + 1), ret, frame);
    }
    /* The allocator's usable size: of malloc's blocks only (a custom
     * allocator's pointer is not malloc's to ask about). */
    int from_malloc = kind <= K_MEMALIGN || kind == K_NEW;
    uint64_t usable = (ptr_out && from_malloc) ? malloc_usable_size((void *)ptr_out) : 0;
    fill(r, seq, kind, now, ptr_in, ptr_out, size, align, ret, usable);
    /* Did the call move the program break (malloc growing or trimming its
     * main heap with brk)? glibc's sbrk(0) reads a variable, no system
     * call; the exchange makes each move recorded once, by the thread
     * that sees it first. */
    uint64_t brk_now = (uint64_t)sbrk(0);
    if (brk_now != (uint64_t)-1 && atomic_load_explicit(&last_break, memory_order_relaxed) != brk_now) {
        uint64_t before = atomic_exchange(&last_break, brk_now);
        /* The same callers as the call that moved it, copied first: once
         * this thread claims another chunk, linetrace may hand r's back
         * for refilling. */
        uint64_t callers[MAX_STACK];
        if (bytes > sizeof(struct record)) memcpy(callers, r + 1, bytes - sizeof(struct record));
        struct record *b = before && before != brk_now ? claim(bytes) : NULL;
        if (b) {
            if (bytes > sizeof(struct record)) memcpy(b + 1, callers, bytes - sizeof(struct record));
            fill(b, atomic_fetch_add_explicit(&hdr->seq, 1, memory_order_relaxed), K_BRK, now, before, brk_now, 0, 0, ret, 0);
        }
    }
    errno = saved_errno;
    busy = 0;
}

/* A thread's id changes in a forked child: forget it there. Forked
 * children keep recording into the same file (their records carry their
 * own tids). */
static void after_fork_child(void) {
    my_tid = 0;
    cur = end = NULL; /* the parent goes on filling its chunk */
}

/* The modules, for symbols: copied at start (the program and the
 * libraries it links) and again at exit (with those it loaded since). A
 * crash keeps the first copy. */
static void copy_maps(void) {
    if (!maps_path[0]) return;
    int in = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    int out = open(maps_path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    char buf[4096];
    ssize_t n;
    while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0) {
        if (write(out, buf, (size_t)n) != n) break;
    }
    if (in >= 0) close(in);
    if (out >= 0) close(out);
}

__attribute__((constructor)) static void agent_init(void) {
    start();
    copy_maps();
    if (stack_depth > 0) {
        /* The first backtrace loads the unwinder, which allocates: done
         * here, unrecorded, not in the middle of the program's malloc (and
         * the unwinder's table is mapped unrecorded too). */
        void *frames[2];
        busy = 1;
        unwind_init();
        backtrace(frames, 2);
        busy = 0;
    }
    pthread_atfork(NULL, NULL, after_fork_child);
    if (atomic_load(&state) == 2) {
        busy = 1; /* the trampolines' mappings are the agent's, not the program's */
        atomic_store(&hdr->hooks_installed, hooks_init());
        busy = 0;
    }
}

__attribute__((destructor)) static void agent_exit(void) {
    if (atomic_load(&state) == 2) copy_maps();
}

static void note(uint32_t kind, uint64_t ptr_in, uint64_t ptr_out, uint64_t size, uint64_t align, void *ret,
                 void **frame) {
    agent_record(kind, ptr_in, ptr_out, size, align, ret, frame, NULL);
}

int agent_busy(void) {
    return busy;
}

void agent_count_too_deep(void) {
    if (hdr) atomic_fetch_add_explicit(&hdr->hooks_too_deep, 1, memory_order_relaxed);
}

int agent_stack_depth(void) {
    return stack_depth;
}

#define RET __builtin_return_address(0)
/* The wrapper's own frame (the agent is built with frame pointers). */
#define FRAME ((void **)__builtin_frame_address(0))

void *malloc(size_t n) {
    void *p = __libc_malloc(n);
    note(K_MALLOC, 0, (uint64_t)p, n, 0, RET, FRAME);
    return p;
}

void free(void *p) {
    if (p) note(K_FREE, (uint64_t)p, 0, 0, 0, RET, FRAME);
    __libc_free(p);
}

void *calloc(size_t n, size_t s) {
    void *p = __libc_calloc(n, s);
    size_t total = (s && n > SIZE_MAX / s) ? SIZE_MAX : n * s;
    note(K_CALLOC, 0, (uint64_t)p, total, 0, RET, FRAME);
    return p;
}

void *realloc(void *old, size_t n) {
    void *p = __libc_realloc(old, n);
    /* realloc(p, 0) frees p and may return NULL: recorded as it is. */
    note(K_REALLOC, (uint64_t)old, (uint64_t)p, n, 0, RET, FRAME);
    return p;
}

void *reallocarray(void *old, size_t n, size_t s) {
    if (s && n > SIZE_MAX / s) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = __libc_realloc(old, n * s);
    note(K_REALLOC, (uint64_t)old, (uint64_t)p, n * s, 0, RET, FRAME);
    return p;
}

int posix_memalign(void **out, size_t align, size_t n) {
    if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
    void *p = __libc_memalign(align, n);
    if (!p) return ENOMEM;
    *out = p;
    note(K_POSIX_MEMALIGN, 0, (uint64_t)p, n, align, RET, FRAME);
    return 0;
}

void *aligned_alloc(size_t align, size_t n) {
    void *p = __libc_memalign(align, n);
    note(K_ALIGNED_ALLOC, 0, (uint64_t)p, n, align, RET, FRAME);
    return p;
}

void *memalign(size_t align, size_t n) {
    void *p = __libc_memalign(align, n);
    note(K_MEMALIGN, 0, (uint64_t)p, n, align, RET, FRAME);
    return p;
}

void *valloc(size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *p = __libc_memalign(page, n);
    note(K_MEMALIGN, 0, (uint64_t)p, n, page, RET, FRAME);
    return p;
}

void *pvalloc(size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t rounded = (n + page - 1) & ~(page - 1);
    void *p = __libc_memalign(page, rounded ? rounded : page);
    note(K_MEMALIGN, 0, (uint64_t)p, n, page, RET, FRAME);
    return p;
}

/* C++: operator new must throw on failure, which C cannot: then the
 * library's own operator new is called (it throws bad_alloc). */
typedef void *(*new_fn)(size_t);
static void *new_failed(const char *name, size_t n) {
    new_fn real = (new_fn)dlsym(RTLD_NEXT, name);
    return real ? real(n) : NULL;
}
void *_Znwm(size_t n) {
    void *p = __libc_malloc(n ? n : 1);
    if (!p) p = new_failed("_Znwm", n);
    note(K_NEW, 0, (uint64_t)p, n, 0, RET, FRAME);
    return p;
}
void *_Znam(size_t n) {
    void *p = __libc_malloc(n ? n : 1);
    if (!p) p = new_failed("_Znam", n);
    note(K_NEW, 0, (uint64_t)p, n, 0, RET, FRAME);
    return p;
}
void *_ZnwmRKSt9nothrow_t(size_t n, const void *tag) {
    (void)tag;
    void *p = __libc_malloc(n ? n : 1);
    note(K_NEW, 0, (uint64_t)p, n, 0, RET, FRAME);
    return p;
}
void *_ZnamRKSt9nothrow_t(size_t n, const void *tag) {
    (void)tag;
    void *p = __libc_malloc(n ? n : 1);
    note(K_NEW, 0, (uint64_t)p, n, 0, RET, FRAME);
    return p;
}
/* C++17 aligned new (`std::align_val_t`, a size_t): recorded with its
 * alignment. The throwing ones, failing, call the library's own (which
 * throws); the nothrow ones return NULL. */
typedef void *(*new_aligned_fn)(size_t, size_t);
static void *new_aligned_failed(const char *name, size_t n, size_t align) {
    new_aligned_fn real = (new_aligned_fn)dlsym(RTLD_NEXT, name);
    return real ? real(n, align) : NULL;
}
#define NEW_ALIGNED_VARIANT(name, throwing, ...)                               \
    void *name(size_t n, size_t align, ##__VA_ARGS__) {                        \
        void *p = __libc_memalign(align, n ? n : 1);                          \
        if (!p && (throwing)) p = new_aligned_failed(#name, n, align);        \
        note(K_NEW, 0, (uint64_t)p, n, align, RET, FRAME);                    \
        return p;                                                             \
    }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
NEW_ALIGNED_VARIANT(_ZnwmSt11align_val_t, 1)
NEW_ALIGNED_VARIANT(_ZnamSt11align_val_t, 1)
NEW_ALIGNED_VARIANT(_ZnwmSt11align_val_tRKSt9nothrow_t, 0, const void *tag)
NEW_ALIGNED_VARIANT(_ZnamSt11align_val_tRKSt9nothrow_t, 0, const void *tag)
#pragma GCC diagnostic pop
/* Every operator delete frees what any operator new returned: the size,
 * alignment and nothrow arguments change nothing here. */
#define DELETE_VARIANT(name, ...)                                        \
    void name(void *p, ##__VA_ARGS__) {                                  \
        if (p) note(K_DELETE, (uint64_t)p, 0, 0, 0, RET, FRAME);         \
        __libc_free(p);                                                  \
    }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
DELETE_VARIANT(_ZdlPv)
DELETE_VARIANT(_ZdaPv)
DELETE_VARIANT(_ZdlPvm, size_t n)
DELETE_VARIANT(_ZdaPvm, size_t n)
DELETE_VARIANT(_ZdlPvRKSt9nothrow_t, const void *tag)
DELETE_VARIANT(_ZdaPvRKSt9nothrow_t, const void *tag)
DELETE_VARIANT(_ZdlPvSt11align_val_t, size_t align)
DELETE_VARIANT(_ZdaPvSt11align_val_t, size_t align)
DELETE_VARIANT(_ZdlPvmSt11align_val_t, size_t n, size_t align)
DELETE_VARIANT(_ZdaPvmSt11align_val_t, size_t n, size_t align)
DELETE_VARIANT(_ZdlPvSt11align_val_tRKSt9nothrow_t, size_t align, const void *tag)
DELETE_VARIANT(_ZdaPvSt11align_val_tRKSt9nothrow_t, size_t align, const void *tag)
#pragma GCC diagnostic pop


void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    long r = syscall(SYS_mmap, addr, len, prot, flags, fd, off);
    void *p = (void *)r;
    if (r < 0 && r > -4096) {
        errno = (int)-r;
        p = MAP_FAILED;
    } else {
        note(K_MMAP, 0, (uint64_t)p, len, 0, RET, FRAME);
    }
    return p;
}
void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
    __attribute__((alias("mmap")));

int munmap(void *addr, size_t len) {
    long r = syscall(SYS_munmap, addr, len);
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    note(K_MUNMAP, (uint64_t)addr, 0, len, 0, RET, FRAME);
    return 0;
}

void *mremap(void *old, size_t old_len, size_t len, int flags, ...) {
    void *new_addr = NULL;
    if (flags & MREMAP_FIXED) {
        __builtin_va_list ap;
        __builtin_va_start(ap, flags);
        new_addr = __builtin_va_arg(ap, void *);
        __builtin_va_end(ap);
    }
    long r = syscall(SYS_mremap, old, old_len, len, flags, new_addr);
    if (r < 0 && r > -4096) {
        errno = (int)-r;
        return MAP_FAILED;
    }
    note(K_MREMAP, (uint64_t)old, (uint64_t)r, len, old_len, RET, FRAME);
    return (void *)r;
}
