/* The agent's stack unwinder: the callers above an allocator call, from
 * .eh_frame, at a cost of a table lookup and one or two loads per frame.
 *
 * Why not glibc's backtrace(): it interprets the call frame information of
 * every frame anew (libgcc's unwinder), a few hundred nanoseconds a frame,
 * and allocation-heavy programs make millions of calls. What a frame needs
 * on x86-64 is almost always "the caller's frame is at rsp + N (or rbp + N),
 * its return address just below it, rbp saved at a fixed place or not
 * touched": that rule is worked out once per return address, from the same
 * .eh_frame libgcc reads (found with libgcc's _Unwind_Find_FDE), and kept
 * in a table all threads share. Anything else (a CFA expression, a
 * register other than rsp/rbp holding the CFA, a signal frame) makes the
 * caller fall back to backtrace() for that call: correct first, fast where
 * it can be. LINETRACE_ALLOC_UNWIND_CHECK runs both on every call and
 * counts where they differ (tests/allocations.rs checks there are none).
 *
 * No memory is allocated here (the unwinder runs inside malloc's
 * wrapper): the table is one anonymous mapping made at start. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "unwind.h"

struct dwarf_eh_bases {
    void *tbase;
    void *dbase;
    void *func;
};
extern const void *_Unwind_Find_FDE(void *pc, struct dwarf_eh_bases *bases);

/* A rule: how to find the caller's frame from a frame stopped at a pc. */
enum rule_kind {
    CFA_RSP = 0,       /* CFA = rsp + cfa_offset */
    CFA_RBP = 1,       /* CFA = rbp + cfa_offset */
    CFA_AT_RBP = 2,    /* CFA = *(rbp + cfa_offset): GCC's realigned main */
    END_OF_STACK = 3,
    UNSUPPORTED = 4
};
enum rbp_rule {
    RBP_SAME = 0,      /* rbp is not touched */
    RBP_AT_CFA = 1,    /* the caller's rbp is at CFA + rbp_offset */
    RBP_AT_RBP = 2,    /* the caller's rbp is at rbp + rbp_offset */
    RBP_OTHER = 3
};
struct rule {
    enum rule_kind kind;
    enum rbp_rule rbp;
    int32_t cfa_offset;
    int32_t rbp_offset;
};

/* The table: 65536 entries, one per hash of the pc, each {pc, rule}. A
 * writer claims an entry by swapping its pc for BUSY, writes the rule, then
 * the new pc; a reader reads pc, rule, pc again and takes the rule only if
 * both reads saw its pc (a seqlock): threads share the table without a
 * lock and never read a rule torn or meant for another pc. An entry taken
 * by another pc is replaced (it is a cache); a writer that loses a race
 * just does not cache. */
#define TABLE_BITS 16
#define BUSY 1
struct entry {
    _Atomic uint64_t pc;
    _Atomic uint64_t rule;
};
static struct entry *table;

static uint64_t slot(uint64_t pc) {
    return (pc * 0x9e3779b97f4a7c15ull) >> (64 - TABLE_BITS);
}

/* kind in bits 0-3, rbp rule 4-7, rbp offset 8-31 (signed), CFA offset
 * 32-63 (signed). */
static uint64_t pack(const struct rule *r) {
    return (uint64_t)r->kind | (uint64_t)r->rbp << 4 | (uint64_t)((uint32_t)r->rbp_offset & 0xffffff) << 8 |
           (uint64_t)(uint32_t)r->cfa_offset << 32;
}

static int lookup(uint64_t pc, struct rule *r) {
    if (!table) return 0;
    struct entry *e = &table[slot(pc)];
    if (atomic_load_explicit(&e->pc, memory_order_acquire) != pc) return 0;
    uint64_t v = atomic_load_explicit(&e->rule, memory_order_acquire);
    if (atomic_load_explicit(&e->pc, memory_order_acquire) != pc) return 0;
    r->kind = (enum rule_kind)(v & 0xf);
    r->rbp = (enum rbp_rule)(v >> 4 & 0xf);
    r->rbp_offset = (int32_t)((uint32_t)v & 0xffffff00u) >> 8;
    r->cfa_offset = (int32_t)(uint32_t)(v >> 32);
    return 1;
}

