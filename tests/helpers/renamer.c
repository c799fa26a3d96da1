// Test helper for thread names: a thread that renames itself (prctl(PR_SET_NAME)) between its stores into
// a watched global, for the outputs that name writers (text escaping, Perfetto's thread tracks).
// Banner first: `addr=0x... pid=N tid=N`; on "go" (a line on stdin) it runs, for each NAME argument in
// turn: set the thread's name to NAME (the kernel keeps 15 bytes), store N times into target_var; then
// prints "done" and exits on EOF.
//
//   renamer N NAME...
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

volatile unsigned long target_var __attribute__((aligned(64)));

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: renamer N NAME...\n");
        return 2;
    }
    long n = atol(argv[1]);
    printf("addr=%p pid=%d tid=%ld\n", (void *)&target_var, getpid(), (long)syscall(SYS_gettid));
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin)) return 0;
    unsigned long v = 0;
    for (int a = 2; a < argc; a++) {
        if (prctl(PR_SET_NAME, argv[a], 0, 0, 0) != 0) {
            perror("prctl");
            return 2;
        }
        for (long i = 0; i < n; i++) target_var = ++v;
    }
    printf("done\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
    }
    return 0;
}
