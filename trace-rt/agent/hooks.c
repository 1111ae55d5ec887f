/* Custom allocator functions (`record --allocations --alloc-fn`): the
 * program calls them directly, so they cannot be interposed by symbol;
 * the agent patches each one's entry instead.
 *
 * How a call goes:
 *   function entry:  jmp entry_N                      (the patch, 5 bytes)
 *   entry_N:         push N; jmp hook_enter_stub
 *   hook_enter_stub: saves every register, calls
 *                    linetrace_hook_enter, which notes the arguments and
 *                    the callers, keeps the return address on a per-thread
 *                    shadow stack and puts after_N in its place; restores
 *                    the registers; returns into moved_N
 *   moved_N:         the function's first instructions (linetrace chose
 *                    them: whole; short branches widened to rel32; those
 *                    and RIP-relative operands aimed from here); jmp back
 *                    past the patch
 *   (the function runs natively and returns to after_N)
 *   after_N:         push N; jmp hook_exit_stub
 *   hook_exit_stub:  saves every register, calls linetrace_hook_exit,
 *                    which records the call and gives back the real return
 *                    address; returns there.
 * Why this way: the arguments and stack-passed ones stay exactly where the
 * function expects them (no extra frame), the function's own code is not
 * touched beyond its first bytes, and nothing is allocated. The
 * trampolines sit within 2 GiB of the function (rel32 jumps, re-aimed
 * RIP-relative operands). The bytes are checked against what linetrace
 * read from the file before the patch is written. */
#define _GNU_SOURCE
#include <link.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "agent.h"
#include "unwind.h"

#define MAX_HOOKS 32
#define MAX_MOVED 32
/* Nested calls of custom allocator functions a thread can be inside. */
#define MAX_PENDING 16
#define MAX_STACK 32

enum { K_CUSTOM_ALLOC = 20, K_CUSTOM_FREE = 21, K_CUSTOM_RESET = 22 };

struct hook {
    char role; /* 'a' alloc, 'f' free, 'r' reset; 0: not installed */
    int size_arg, count_arg, ptr_arg; /* 1-based; 0: none. ptr_arg: the pointer freed, or the arena */
    uint8_t *moved;                   /* moved_N */
    uint8_t *after;                   /* after_N */
};
/* By their place in LINETRACE_ALLOC_HOOKS: the index records carry. */
static struct hook hooks[MAX_HOOKS];

/* A call in progress: where it returns, its arguments and callers. */
struct pending {
    uint64_t ret;
    uint64_t slot; /* where the return address was (the caller's rsp - 8) */
    uint64_t args[6];
    uint64_t stack[MAX_STACK];
};
#define TLS __attribute__((tls_model("initial-exec"))) static __thread
TLS struct pending shadow[MAX_PENDING];
TLS int depth;

AGENT_INTERNAL void *linetrace_hook_enter(uint64_t n, const uint64_t *saved, uint64_t *slot, uint64_t caller_rbp);
AGENT_INTERNAL uint64_t linetrace_hook_exit(uint64_t n, uint64_t result, uint64_t sp);

/* The stubs. They leave every register as they found it but the ones
 * they are meant to change (the return address slot; nothing else): GCC
 * calls a function of its own file knowing which registers it really
 * clobbers (-fipa-ra), so its callers may keep values in rdi, r11 or a
 * vector register across the call; and with whatever stack alignment that
 * function needs, which may be none. So: the hook's index comes on the
 * stack (entry_N and after_N push it), every general register and the
 * flags are pushed, the vector and x87 state is saved with xsave (mask
 * 0xff: x87, SSE, AVX, AVX-512), rsp is aligned before calling C, and the
 * stub leaves with `ret` through the index's slot, now holding where to go.
 * Frame: [rbp] the caller's rbp, [rbp + 8] the index (then the target),
 * [rbp + 16] the return address slot (entry) or the rsp after the return
 * (exit); below rbp: rflags, r11, r10, r9, r8, rdi, rsi, rdx, rcx, rax. */
