// Spurious SIGTRAPs from write breakpoints, counted without ksymwatch: THREADS threads each store STORES
// times into one word watched by a counting write breakpoint that follows this process's threads (opened on
// this thread, pid 0 and every CPU, inherited before the threads start), with a SIGTRAP handler that counts
// each signal by its si_code and lets the thread go on. Nothing here asks for a signal (no `sigtrap` in the
// attributes, no ptrace), and every debug exception belongs to a live, enabled breakpoint whose debug
// register never changes while the threads store: a correct kernel on a correct CPU sends none. A SIGTRAP
// counted here is the machine's (the kernel's #DB handler found no cause it knows in DR6: TRAP_BRKPT is an
// empty DR6, taken for an ICEBP; TRAP_HWBKPT a breakpoint bit it could not match with another bit set;
// TRAP_TRACE a single-step bit). Without the handler the thread's process would be killed.
//
// With RING 1 each breakpoint instead samples every hit (ip, tid, time, user call chain) into a ring per CPU
// that a reader thread keeps empty, waking it at every sample: each debug exception's handler then also
// writes a record and raises an irq_work (a self-IPI), as a watch's perf samples do.
//
//   gcc -O1 -pthread scripts/trap-storm.c -o /tmp/trap-storm
//   /tmp/trap-storm STORES [THREADS [PAUSE_EVERY [RING]]]   (default 2000000 stores, 2 threads; with
//                                                            PAUSE_EVERY each thread sleeps 50 us every that
//                                                            many stores)
//
// Holds the live tests' lock (/tmp/ksymwatch-live-tests.lock) while it runs.
//
// Measured here (2 vCPUs, Firecracker, Linux 6.18, Intel, beside other builds), 2 threads: RING 1, 3 in 11
// million stores (TRAP_BRKPT each, at the instruction after the store, and `counted` short by exactly as
// many); RING 0, none in 14 million.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <poll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "write-bp.h"

static volatile unsigned long word __attribute__((aligned(64)));
static long stores, pause_every;
static volatile long by_code[8], other_code, last_ip;

static void on_trap(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)uc;
    if (si->si_code >= 0 && si->si_code < 8)
        __atomic_add_fetch(&by_code[si->si_code], 1, __ATOMIC_RELAXED);
    else
        __atomic_add_fetch(&other_code, 1, __ATOMIC_RELAXED);
    last_ip = (long)si->si_addr;
}

static volatile int done;
static struct perf_event_mmap_page *rings[256];
static int ring_fds[256], nrings;

// Keeps every ring empty, so each sample finds room and wakes it.
static void *reader(void *arg) {
    (void)arg;
    struct pollfd p[256];
    for (int i = 0; i < nrings; i++) p[i] = (struct pollfd){.fd = ring_fds[i], .events = POLLIN};
    while (!done) {
        poll(p, nrings, 10);
        for (int i = 0; i < nrings; i++) {
            unsigned long long head = __atomic_load_n(&rings[i]->data_head, __ATOMIC_ACQUIRE);
            __atomic_store_n(&rings[i]->data_tail, head, __ATOMIC_RELEASE);
        }
    }
    return NULL;
}

static void *storer(void *arg) {
    (void)arg;
    for (long i = 0; i < stores; i++) {
        word = (unsigned long)i;
        if (pause_every && i % pause_every == 0) usleep(50);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: trap-storm STORES [THREADS [PAUSE_EVERY]]\n");
        return 2;
    }
    stores = atol(argv[1]);
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    pause_every = argc > 3 ? atol(argv[3]) : 0;
    int ring = argc > 4 ? atoi(argv[4]) : 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGTRAP, &sa, NULL);
    int lock = open("/tmp/ksymwatch-live-tests.lock", O_RDWR | O_CREAT, 0666);
    if (lock < 0 || flock(lock, LOCK_EX) != 0) return 2;
    int cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int fds[256];
    for (int cpu = 0; cpu < cpus && cpu < 256; cpu++) {
        fds[cpu] = open_write_bp(&word, 0, cpu, 0, ring);
        if (fds[cpu] < 0) {
            perror("perf_event_open");
            return 2;
        }
    }
    pthread_t rd;
    if (ring) {
        size_t len = (1 + 16) * (size_t)sysconf(_SC_PAGESIZE);
        for (int cpu = 0; cpu < cpus && cpu < 256; cpu++) {
            void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fds[cpu], 0);
            if (m == MAP_FAILED) {
                perror("mmap");
                return 2;
            }
            rings[nrings] = m;
            ring_fds[nrings++] = fds[cpu];
        }
        pthread_create(&rd, NULL, reader, NULL);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_t *t = calloc(threads, sizeof *t);
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, storer, NULL);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    done = 1;
    if (ring) pthread_join(rd, NULL);
    long counted = 0;
    for (int cpu = 0; cpu < cpus && cpu < 256; cpu++) {
        long v = 0;
        if (read(fds[cpu], &v, sizeof v) == sizeof v) counted += v;
        close(fds[cpu]);
    }
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("stores=%ld counted=%ld secs=%.1f sigtrap: brkpt=%ld trace=%ld hwbkpt=%ld other=%ld last_ip=%#lx\n",
           stores * threads, counted, secs, by_code[TRAP_BRKPT], by_code[TRAP_TRACE], by_code[4], other_code,
           last_ip);
    return 0;
}
