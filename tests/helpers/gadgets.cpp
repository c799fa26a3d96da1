// Test helper: C++ objects from `new`. `gadgets go N` makes N gadgets and exits, writing nothing (for
// `-- CMD`); else it writes "ready PID\n", and per "go N" line makes N and answers "done N\n". Each gadget
// is made with new, its `hits` stored 3 times after a pause, and deleted; a std::string of another size
// is made beside it. Raw read/write: iostreams would allocate.
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

static void go(long n) {
    for (long i = 0; i < n; i++) {
        std::string other(100, 'x');
        Gadget *g = new Gadget; // default-initialized: no store into hits before ours
        g->serial = i;
        usleep(20000);
        for (int k = 1; k <= 3; k++)
            static_cast<volatile Gadget *>(g)->hits = k;
        delete g;
        (void)other;
    }
}

int main(int argc, char **argv) {
    if (argc >= 3 && std::strcmp(argv[1], "go") == 0) {
        go(std::atol(argv[2]));
        return 0;
    }
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
        go(n);
        say("done ", n);
    }
    return 0;
}