#define SAVE_ALL                                                                 \
    "  push %rbp\n mov %rsp, %rbp\n pushfq\n"                                  \
    "  push %r11\n push %r10\n push %r9\n push %r8\n push %rdi\n push %rsi\n" \
    "  push %rdx\n push %rcx\n push %rax\n"                                     \
    "  and $-64, %rsp\n sub $4096, %rsp\n"                                      \
    /* xsave leaves the header's reserved bytes as they were, and xrstor  \
     * faults unless they are zero */                                       \
    "  movq $0, 512(%rsp)\n movq $0, 520(%rsp)\n movq $0, 528(%rsp)\n"          \
    "  movq $0, 536(%rsp)\n movq $0, 544(%rsp)\n movq $0, 552(%rsp)\n"          \
    "  movq $0, 560(%rsp)\n movq $0, 568(%rsp)\n"                               \
    "  mov $0xff, %eax\n xor %edx, %edx\n xsave64 (%rsp)\n"
#define RESTORE_ALL_AND_GO                                                       \
    "  mov %rax, 8(%rbp)\n"                                                      \
    "  mov $0xff, %eax\n xor %edx, %edx\n xrstor64 (%rsp)\n"                    \
    "  lea -80(%rbp), %rsp\n"                                                    \
    "  pop %rax\n pop %rcx\n pop %rdx\n pop %rsi\n pop %rdi\n pop %r8\n"       \
    "  pop %r9\n pop %r10\n pop %r11\n popfq\n pop %rbp\n"                     \
    "  ret\n"
__asm__(
    ".text\n"
    ".globl linetrace_hook_enter_stub\n"
    ".hidden linetrace_hook_enter_stub\n"
    "linetrace_hook_enter_stub:\n" SAVE_ALL
    "  mov 8(%rbp), %rdi\n"
    "  lea -80(%rbp), %rsi\n"
    "  lea 16(%rbp), %rdx\n"
    "  mov 0(%rbp), %rcx\n"
    "  call linetrace_hook_enter\n" RESTORE_ALL_AND_GO
    ".globl linetrace_hook_exit_stub\n"
    ".hidden linetrace_hook_exit_stub\n"
    "linetrace_hook_exit_stub:\n" SAVE_ALL
    "  mov 8(%rbp), %rdi\n"
    "  mov -80(%rbp), %rsi\n"
    "  lea 16(%rbp), %rdx\n"
    "  call linetrace_hook_exit\n" RESTORE_ALL_AND_GO);
extern char linetrace_hook_enter_stub[], linetrace_hook_exit_stub[];

void *linetrace_hook_enter(uint64_t n, const uint64_t *saved, uint64_t *slot, uint64_t caller_rbp) {
    struct hook *h = &hooks[n];
    if (depth == MAX_PENDING) {
        agent_count_too_deep(); /* runs unrecorded */
        return h->moved;
    }
    struct pending *p = &shadow[depth++];
    p->ret = *slot;
    p->slot = (uint64_t)slot;
    /* saved: rax, rcx, rdx, rsi, rdi, r8, r9, r10, r11, rflags */
    static const int arg_at[6] = {4, 3, 2, 1, 5, 6}; /* rdi, rsi, rdx, rcx, r8, r9 */
    for (int i = 0; i < 6; i++) p->args[i] = saved[arg_at[i]];
    int wanted = agent_stack_depth();
    if (wanted > 0 && !agent_busy()) {
        /* The caller's frame: rbp is still the caller's (the function's
         * prologue has not run). */
        int got = unwind_callers(p->ret, (uint64_t)(slot + 1), caller_rbp, p->stack, wanted);
        for (int i = got < 0 ? 0 : got; i < wanted; i++) p->stack[i] = 0;
    }
    *slot = (uint64_t)h->after;
    return h->moved;
}

