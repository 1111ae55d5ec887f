// Every replaceable operator new and delete of C++17 — plain, array,
// nothrow, sized, aligned (std::align_val_t) and their mixes — called from
// one function, `allocate_all`: each round makes 13 blocks of known sizes
// and frees each with a matching delete. `record --allocations` must
// record all 13 as allocated by `allocate_all` itself, not by the C++
// library's operator new underneath.
//
// Usage: new_variants [ROUNDS] (default 10).
#include <cstdio>
#include <cstdlib>
#include <new>

struct alignas(64) Line {
    char bytes[64];
};

// Keeps the compiler from pairing a new with its delete and dropping both.
__attribute__((noinline)) void keep(void *p) { asm volatile("" : : "r"(p) : "memory"); }

__attribute__((noinline)) void allocate_all(int rounds) {
    const std::align_val_t al{64};
    for (int i = 0; i < rounds; i++) {
        void *a = operator new(100);
        keep(a);
        operator delete(a);
        void *b = operator new[](200);
        keep(b);
        operator delete[](b);
        void *c = operator new(300, std::nothrow);
        keep(c);
        operator delete(c, std::nothrow);
        void *d = operator new[](400, std::nothrow);
        keep(d);
        operator delete[](d, std::nothrow);
        void *e = operator new(500);
        keep(e);
        operator delete(e, 500);
        void *f = operator new[](600);
        keep(f);
        operator delete[](f, 600);
        void *g = operator new(700, al);
        keep(g);
        operator delete(g, al);
        void *h = operator new[](800, al);
        keep(h);
        operator delete[](h, al);
        void *j = operator new(900, al, std::nothrow);
        keep(j);
        operator delete(j, al, std::nothrow);
        void *k = operator new[](1000, al, std::nothrow);
        keep(k);
        operator delete[](k, al, std::nothrow);
        void *l = operator new(1100, al);
        keep(l);
        operator delete(l, 1100, al);
        void *m = operator new[](1200, al);
        keep(m);
        operator delete[](m, 1200, al);
        Line *n = new Line;  // the compiler's aligned new and delete
        keep(n);
        delete n;
    }
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 10;
    allocate_all(rounds);
    std::printf("%d rounds\n", rounds);
    return 0;
}
