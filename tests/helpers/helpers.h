// What several test helpers do alike: pin themselves to a CPU, wait for the test's next stdin line, and
// hold a debug register with a pinned write breakpoint of their own (filled as the scripts' are, by
// scripts/write-bp.h). Included by the helpers' .c files (each is built alone by the suite, by
// `#include "helpers.h"` next to it); every function is static and may go unused in one helper.
#ifndef KSW_HELPERS_H
#define KSW_HELPERS_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../scripts/write-bp.h"

// Pins the calling thread to `cpu`; exits 2 when the kernel refuses (an offline CPU).
static __attribute__((unused)) void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        perror("sched_setaffinity");
        exit(2);
    }
}

// Waits for the next line on stdin (its text is not looked at); exits 0 on EOF.
static __attribute__((unused)) void wait_line(void) {
    char buf[64];
    if (!fgets(buf, sizeof buf, stdin)) exit(0);
}

// The mode word (argv[1]) of a helper called with a mode and at least one argument after it; NULL, with
// `usage` on stderr, otherwise (the helper then exits 2).
static __attribute__((unused)) const char *mode_of(int argc, char **argv, const char *usage) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s\n", usage);
        return NULL;
    }
    return argv[1];
}

// The end of a helper's work: says "done", then waits for the test's next line (exits 0 on EOF).
static __attribute__((unused)) int done_then_wait(void) {
    printf("done\n");
    fflush(stdout);
    wait_line();
    return 0;
}

// A mode the helper does not know: says so; the exit code for bad usage.
static __attribute__((unused)) int unknown_mode(const char *mode) {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}

// Opens a pinned, disabled 8-byte write breakpoint on `addr` for (pid, cpu) as perf_event_open(2) takes
// them: a disabled event still holds its debug register until closed. Returns the descriptor, or -1 with
// errno set.
static __attribute__((unused)) int hold_breakpoint(volatile void *addr, pid_t pid, int cpu) {
    struct perf_event_attr a;
    write_bp_attr(&a, (unsigned long)addr, HW_BREAKPOINT_LEN_8);
    a.sample_period = 1;
    a.pinned = 1;
    a.disabled = 1;
    return (int)syscall(SYS_perf_event_open, &a, pid, cpu, -1, 0);
}

#endif