uint64_t linetrace_hook_exit(uint64_t n, uint64_t result, uint64_t sp) {
    /* The entry whose return address slot was just popped; entries above
     * it were left by a longjmp out of their calls. */
    while (depth > 0 && shadow[depth - 1].slot < sp - 8) depth--;
    if (depth == 0 || shadow[depth - 1].slot != sp - 8) {
        static const char lost[] = "linetrace agent: a custom allocator returned to a call it has no record of\n";
        (void)!write(2, lost, sizeof lost - 1);
        abort();
    }
    struct pending *p = &shadow[--depth];
    struct hook *h = &hooks[n];
    uint64_t arg = 0;
    switch (h->role) {
    case 'a': {
        uint64_t size = p->args[h->size_arg - 1];
        if (h->count_arg) {
            uint64_t count = p->args[h->count_arg - 1];
            size = count && size > UINT64_MAX / count ? UINT64_MAX : size * count;
        }
        /* ptr_in: the arena the block comes from (0: none named) */
        uint64_t arena = h->ptr_arg ? p->args[h->ptr_arg - 1] : 0;
        agent_record(K_CUSTOM_ALLOC, arena, result, size, n, (void *)p->ret, NULL, p->stack);
        break;
    }
    case 'f':
        arg = p->args[h->ptr_arg - 1];
        if (arg) agent_record(K_CUSTOM_FREE, arg, 0, 0, n, (void *)p->ret, NULL, p->stack);
        break;
    default: /* ptr_in: the arena reset (0: everything) */
        arg = h->ptr_arg ? p->args[h->ptr_arg - 1] : 0;
        agent_record(K_CUSTOM_RESET, arg, 0, 0, n, (void *)p->ret, NULL, p->stack);
    }
    return p->ret;
}

/* ---- installing ---- */

static int first_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    *(uint64_t *)data = info->dlpi_addr;
    return 1; /* the program itself comes first */
}

/* A page for trampolines within 2 GiB of `near`: below it first. */
static uint8_t *page_near(uint64_t near) {
    long page = sysconf(_SC_PAGESIZE);
    for (int side = 0; side < 2; side++) {
        for (uint64_t k = 1; k < 1800; k++) {
            uint64_t hint = ((near & ~0xfffffull) + (side ? k : -k) * 0x100000ull);
            void *m = mmap((void *)hint, (size_t)page, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | 0x100000 /* MAP_FIXED_NOREPLACE */, -1, 0);
            if (m == MAP_FAILED) continue;
            uint64_t at = (uint64_t)m;
            if ((at > near ? at - near : near - at) < (1ull << 31) - (1u << 20)) return m;
            munmap(m, (size_t)page);
        }
    }
    return NULL;
}

static uint8_t *emit_jump(uint8_t *at, uint64_t target) {
    static const uint8_t jmp_rip[6] = {0xff, 0x25, 0, 0, 0, 0}; /* jmp [rip+0] */
    memcpy(at, jmp_rip, 6);
    memcpy(at + 6, &target, 8);
    return at + 14;
}

static uint8_t *emit_index(uint8_t *at, uint32_t n) {
    at[0] = 0x68; /* push imm32 */
    memcpy(at + 1, &n, 4);
    return at + 5;
}

static int hex_byte(const char *s) {
    int v = 0;
    for (int i = 0; i < 2; i++) {
        char c = s[i];
        v = v * 16 + (c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1000);
    }
    return v < 0 ? -1 : v;
}

/* Trampoline pages, writable while they are filled. */
struct area {
    uint8_t *pages[MAX_HOOKS];
    int n;
    uint8_t *at, *end;
};

/* Reads hex bytes up to a space into `out` (at most `room`); returns how
 * many, or -1. */
static int read_hex(const char **p, uint8_t *out, int room) {
    int n = 0;
    while ((*p)[0] && (*p)[0] != ' ') {
        int b = hex_byte(*p);
        if (b < 0 || n == room) return -1;
        out[n++] = (uint8_t)b;
        *p += 2;
    }
    if (**p != ' ') return -1;
    ++*p;
    return n;
}

/* Writes hook `n`'s trampolines for the spec `ROLE SIZE COUNT PTR ADDRESS
 * ORIGINAL MOVED FIXUPS`; returns where its function's patch must jump
 * (NULL if it cannot be hooked), and sets *fn_out to the function. */
