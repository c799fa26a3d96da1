// Test helper for ksymwatch's live tests: a process whose writes (or the kernel's writes on its behalf) land
// on an address the test watches. It prints its address and ids, waits for the test to say "go" on stdin
// (after ksymwatch printed `# armed`), does the work pinned to one CPU, says "done", and exits on EOF.
//
//   writer write N CPU   store N times into a global
//   writer read  N CPU   read() 8 bytes from /dev/zero into the global N times (kernel writes user memory)
//   writer load  N CPU   load the global N times and store nothing (reads only: `rw` sees them, `write` not)
//   writer spin  CPU     after "go", store every ~200 us until a "stop" line, print "stores=N" and "done";
//                        then each "burst N CPU" line stores N times pinned to CPU and prints "done"
//
// The helper pins itself only after "go", so a test may name a CPU that is offline when the helper starts.
//   writer write2 N CPU  store N times into each of two globals, alternating (several-target tests)
//   writer now N CPU     store N times right away, no "go" and no "done": a short-lived writer for loops
//   writer same N CPU    store 1 once, then 7 N times (`--if changed`: two changes)
//   writer fill N CPU    N times: store ~0 into the global, then read() 8 bytes of /dev/zero over it
//   writer sites N CPU   store 0..N-1, each from one of two store sites (ksw_site_a/ksw_site_b) chosen by a
//                        hash of the value, so a value shown on the wrong hit shows at the wrong site
//   writer set CPU       no "go": each "set V" line (decimal or 0x hex, up to 64 bits) stores V into the global
//                        once, pinned to CPU, and prints "done"; exits on EOF (known values, one store a step)
//   writer sysinfo N CPU N times: sysinfo() into the global `ksw_sysinfo` (the kernel's copy_to_user fills a
//                        struct sysinfo, its layout the kernel's BTF knows), then store 0 into its `procs`
//   writer naps CPU      no "go": sleep 2 ms at a time (a voluntary context switch each: the kernel writes
//                        this task's task_struct.nvcsw) until a line arrives, then print "naps=N" and "done"
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <poll.h>
#include <sys/sysinfo.h>

#include "helpers.h"

volatile unsigned long target_var __attribute__((aligned(64)));
volatile unsigned long target_var2 __attribute__((aligned(64)));
struct sysinfo ksw_sysinfo __attribute__((aligned(64)));

// Two store sites the compiler must keep apart, each its own function.
__attribute__((noinline)) void ksw_site_a(unsigned long v) { target_var = v; __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void ksw_site_b(unsigned long v) { target_var = v; __asm__ volatile("nop" ::: "memory"); }

// Which site stores `v`: a mixing hash's low bit, so neighbouring values land at unrelated sites.
static int site_of(unsigned long v) {
    v ^= v >> 33;
    v *= 0xff51afd7ed558ccdUL;
    v ^= v >> 33;
    return (int)(v & 1);
}

int main(int argc, char **argv) {
    const char *mode = mode_of(argc, argv, "writer write|read|write2|now N CPU | spin|set CPU");
    if (!mode) return 2;
    int spin = strcmp(mode, "spin") == 0;
    int now = strcmp(mode, "now") == 0;
    int set = strcmp(mode, "set") == 0;
    int naps = strcmp(mode, "naps") == 0;
    long n = spin || set || naps ? 0 : atol(argv[2]);
    int cpu = atoi(spin || set || naps ? argv[2] : argv[3]);
    printf("addr=%p pid=%d tid=%ld addr2=%p\n", (void *)&target_var, getpid(), (long)syscall(SYS_gettid),
           (void *)&target_var2);
    fflush(stdout);
    if (now) {
        pin(cpu);
        for (long i = 0; i < n; i++) target_var = i;
        return 0;
    }
    if (naps) {
        struct pollfd p = { .fd = 0, .events = POLLIN };
        unsigned long i = 0;
        pin(cpu);
        while (poll(&p, 1, 2) == 0) i++;
        printf("naps=%lu\ndone\n", i);
        fflush(stdout);
        wait_line();
        return 0;
    }
    if (set) {
        char line[64];
        pin(cpu);
        while (fgets(line, sizeof line, stdin)) {
            if (strncmp(line, "set ", 4) != 0) continue;
            target_var = strtoul(line + 4, NULL, 0);
            printf("done\n");
            fflush(stdout);
        }
        return 0;
    }
    wait_line();
    pin(cpu);
    if (strcmp(mode, "write") == 0) {
        for (long i = 0; i < n; i++) target_var = i;
    } else if (strcmp(mode, "same") == 0) {
        target_var = 1;
        for (long i = 0; i < n; i++) target_var = 7;
    } else if (strcmp(mode, "fill") == 0) {
        int fd = open("/dev/zero", O_RDONLY);
        if (fd < 0) { perror("open"); return 2; }
        for (long i = 0; i < n; i++) {
            target_var = ~0UL;
            if (read(fd, (void *)&target_var, sizeof target_var) != sizeof target_var) { perror("read"); return 2; }
        }
        close(fd);
    } else if (strcmp(mode, "load") == 0) {
        unsigned long sum = 0;
        for (long i = 0; i < n; i++) sum += target_var;
        __asm__ volatile("" :: "r"(sum));
    } else if (strcmp(mode, "sites") == 0) {
        for (long i = 0; i < n; i++) {
            if (site_of((unsigned long)i)) ksw_site_b((unsigned long)i); else ksw_site_a((unsigned long)i);
        }
    } else if (strcmp(mode, "sysinfo") == 0) {
        for (long i = 0; i < n; i++) {
            if (sysinfo(&ksw_sysinfo) != 0) { perror("sysinfo"); return 2; }
            *(volatile unsigned short *)&ksw_sysinfo.procs = 0;
        }
    } else if (strcmp(mode, "write2") == 0) {
        for (long i = 0; i < n; i++) {
            target_var = i;
            target_var2 = i;
        }
    } else if (strcmp(mode, "read") == 0) {
        int fd = open("/dev/zero", O_RDONLY);
        if (fd < 0) { perror("open"); return 2; }
        for (long i = 0; i < n; i++) {
            if (read(fd, (void *)&target_var, sizeof target_var) != sizeof target_var) { perror("read"); return 2; }
        }
        close(fd);
    } else if (spin) {
        struct pollfd p = { .fd = 0, .events = POLLIN };
        unsigned long i = 0;
        char line[64];
        for (;;) {
            target_var = ++i;
            if (poll(&p, 1, 0) > 0) break;
            usleep(200);
        }
        if (!fgets(line, sizeof line, stdin)) return 0;
        printf("stores=%lu\ndone\n", i);
        fflush(stdout);
        long bn;
        int bcpu;
        while (fgets(line, sizeof line, stdin)) {
            if (sscanf(line, "burst %ld %d", &bn, &bcpu) != 2) continue;
            pin(bcpu);
            for (long k = 0; k < bn; k++) target_var = k;
            printf("done\n");
            fflush(stdout);
        }
        return 0;
    } else {
        return unknown_mode(mode);
    }
    return done_then_wait();
}
