// The bare kernel cost of watching one address in every thread of a running process: what any tool arming
// a process-wide watch pays at least, to set ksymwatch's `write -p` against (scripts/bench-process.py builds
// and runs this; hold /tmp/ksymwatch-live-tests.lock around it, it opens breakpoints).
//
//   bench-arm-bare [-v per-thread,per-cpu] [-m PAGES] [-t TID] PID ADDR [NEWADDR]
//
//   per-thread  for each thread in /proc/PID/task: open a write breakpoint (pid=tid, cpu=-1, len 8, disabled,
//               sample_period 1, IP|TID|TIME), mmap a ring of 1+PAGES pages (default 8) on it, enable;
//               each phase runs over all threads before the next
//   per-cpu     for each thread and each online CPU: open pid=tid cpu=c with inherit and inherit_thread
//               (where the headers have it) SET_OUTPUT into one ring per CPU (the first event of that CPU
//               owns it), enable
//   modify      after each of the two, PERF_EVENT_IOC_MODIFY_ATTRIBUTES on every event to NEWADDR (default
//               ADDR+8), `disabled` cleared in the attr passed (left set, it would disable every event)
//   -t TID      only that thread (e.g. to see a 5th breakpoint on a thread holding 4 refused: ENOSPC)
//
// Everything is closed after each variant (close_ms). One line per variant on stdout, key=value:
//   variant=per-thread threads=T cpus=C events=E rings=R pages=P fds=F gone=G open_ms= mmap_ms=
//     set_output_ms= enable_ms= total_ms= close_ms=
//   variant=modify-per-thread threads=T events=E modify_ms= total_ms=
// (likewise per-cpu and modify-per-cpu). fds: descriptors this process had open at the peak. RLIMIT_NOFILE
// is raised as needed; where the hard limit cannot be raised (no CAP_SYS_RESOURCE) and a variant runs out,
// its two lines say `error=EMFILE nofile=LIMIT needed=EVENTS` instead of times. Any other failed call prints
// what failed (with the tid) on stderr and exits 1; a thread that exited before its open counts as gone=.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bench-cpus.h"
#include "write-bp.h"

static int *tids, ntids, cpus[1024], ncpus, pages = 8;
static unsigned long addr, newaddr;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void fail(const char *what, int tid, int cpu) {
    fprintf(stderr, "bench-arm-bare: %s (tid %d, cpu %d): %s\n", what, tid, cpu, strerror(errno));
    exit(1);
}

static int count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = -1;  // the directory's own descriptor
    if (!d) return -1;
    while (readdir(d)) n++;
    closedir(d);
    return n - 2;  // . and ..
}

static void read_tasks(int pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    if (!d) { fprintf(stderr, "bench-arm-bare: %s: %s\n", path, strerror(errno)); exit(1); }
    struct dirent *e;
    int cap = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (ntids == cap) tids = realloc(tids, (cap = cap ? 2 * cap : 1024) * sizeof *tids);
        tids[ntids++] = atoi(e->d_name);
    }
    closedir(d);
}

static void read_cpus(void) { ncpus = read_online_cpus(cpus, 1024); }

static void attr_for(struct perf_event_attr *a, int inherit) {
    write_bp_attr(a, addr, HW_BREAKPOINT_LEN_8);
    a->sample_period = 1;
    a->sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME;
    a->disabled = 1;
    a->inherit = inherit;
#ifdef PERF_ATTR_SIZE_VER7  // headers of 5.13 or later, which brought inherit_thread
    a->inherit_thread = inherit;  // only into CLONE_THREAD children
#endif
}

struct ev { int fd, tid, cpu; };

