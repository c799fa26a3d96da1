// Test helper: C++ objects from `new`. Writes "ready PID\n"; per "go N" line, N gadgets, each made with
// new, its `hits` stored STORES times after a pause, deleted; a std::string of another size between.
// Answers "done N\n". Raw read/write: iostreams would allocate.
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

struct Gadget {
    long serial;
    long hits; // the watched field, at offset 8
    double weight;
    char tag[32];
}; // 56 bytes

static void say(const char *s, long n) {
    std::string out = std::string(s) + std::to_string(n) + "\n";
    if (write(1, out.data(), out.size()) != (ssize_t)out.size())
        std::exit(1);
}

int main() {
    say("ready ", getpid());
    char line[64];
    size_t len = 0;
    char c;
    while (read(0, &c, 1) == 1) {
        if (c != '\n') {
            if (len + 1 < sizeof line)
                line[len++] = c;
            continue;
        }
        line[len] = 0;
        len = 0;
        if (std::strncmp(line, "go ", 3) != 0)
            continue;
        long n = std::atol(line + 3);
        for (long i = 0; i < n; i++) {
            std::string other(100, 'x');
            Gadget *g = new Gadget();
            g->serial = i;
            usleep(20000);
            for (int k = 1; k <= 3; k++)
                static_cast<volatile Gadget *>(g)->hits = k;
            delete g;
            (void)other;
        }
        say("done ", n);
    }
    return 0;
}