/* Whether the rbp offset fits the 24 bits the table keeps. */
static int packable(const struct rule *r) {
    return r->rbp_offset >= -(1 << 23) && r->rbp_offset < (1 << 23);
}

static void remember(uint64_t pc, const struct rule *r) {
    if (!table || !packable(r) || pc <= BUSY) return;
    struct entry *e = &table[slot(pc)];
    uint64_t old = atomic_load_explicit(&e->pc, memory_order_relaxed);
    if (old == BUSY || !atomic_compare_exchange_strong(&e->pc, &old, BUSY)) return;
    atomic_store_explicit(&e->rule, pack(r), memory_order_release);
    atomic_store_explicit(&e->pc, pc, memory_order_release);
}

/* ---- reading .eh_frame ---- */

struct cursor {
    const uint8_t *p, *end;
    int bad;
};

static uint64_t uleb(struct cursor *c) {
    uint64_t v = 0;
    for (int shift = 0; c->p < c->end && shift < 64; shift += 7) {
        uint8_t b = *c->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    c->bad = 1;
    return 0;
}

static int64_t sleb(struct cursor *c) {
    int64_t v = 0;
    int shift = 0;
    uint8_t b = 0x80;
    while (c->p < c->end && shift < 64 && (b & 0x80)) {
        b = *c->p++;
        v |= (int64_t)(b & 0x7f) << shift;
        shift += 7;
    }
    if (b & 0x80) c->bad = 1;
    else if (shift < 64 && (b & 0x40)) v |= -((int64_t)1 << shift);
    return v;
}

static uint64_t fixed(struct cursor *c, int bytes) {
    if (c->end - c->p < bytes) {
        c->bad = 1;
        return 0;
    }
    uint64_t v = 0;
    memcpy(&v, c->p, (size_t)bytes);
    c->p += bytes;
    return v;
}

/* Skips a pointer of encoding `enc` (DW_EH_PE_*): only its size matters. */
static void skip_encoded(struct cursor *c, uint8_t enc) {
    if (enc == 0xff) return; /* DW_EH_PE_omit */
    switch (enc & 0x0f) {
    case 0x00: case 0x04: case 0x0c: fixed(c, 8); break;
    case 0x02: case 0x0a: fixed(c, 2); break;
    case 0x03: case 0x0b: fixed(c, 4); break;
    case 0x01: uleb(c); break;
    case 0x09: sleb(c); break;
    default: c->bad = 1;
    }
}

/* What the CFA instructions say about the registers that matter. */
struct state {
    int cfa_reg;       /* DWARF register number (7 rsp, 6 rbp), or -1: *(rbp + cfa_offset) */
    int cfa_followed;  /* 0: a CFA expression this unwinder does not read */
    int64_t cfa_offset;
    enum rbp_rule rbp_rule;
    int64_t rbp_offset;
    int ra_rule;       /* 1 at CFA + ra_offset, 2 undefined (end), 3 other */
    int64_t ra_offset;
};

#define DW_OP_breg6 0x76
#define DW_OP_deref 0x06

/* Reads a DWARF expression that is exactly `DW_OP_breg6 k` (with_deref 0)
 * or `DW_OP_breg6 k; DW_OP_deref` (with_deref 1): the forms GCC uses for a
 * realigned frame. */
static int rbp_relative(const uint8_t *p, uint64_t len, int with_deref, int64_t *k) {
    struct cursor e = {p, p + len, 0};
    if (e.p == e.end || *e.p++ != DW_OP_breg6) return 0;
    *k = sleb(&e);
    if (with_deref && (e.p == e.end || *e.p++ != DW_OP_deref)) return 0;
    return !e.bad && e.p == e.end;
}

struct cie {
    uint64_t code_align;
    int64_t data_align;
    uint8_t fde_encoding;
    int augmented; /* 'z': FDEs have an augmentation length */
    struct cursor initial;
};

#define DW_RBP 6
#define DW_RSP 7
#define DW_RA 16

/* Runs CFA instructions from `c` while the location stays <= pc. Returns 0
 * for something this unwinder does not follow. */
static int run_cfa(struct cursor c, const struct cie *cie, uint64_t loc, uint64_t pc, struct state *s,
                   const struct state *initial) {
    struct state saved[8];
    int depth = 0;
    while (c.p < c.end && !c.bad) {
        uint8_t op = *c.p++;
        uint64_t delta = 0, reg = 0;
        int64_t off = 0;
        switch (op >> 6) {
        case 1: delta = op & 0x3f; goto advance;
        case 2:
            reg = op & 0x3f;
            off = (int64_t)uleb(&c) * cie->data_align;
            goto offset;
        case 3:
            reg = op & 0x3f;
            goto restore;
        }
        switch (op) {
        case 0x00: break;                                    /* nop */
        case 0x02: delta = fixed(&c, 1); goto advance;       /* advance_loc1 */
        case 0x03: delta = fixed(&c, 2); goto advance;       /* advance_loc2 */
        case 0x04: delta = fixed(&c, 4); goto advance;       /* advance_loc4 */
        case 0x05: reg = uleb(&c); off = (int64_t)uleb(&c) * cie->data_align; goto offset;
        case 0x11: reg = uleb(&c); off = sleb(&c) * cie->data_align; goto offset;
        case 0x2f: reg = uleb(&c); off = -(int64_t)uleb(&c) * cie->data_align; goto offset;
        case 0x06: reg = uleb(&c); goto restore;             /* restore_extended */
        case 0x07:                                           /* undefined */
            reg = uleb(&c);
            if (reg == DW_RA) s->ra_rule = 2;
            else if (reg == DW_RBP) s->rbp_rule = RBP_OTHER;
            break;
        case 0x08:                                           /* same_value */
            reg = uleb(&c);
            if (reg == DW_RBP) s->rbp_rule = RBP_SAME;
            else if (reg == DW_RA) s->ra_rule = 3;
            break;
        case 0x09:                                           /* register */
            reg = uleb(&c);
            uleb(&c);
            if (reg == DW_RBP) s->rbp_rule = RBP_OTHER;
            else if (reg == DW_RA) s->ra_rule = 3;
            break;
        case 0x0a:                                           /* remember_state */
            if (depth == 8) return 0;
            saved[depth++] = *s;
            break;
        case 0x0b:                                           /* restore_state */
            if (depth == 0) return 0;
            /* The CFA comes back with the rest, as libgcc does. */
            *s = saved[--depth];
            break;
        case 0x0c:                                               /* def_cfa */
            s->cfa_reg = (int)uleb(&c);
            s->cfa_offset = (int64_t)uleb(&c);
            s->cfa_followed = 1;
            break;
        case 0x12:                                               /* def_cfa_sf */
            s->cfa_reg = (int)uleb(&c);
            s->cfa_offset = sleb(&c) * cie->data_align;
            s->cfa_followed = 1;
            break;
        case 0x0d: s->cfa_reg = (int)uleb(&c); break;           /* def_cfa_register */
        case 0x0e: s->cfa_offset = (int64_t)uleb(&c); break;    /* def_cfa_offset */
        case 0x13: s->cfa_offset = sleb(&c) * cie->data_align; break; /* def_cfa_offset_sf */
        case 0x0f: {                                             /* def_cfa_expression */
            uint64_t len = uleb(&c);
            if ((uint64_t)(c.end - c.p) < len) return 0;
            s->cfa_reg = -1;
            s->cfa_followed = rbp_relative(c.p, len, 1, &s->cfa_offset);
            c.p += len;
            break;
        }
        case 0x10: case 0x16: {                                  /* expression, val_expression */
            reg = uleb(&c);
            uint64_t len = uleb(&c);
            if ((uint64_t)(c.end - c.p) < len) return 0;
            if (reg == DW_RBP)
                s->rbp_rule = op == 0x10 && rbp_relative(c.p, len, 0, &s->rbp_offset) ? RBP_AT_RBP : RBP_OTHER;
            else if (reg == DW_RA)
                s->ra_rule = 3;
            c.p += len;
            break;
        }
        case 0x14: case 0x15:                                    /* val_offset(_sf) */
            reg = uleb(&c);
            if (op == 0x14) uleb(&c); else sleb(&c);
            if (reg == DW_RBP) s->rbp_rule = RBP_OTHER;
            else if (reg == DW_RA) s->ra_rule = 3;
            break;
        case 0x2e: uleb(&c); break;                               /* GNU_args_size */
        default: return 0;                                        /* set_loc and anything newer */
        }
        continue;
    advance:
        loc += delta * cie->code_align;
        if (loc > pc) return !c.bad;
        continue;
    offset:
        if (reg == DW_RBP) {
            s->rbp_rule = RBP_AT_CFA;
            s->rbp_offset = off;
        } else if (reg == DW_RA) {
            s->ra_rule = 1;
            s->ra_offset = off;
        }
        continue;
    restore:
        if (!initial) return 0; /* restore inside the CIE's own instructions */
        if (reg == DW_RBP) {
            s->rbp_rule = initial->rbp_rule;
            s->rbp_offset = initial->rbp_offset;
        } else if (reg == DW_RA) {
            s->ra_rule = initial->ra_rule;
            s->ra_offset = initial->ra_offset;
        }
        continue;
    }
    return !c.bad;
}

/* Reads the CIE at `p`. Returns 0 for what this unwinder does not follow
 * (64-bit lengths, signal frames, unknown augmentations). */
static int read_cie(const uint8_t *p, struct cie *cie) {
    struct cursor c = {p, p + 8, 0};
    uint64_t length = fixed(&c, 4);
    if (length == 0 || length == 0xffffffffu) return 0;
    c.end = p + 4 + length;
    if (fixed(&c, 4) != 0) return 0; /* CIE id */
    uint8_t version = (uint8_t)fixed(&c, 1);
    if (version != 1 && version != 3) return 0;
    const char *aug = (const char *)c.p;
    size_t aug_len = strnlen(aug, (size_t)(c.end - c.p));
    c.p += aug_len + 1;
    cie->code_align = uleb(&c);
    cie->data_align = sleb(&c);
    uint64_t ra = version == 1 ? fixed(&c, 1) : uleb(&c);
    if (ra != DW_RA) return 0;
    cie->fde_encoding = 0;
    cie->augmented = 0;
    const uint8_t *after_aug = NULL;
    for (size_t i = 0; i < aug_len; i++) {
        switch (aug[i]) {
        case 'z': {
            cie->augmented = 1;
            uint64_t n = uleb(&c);
            after_aug = c.p + n;
            break;
        }
        case 'R': cie->fde_encoding = (uint8_t)fixed(&c, 1); break;
        case 'L': fixed(&c, 1); break;
        case 'P': {
            uint8_t enc = (uint8_t)fixed(&c, 1);
            skip_encoded(&c, enc);
            break;
        }
        default: return 0; /* 'S' (signal frame) and anything unknown */
        }
    }
    if (after_aug) c.p = after_aug;
    if (c.bad || c.p > c.end) return 0;
    cie->initial = c;
    return 1;
}

/* Works out the rule for a frame stopped at `pc`. */
static void find_rule(uint64_t pc, struct rule *r) {
    r->kind = UNSUPPORTED;
    r->rbp = RBP_SAME;
    r->cfa_offset = r->rbp_offset = 0;
    struct dwarf_eh_bases bases;
    const uint8_t *fde = _Unwind_Find_FDE((void *)pc, &bases);
    if (!fde) {
        /* No unwind information: the end as far as backtrace() goes too. */
        r->kind = END_OF_STACK;
        return;
    }
    uint32_t length, cie_pointer;
    memcpy(&length, fde, 4);
    memcpy(&cie_pointer, fde + 4, 4);
    if (length == 0 || length == 0xffffffffu) return;
    struct cie cie;
    if (!read_cie(fde + 4 - cie_pointer, &cie)) return;
    struct cursor c = {fde + 8, fde + 4 + length, 0};
    skip_encoded(&c, cie.fde_encoding);        /* pc_begin: bases.func has it */
    skip_encoded(&c, cie.fde_encoding & 0x0f); /* pc_range */
    if (cie.augmented) {
        uint64_t n = uleb(&c);
        c.p += n;
    }
    if (c.bad || c.p > c.end) return;
    struct state initial = {DW_RSP, 1, 8, RBP_SAME, 0, 3, 0};
    if (!run_cfa(cie.initial, &cie, 0, UINT64_MAX, &initial, NULL)) return;
    struct state s = initial;
    if (!run_cfa(c, &cie, (uint64_t)bases.func, pc, &s, &initial)) return;
    if (s.ra_rule == 2) {
        r->kind = END_OF_STACK;
        return;
    }
    if (s.ra_rule != 1 || s.ra_offset != -8 || s.rbp_rule == RBP_OTHER || !s.cfa_followed) return;
    if (s.cfa_offset < INT32_MIN || s.cfa_offset > INT32_MAX || s.rbp_offset < INT32_MIN ||
        s.rbp_offset > INT32_MAX)
        return;
    switch (s.cfa_reg) {
    case DW_RSP: r->kind = CFA_RSP; break;
    case DW_RBP: r->kind = CFA_RBP; break;
    case -1: r->kind = CFA_AT_RBP; break;
    default: return;
    }
    r->cfa_offset = (int32_t)s.cfa_offset;
    r->rbp = s.rbp_rule;
    r->rbp_offset = (int32_t)s.rbp_offset;
}

void unwind_init(void) {
    void *m = mmap(NULL, sizeof(struct entry) << TABLE_BITS, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m != MAP_FAILED) table = m;
}

/* Whether rbp points into the frame at sp (before following it: a rule
 * that reads through rbp must not make the program read a wild address). */
static int in_frame(uint64_t bp, uint64_t sp) {
    return bp >= sp && bp - sp <= (1ull << 28) && bp % 8 == 0;
}

int unwind_callers(uint64_t ip, uint64_t sp, uint64_t bp, uint64_t *out, int depth) {
    int n = 0;
    while (n < depth) {
        /* A return address: the call before it is where the frame is. */
        uint64_t pc = ip - 1;
        struct rule r;
        if (!lookup(pc, &r)) {
            find_rule(pc, &r);
            remember(pc, &r);
        }
        if (r.kind == END_OF_STACK) break;
        if (r.kind == UNSUPPORTED) return -1;
        uint64_t cfa;
        switch (r.kind) {
        case CFA_RSP: cfa = sp + (uint64_t)(int64_t)r.cfa_offset; break;
        case CFA_RBP: cfa = bp + (uint64_t)(int64_t)r.cfa_offset; break;
        default: /* CFA_AT_RBP */
            if (!in_frame(bp, sp)) return -1;
            cfa = *(const uint64_t *)(bp + (uint64_t)(int64_t)r.cfa_offset);
        }
        /* The caller's frame is above this one, and not absurdly far: a
         * wrong rule must not make the program read a wild address. */
        if (cfa <= sp || cfa - sp > (1ull << 28) || cfa % 8 != 0) return -1;
        uint64_t ra = *(const uint64_t *)(cfa - 8);
        if (r.rbp == RBP_AT_CFA) bp = *(const uint64_t *)(cfa + (uint64_t)(int64_t)r.rbp_offset);
        else if (r.rbp == RBP_AT_RBP) {
            if (!in_frame(bp, sp)) return -1;
            bp = *(const uint64_t *)(bp + (uint64_t)(int64_t)r.rbp_offset);
        }
        sp = cfa;
        if (ra == 0) break;
        ip = ra;
        out[n++] = ip - 1;
    }
    return n;
}