// One variant: open, rings, enable, then modify, then close; prints its two lines.
static void run(const char *name, int per_cpu) {
    int per = per_cpu ? ncpus : 1, nev = 0, gone = 0, nrings = 0, fds;
    struct ev *ev = calloc((size_t)ntids * per, sizeof *ev);
    void **rings = calloc((size_t)ntids * per, sizeof *rings);
    int ring_fd[1024];
    size_t len = (size_t)(1 + pages) * sysconf(_SC_PAGESIZE);
    struct perf_event_attr a;
    attr_for(&a, per_cpu);

    double t0 = now_ms();
    for (int i = 0; i < ntids; i++) {
        for (int k = 0; k < per; k++) {
            int cpu = per_cpu ? cpus[k] : -1;
            int fd = syscall(SYS_perf_event_open, &a, tids[i], cpu, -1, PERF_FLAG_FD_CLOEXEC);
            if (fd < 0 && errno == ESRCH) { gone++; break; }
            if (fd < 0 && errno == EMFILE) {  // out of descriptors: say so in the variant's lines, go on
                struct rlimit rl;
                getrlimit(RLIMIT_NOFILE, &rl);
                printf("variant=%s threads=%d cpus=%d events=%d error=EMFILE nofile=%lu needed=%ld\n", name, ntids,
                       per, nev, (unsigned long)rl.rlim_cur, (long)ntids * per);
                printf("variant=modify-%s threads=%d events=%d error=EMFILE\n", name, ntids, nev);
                fflush(stdout);
                for (int j = 0; j < nev; j++) close(ev[j].fd);
                free(ev);
                free(rings);
                return;
            }
            if (fd < 0) fail("perf_event_open", tids[i], cpu);
            ev[nev++] = (struct ev){ fd, tids[i], cpu };
        }
    }
    double t1 = now_ms(), t_so = 0;
    if (per_cpu) {
        // The first event of each CPU owns that CPU's ring; the others write into it.
        for (int k = 0; k < ncpus; k++) ring_fd[k] = -1;
        for (int i = 0; i < nev; i++) {
            int k = 0;
            while (cpus[k] != ev[i].cpu) k++;
            if (ring_fd[k] < 0) {
                rings[nrings] = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, ev[i].fd, 0);
                if (rings[nrings] == MAP_FAILED) fail("mmap", ev[i].tid, ev[i].cpu);
                nrings++;
                ring_fd[k] = ev[i].fd;
            } else {
                double s = now_ms();
                if (ioctl(ev[i].fd, PERF_EVENT_IOC_SET_OUTPUT, ring_fd[k]) < 0) fail("SET_OUTPUT", ev[i].tid, ev[i].cpu);
                t_so += now_ms() - s;
            }
        }
    } else {
        for (int i = 0; i < nev; i++) {
            rings[nrings] = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, ev[i].fd, 0);
            if (rings[nrings] == MAP_FAILED) fail("mmap", ev[i].tid, ev[i].cpu);
            nrings++;
        }
    }
    double t2 = now_ms();
    for (int i = 0; i < nev; i++)
        if (ioctl(ev[i].fd, PERF_EVENT_IOC_ENABLE, 0) < 0) fail("ENABLE", ev[i].tid, ev[i].cpu);
    double t3 = now_ms();
    fds = count_fds();
    printf("variant=%s threads=%d cpus=%d events=%d rings=%d pages=%d fds=%d gone=%d open_ms=%.3f mmap_ms=%.3f "
           "set_output_ms=%.3f enable_ms=%.3f total_ms=%.3f",
           name, ntids - gone, per, nev, nrings, pages, fds, gone, t1 - t0, t2 - t1 - t_so, t_so, t3 - t2, t3 - t0);
    fflush(stdout);

    // Retarget: same attr as opened (the kernel refuses any other difference), new address, enabled.
    struct perf_event_attr m = a;
    m.bp_addr = newaddr;
    m.disabled = 0;
    double t4 = now_ms();
    for (int i = 0; i < nev; i++)
        if (ioctl(ev[i].fd, PERF_EVENT_IOC_MODIFY_ATTRIBUTES, &m) < 0) fail("MODIFY_ATTRIBUTES", ev[i].tid, ev[i].cpu);
    double t5 = now_ms();

    for (int i = 0; i < nrings; i++) munmap(rings[i], len);
    for (int i = 0; i < nev; i++) close(ev[i].fd);
    double t6 = now_ms();
    printf(" close_ms=%.3f\n", t6 - t5);
    printf("variant=modify-%s threads=%d events=%d modify_ms=%.3f total_ms=%.3f\n", name, ntids - gone, nev,
           t5 - t4, t5 - t4);
    fflush(stdout);
    free(ev);
    free(rings);
}

int main(int argc, char **argv) {
    const char *variants = "per-thread,per-cpu";
    int only = 0, opt;
    while ((opt = getopt(argc, argv, "v:m:t:")) != -1) {
        if (opt == 'v') variants = optarg;
        else if (opt == 'm') pages = atoi(optarg);
        else if (opt == 't') only = atoi(optarg);
        else goto usage;
    }
    if (argc - optind < 2 || pages < 0 || (pages & (pages - 1))) goto usage;
    int pid = atoi(argv[optind]);
    addr = strtoul(argv[optind + 1], NULL, 0);
    newaddr = argc - optind > 2 ? strtoul(argv[optind + 2], NULL, 0) : addr + 8;
    if (only) {
        tids = malloc(sizeof *tids);
        tids[ntids++] = only;
    } else {
        read_tasks(pid);
    }
    read_cpus();

    // One descriptor per event, plus a margin for stdio and /proc reads.
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rlim_t want = (rlim_t)ntids * ncpus + 64;
    if (rl.rlim_cur < want) {
        // Raising the hard limit needs CAP_SYS_RESOURCE; without it, take what the hard limit allows.
        struct rlimit up = { want, rl.rlim_max > want ? rl.rlim_max : want };
        if (setrlimit(RLIMIT_NOFILE, &up) < 0) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
    }
    if (strstr(variants, "per-thread")) run("per-thread", 0);
    if (strstr(variants, "per-cpu")) run("per-cpu", 1);
    return 0;
usage:
    fprintf(stderr, "usage: bench-arm-bare [-v per-thread,per-cpu] [-m PAGES (power of 2)] [-t TID] PID ADDR [NEWADDR]\n");
    return 2;
}
