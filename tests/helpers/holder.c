// Test helper: occupies debug registers by holding K pinned write breakpoints (on its own variables), so
// tests can prove that ksymwatch never half-arms and that `check` sees the registers taken. Prints
// "held K" (how many the kernel granted; it stops at the first refusal) and waits for EOF on stdin.
//
//   holder CPU K     K CPU-bound events on CPU (pid -1): they take K registers of that CPU only
//   holder task K    K events bound to this task (pid 0, cpu -1), as a debugger's watchpoints are: the
//                    kernel reserves a task-bound breakpoint's register on every CPU, so K=4 leaves no
//                    CPU-bound breakpoint anywhere
#define _GNU_SOURCE
#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "helpers.h"

static volatile unsigned long vars[8] __attribute__((aligned(64)));

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: holder CPU K\n");
        return 2;
    }
    int task = strcmp(argv[1], "task") == 0;
    int cpu = task ? -1 : atoi(argv[1]), k = atoi(argv[2]), held = 0;
    for (int i = 0; i < k; i++) {
        int fd = hold_breakpoint(&vars[i], task ? 0 : -1, cpu);
        if (fd < 0) {
            perror("perf_event_open");
            break;
        }
        held++;
    }
    printf("held %d\n", held);
    fflush(stdout);
    char buf[16];
    while (fgets(buf, sizeof buf, stdin)) {
    }
    return 0;
}
