// C++ exceptions through the traced function: `work` catches the ones
// `thrower` raises for multiples of three, and on its second call lets one
// escape to main. Trace `work`: the output must equal the native run's, and
// the escaping exception ends the invocation.
#include <cstdio>
#include <stdexcept>

static int data[64];

__attribute__((noinline)) int thrower(int x) {
    if (x % 3 == 0) throw std::runtime_error("three");
    return data[x % 64];
}

__attribute__((noinline)) int work(int n) {
    int s = 0;
    for (int i = 1; i <= n; i++) {
        try {
            s += thrower(i);
        } catch (const std::runtime_error &) {
            s += 100;
        }
    }
    if (n > 5) throw std::out_of_range("escapes work");
    return s;
}

int main() {
    for (int i = 0; i < 64; i++) data[i] = i;
    try {
        std::printf("work(4)=%d\n", work(4));
        std::printf("work(7)=%d\n", work(7));
    } catch (const std::exception &e) {
        std::printf("caught: %s\n", e.what());
    }
    return 0;
}
