// Test helper for tests/suite/live_hunt.rs (bugs found by using the tool as a user would): a writer that
// keeps a watched global busy. Banner first: `addr=0x... pid=N tid=N`.
//
//   hunt tight CPU   pinned to CPU, store into target_var in a loop with no pause (a trap every ~15 us
//                    under a breakpoint) until a line or EOF arrives on stdin, then print "stores=N" and
//                    "done" and exit on EOF
#include "helpers.h"

#include <poll.h>

volatile unsigned long target_var __attribute__((aligned(64)));

int main(int argc, char **argv) {
    const char *mode = mode_of(argc, argv, "hunt tight CPU");
    if (!mode) return 2;
    printf("addr=%p pid=%d tid=%ld\n", (void *)&target_var, getpid(), (long)syscall(SYS_gettid));
    fflush(stdout);
    if (strcmp(mode, "tight") == 0) {
        pin(atoi(argv[2]));
        struct pollfd p = { .fd = 0, .events = POLLIN };
        unsigned long n = 0;
        for (;;) {
            for (int i = 0; i < 256; i++) target_var = n++;
            if (poll(&p, 1, 0) != 0) break;
        }
        printf("stores=%lu\n", n);
        return done_then_wait();
    }
    return unknown_mode(mode);
}
