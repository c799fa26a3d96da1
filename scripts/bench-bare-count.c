// The bare kernel cost of a write watch to the writer: one pinned write breakpoint per online CPU (pid=-1,
// system-wide, like ksymwatch's and bpftrace's), counting only. Breakpoints refuse sample_period 0, so the
// period is 1<<62: every store traps and bumps the count, none ever samples (no ring, no BPF program, no
// wake-up). scripts/bench-writer.py builds and runs this as its `bare` mode; hold
// /tmp/ksymwatch-live-tests.lock around it, it opens breakpoints.
//
//   bench-bare-count ADDR [LEN]
//
// Prints "# armed" on stdout once every CPU's event is enabled, waits for SIGINT or SIGTERM, then prints "count=N" (the sum over CPUs) and exits 0. A failed call prints what failed on stderr
// and exits 1.
#define _GNU_SOURCE
#include <errno.h>
#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bench-cpus.h"
#include "write-bp.h"

static int cpus[1024], ncpus;

static void read_cpus(void) { ncpus = read_online_cpus(cpus, 1024); }

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench-bare-count ADDR [LEN]\n");
        return 2;
    }
    unsigned long addr = strtoul(argv[1], NULL, 0);
    int len = argc > 2 ? atoi(argv[2]) : 8;
    read_cpus();

    // Block the stop signals first, so one that arrives while arming is not lost.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, NULL);
    int sfd = signalfd(-1, &set, SFD_CLOEXEC);
    if (sfd < 0) { perror("bench-bare-count: signalfd"); return 1; }

    int fds[1024];
    for (int i = 0; i < ncpus; i++) {
        struct perf_event_attr a;
        write_bp_attr(&a, addr, len);
        a.sample_period = 1ULL << 62;  // counts only: 0 is refused for breakpoints
        a.pinned = 1;
        a.disabled = 1;
        fds[i] = (int)syscall(SYS_perf_event_open, &a, -1, cpus[i], -1, PERF_FLAG_FD_CLOEXEC);
        if (fds[i] < 0) {
            fprintf(stderr, "bench-bare-count: perf_event_open(cpu %d, 0x%lx/%d): %s\n", cpus[i], addr, len,
                    strerror(errno));
            return 1;
        }
    }
    for (int i = 0; i < ncpus; i++) {
        if (ioctl(fds[i], PERF_EVENT_IOC_ENABLE, 0) != 0) {
            fprintf(stderr, "bench-bare-count: enable (cpu %d): %s\n", cpus[i], strerror(errno));
            return 1;
        }
    }
    printf("# armed %d cpus\n", ncpus);
    fflush(stdout);

    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof si) != sizeof si) {
        if (errno != EINTR) { perror("bench-bare-count: read signalfd"); return 1; }
    }
    uint64_t total = 0;
    for (int i = 0; i < ncpus; i++) {
        uint64_t v = 0;
        if (read(fds[i], &v, sizeof v) != sizeof v) {
            fprintf(stderr, "bench-bare-count: read (cpu %d): %s\n", cpus[i], strerror(errno));
            return 1;
        }
        total += v;
        close(fds[i]);
    }
    printf("count=%llu\n", (unsigned long long)total);
    fflush(stdout);
    return 0;
}
