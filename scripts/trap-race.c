// A watched process killed by SIGTRAP, measured without ksymwatch: does a process whose threads are
// watched by write breakpoints bound to them (perf_event_open per thread and CPU, inherited into the
// threads they create, as `ksymwatch write -p PID --per-thread` opens them) ever die of SIGTRAP?
//
// Each round forks a target: its main thread creates THREADS threads, one every GAP_US microseconds, each
// blocked until "go", then storing into the watched word once and exiting. Once the target has started,
// this process opens a disabled write breakpoint on the target's main thread for every CPU (inherit +
// inherit_thread: the threads it creates get copies), and with MODE `all` also on every thread the target
// has at that moment (read from /proc/PID/task, as the tool does), enables them, says "go", and waits for
// the target: a round whose target ends by a signal is printed (a SIGTRAP with its si_code first). With RING 0 the breakpoints only count (no
// sample, no ring: the debug exception alone); with RING 1 each samples every hit (ip, tid, time, user call
// chain) into one ring per CPU that nobody reads, waking its reader at every sample (an irq_work, a self-IPI,
// inside the debug exception's handler) until it is full.
//
//   gcc -O1 -pthread scripts/trap-race.c -o /tmp/trap-race
//   /tmp/trap-race ROUNDS [THREADS [GAP_US [MODE [RING]]]]   (MODE: main | all; default 4000 200 all 0)
//
// Each round holds the live tests' lock (/tmp/ksymwatch-live-tests.lock) while it runs.
//
// Measured here (2 vCPUs, Firecracker, Linux 6.18, Intel, beside other builds), 4,000 threads every 200 us,
// MODE all: RING 0, no death in 190 rounds; RING 1, a SIGTRAP death in round 150 of 150.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "write-bp.h"

static volatile unsigned long target __attribute__((aligned(64)));
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int go;

static void *waiter(void *arg) {
    (void)arg;
    pthread_mutex_lock(&mu);
    while (!go) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    target = (unsigned long)syscall(SYS_gettid);
    return NULL;
}

static void *go_reader(void *arg) {
    int fd = *(int *)arg;
    char c;
    if (read(fd, &c, 1) != 1) _exit(0);
    pthread_mutex_lock(&mu);
    go = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return NULL;
}

// A SIGTRAP in the target: says which (si_code: TRAP_BRKPT 1 is a #DB whose DR6 showed no cause, TRAP_HWBKPT 4
// an unclaimed breakpoint bit beside another DR6 bit, TRAP_TRACE 2 a single step) and where, then dies of it.
static void on_trap(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    char line[128];
    int n = snprintf(line, sizeof line, "SIGTRAP in the target: si_code=%d addr=%p tid=%ld\n", si->si_code,
                     si->si_addr, (long)syscall(SYS_gettid));
    if (write(2, line, n) < 0) _exit(3);
    signal(sig, SIG_DFL);
    raise(sig);
}

// The target: says it started (a byte on `ready`), creates the threads, waits for them.
static void run_target(int ready, int go_fd, long threads, long gap_us) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGTRAP, &sa, NULL);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_t r, *t = calloc(threads, sizeof *t);
    if (!t || pthread_create(&r, NULL, go_reader, &go_fd) != 0) _exit(2);
    if (write(ready, "r", 1) != 1) _exit(2);
    long made = 0;
    for (long i = 0; i < threads; i++) {
        if (pthread_create(&t[i], &attr, waiter, NULL) == 0) made++;
        if (gap_us) usleep(gap_us);
    }
    for (long i = 0; i < made; i++) pthread_join(t[i], NULL);
    _exit(0);
}

static int ring;  // sample every hit into a ring per CPU

static int open_bp(pid_t tid, int cpu) {
    // The same address in the forked target.
    return open_write_bp(&target, tid, cpu, 1, ring);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: trap-race ROUNDS [THREADS [GAP_US [main|all]]]\n");
        return 2;
    }
    int rounds = atoi(argv[1]);
    long threads = argc > 2 ? atol(argv[2]) : 4000, gap_us = argc > 3 ? atol(argv[3]) : 200;
    int all = argc > 4 ? strcmp(argv[4], "main") != 0 : 1;
    ring = argc > 5 ? atoi(argv[5]) : 0;
    int cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int *fds = malloc(sizeof(int) * 65536);
    int deaths = 0;
    for (int round = 0; round < rounds; round++) {
        int lock = open("/tmp/ksymwatch-live-tests.lock", O_RDWR | O_CREAT, 0666);
        if (lock < 0 || flock(lock, LOCK_EX) != 0) return 2;
        int ready[2], gop[2];
        if (pipe(ready) || pipe(gop)) return 2;
        pid_t child = fork();
        if (child == 0) {
            close(ready[0]);
            close(gop[1]);
            run_target(ready[1], gop[0], threads, gap_us);
        }
        close(ready[1]);
        close(gop[0]);
        char c;
        if (read(ready[0], &c, 1) != 1) return 2;
        int n = 0;
        for (int cpu = 0; cpu < cpus; cpu++) fds[n++] = open_bp(child, cpu);
        if (all) {
            char path[64];
            snprintf(path, sizeof path, "/proc/%d/task", child);
            DIR *d = opendir(path);
            struct dirent *e;
            while (d && (e = readdir(d)) && n < 65000 - cpus) {
                pid_t tid = atoi(e->d_name);
                if (tid <= 0 || tid == child) continue;
                for (int cpu = 0; cpu < cpus; cpu++) fds[n++] = open_bp(tid, cpu);
            }
            if (d) closedir(d);
        }
        // One ring per CPU: the first event opened on each CPU maps it, the others write into it.
        void *maps[256] = {0};
        size_t map_len = (1 + 16) * (size_t)sysconf(_SC_PAGESIZE);
        for (int i = 0; ring && i < n; i++) {
            int cpu = i % cpus;
            if (fds[i] < 0) continue;
            if (!maps[cpu]) {
                maps[cpu] = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fds[i], 0);
                if (maps[cpu] == MAP_FAILED) maps[cpu] = NULL;
                else fds[65535 - cpu] = fds[i];
            } else {
                ioctl(fds[i], PERF_EVENT_IOC_SET_OUTPUT, fds[65535 - cpu]);
            }
        }
        int opened = 0;
        for (int i = 0; i < n; i++) {
            if (fds[i] >= 0) {
                ioctl(fds[i], PERF_EVENT_IOC_ENABLE, 0);
                opened++;
            }
        }
        if (write(gop[1], "g", 1) != 1) return 2;
        int status;
        waitpid(child, &status, 0);
        for (int i = 0; i < n; i++)
            if (fds[i] >= 0) close(fds[i]);
        unsigned long long written = 0;
        for (int cpu = 0; cpu < cpus && cpu < 256; cpu++) {
            if (!maps[cpu]) continue;
            written += ((struct perf_event_mmap_page *)maps[cpu])->data_head;
            munmap(maps[cpu], map_len);
        }
        if (round == rounds - 1 && ring) printf("last round: %llu bytes written into the rings\n", written);
        close(ready[0]);
        close(gop[1]);
        flock(lock, LOCK_UN);
        close(lock);
        if (WIFSIGNALED(status)) {
            deaths++;
            printf("round %d: target killed by signal %d (%d events)\n", round, WTERMSIG(status), opened);
            fflush(stdout);
        }
    }
    printf("rounds=%d deaths=%d threads=%ld gap_us=%ld mode=%s ring=%d\n", rounds, deaths, threads, gap_us,
           all ? "all" : "main", ring);
    return 0;
}