static uint8_t *build(int n, const char *spec, uint64_t bias, struct area *a, uint8_t **fn_out) {
    char role;
    int size_arg, count_arg, ptr_arg, used = 0;
    unsigned long long address;
    if (sscanf(spec, "%c %d %d %d %llx %n", &role, &size_arg, &count_arg, &ptr_arg, &address, &used) < 5) return NULL;
    int args_ok = role == 'a'   ? size_arg >= 1 && size_arg <= 6 && count_arg >= 0 && count_arg <= 6 && ptr_arg >= 0 &&
                                    ptr_arg <= 6
                  : role == 'f' ? ptr_arg >= 1 && ptr_arg <= 6
                                : role == 'r' && ptr_arg >= 0 && ptr_arg <= 6;
    if (!args_ok) return NULL;
    const char *p = spec + used;
    uint8_t original[MAX_MOVED], moved[MAX_MOVED];
    int original_len = read_hex(&p, original, MAX_MOVED);
    int len = read_hex(&p, moved, MAX_MOVED);
    if (original_len < 5 || len < 5) return NULL;
    uint8_t *fn = (uint8_t *)(uintptr_t)(bias + address);
    if (memcmp(fn, original, (size_t)original_len) != 0) return NULL; /* not the code linetrace read */
    uint64_t far = (1ull << 31) - (1u << 20);
    if (!a->at || a->end - a->at < 19 + len + 14 + 19 ||
        (uint64_t)(a->at > fn ? a->at - fn : fn - a->at) > far) {
        uint8_t *page = page_near((uint64_t)fn);
        if (!page || a->n == MAX_HOOKS) return NULL;
        a->pages[a->n++] = page;
        a->at = page;
        a->end = page + sysconf(_SC_PAGESIZE);
    }
    uint8_t *entry = a->at;
    uint8_t *moved_at = emit_jump(emit_index(entry, (uint32_t)n), (uint64_t)linetrace_hook_enter_stub);
    memcpy(moved_at, moved, (size_t)len);
    /* Branches and RIP-relative operands: aimed at their targets from
     * here. */
    while (*p && *p != '-') {
        unsigned off, end;
        unsigned long long target;
        int got = 0;
        if (sscanf(p, "%u:%u:%llx%n", &off, &end, &target, &got) < 3 || off + 4 > end || end > (unsigned)len)
            return NULL;
        p += got;
        int64_t rel = (int64_t)(bias + target) - (int64_t)(uint64_t)(moved_at + end);
        if (rel < INT32_MIN || rel > INT32_MAX) return NULL;
        int32_t field = (int32_t)rel;
        memcpy(moved_at + off, &field, 4);
        if (*p == ',') p++;
    }
    uint8_t *after = emit_jump(moved_at + len, (uint64_t)(fn + original_len));
    a->at = emit_jump(emit_index(after, (uint32_t)n), (uint64_t)linetrace_hook_exit_stub);
    hooks[n] = (struct hook){role, size_arg, count_arg, ptr_arg, moved_at, after};
    *fn_out = fn;
    return entry;
}

/* Writes `jmp entry` over the first bytes of `fn`. */
static int patch(uint8_t *fn, uint8_t *entry) {
    long page = sysconf(_SC_PAGESIZE);
    uint8_t *first = (uint8_t *)((uint64_t)fn & ~(uint64_t)(page - 1));
    size_t span = (size_t)((fn + 5) - first);
    if (mprotect(first, span, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) return 0;
    uint8_t jump[5] = {0xe9};
    int32_t rel = (int32_t)(entry - (fn + 5));
    memcpy(jump + 1, &rel, 4);
    memcpy(fn, jump, 5);
    mprotect(first, span, PROT_READ | PROT_EXEC);
    return 1;
}

uint64_t hooks_init(void) {
    uint64_t installed = 0;
    const char *env = getenv("LINETRACE_ALLOC_HOOKS");
    if (!env || !*env) return 0;
    uint64_t bias = 0;
    dl_iterate_phdr(first_object, &bias);
    struct area a = {{0}, 0, NULL, NULL};
    uint8_t *entries[MAX_HOOKS] = {0}, *fns[MAX_HOOKS] = {0};
    const char *spec = env;
    for (int n = 0; spec && *spec; n++) {
        const char *next = strchr(spec, ';');
        size_t len = next ? (size_t)(next - spec) : strlen(spec);
        char one[256];
        if (n < MAX_HOOKS && len < sizeof one) {
            memcpy(one, spec, len);
            one[len] = 0;
            entries[n] = build(n, one, bias, &a, &fns[n]);
        }
        spec = next ? next + 1 : NULL;
    }
    /* The trampolines become executable before any entry jumps to them
     * (constructors run before main: the program has one thread). */
    long page = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < a.n; i++) mprotect(a.pages[i], (size_t)page, PROT_READ | PROT_EXEC);
    for (int n = 0; n < MAX_HOOKS; n++) {
        if (!entries[n]) continue;
        if (patch(fns[n], entries[n])) installed |= 1ull << n;
    }
    unsetenv("LINETRACE_ALLOC_HOOKS");
    return installed;
}
