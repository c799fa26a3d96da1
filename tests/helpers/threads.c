// Test and benchmark helper for process-wide watches (`ksymwatch write -p PID`, launch mode, `--control`):
// a process with many threads whose user-space stores land on the globals a test watches. Every store goes
// through the noinline `ksw_thread_store()`, so a test counts user stores by the hit's ip symbol (the
// kernel's own writes, e.g. exec zeroing .bss, have kernel ips). Built with -pthread; works PIE or not.
// Banner first: `addr=0x... addr2=0x... pid=N tid=N` (tid: the main thread), then lines on stdin/stdout:
//
//   threads threads N LATE  start N threads blocked on a condition; print "ready" once all N exist. On "go"
//                           each stores once into target_var and exits; then the main thread creates LATE
//                           threads that store once each and exit; print "done tids=K" (K = distinct tids
//                           that stored, N+LATE unless tids were reused); exit on EOF
//   threads alternate N [US]  N threads store a rising per-thread counter into target_var, then target_var2,
//                           then again, pausing US microseconds (default 200, 0 = none) after each pair;
//                           "ready" once all N run; on a "stop" line print "stores=S" (total stores, both
//                           globals) and "done"; exit on EOF
//   threads hog N           like `threads N 0`, but the last thread first opens 4 pinned, disabled write
//                           breakpoints bound to itself (pid 0, cpu -1) on private variables and keeps them:
//                           a task holds at most 4, so attaching a watch to that thread fails (ENOSPC).
//                           Prints "hog tid=T held=K" (K: how many the kernel granted) before "ready"
//   threads count N         N threads asleep on a condition (64 KiB stacks, so 10,000 fit); "ready" once all
//                           exist; exit on EOF (the arming-cost benchmark's target)
//   threads churn N         N chains of short-lived threads, each thread storing once and creating the next
//                           before it exits, from the start ("ready" at once): before "go" they store into
//                           target_var2, after it into target_var; on "stop" the chains end and it prints
//                           "stores=S" (stores into target_var) and "done"; exit on EOF
//   threads sprout N [US]   "ready", then the main thread creates N threads, one every US microseconds
//                           (default 200), each waiting for "go"; on "go" (read by another thread) each stores
//                           its tid into target_var once and exits; print "stores=S" (S = threads made) and
//                           "done" once all stored; exit on EOF
//   threads tagged N COUNT [ADDS]  "ready"; on "go" N threads each store (tid << 32 | seq) for seq 1..COUNT
//                           into target_var with a plain `mov` (ksw_thread_store), then ADDS (default
//                           COUNT/10) locked adds of 1 (ksw_thread_add, a read-modify-write); they run at
//                           once on every CPU, so stores contend; print "stores=S adds=A" and "done"; exit
//                           on EOF
//   threads reexec N        "ready"; on "go" store N into target_var once, then exec itself as `threads
//                           after-exec 1`, which stores 2 into target_var (the same address when built
//                           -no-pie), prints "exec'd" and exits on EOF
//   threads forks N         "ready"; on "go" fork N children, each storing its pid into target_var once and
//                           exiting, wait for them, store once itself, print "children=P1,P2,..." and "done";
//                           exit on EOF
//   threads forkexec N      "ready"; on "go" fork one child, which stores its pid into target_var once and
//                           execs this program as `threads exec-store N` (N stored into target_var at once,
//                           then exit: the same address when built -no-pie); wait for it, store its own pid
//                           once, print "child=P" and "done"; exit on EOF
//   threads exec-store N    store N into target_var once and exit
//   threads forker N        "ready"; on each "fork" line fork a child that stores its pid into target_var once
//                           and exits; wait for it and print "child=P"; exit on EOF (N is unused)
#define _GNU_SOURCE
#include <errno.h>
#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

volatile unsigned long target_var __attribute__((aligned(64)));
volatile unsigned long target_var2 __attribute__((aligned(64)));

// The hog thread's own breakpoints watch these; nobody writes them.
static volatile unsigned long hog_vars[4] __attribute__((aligned(64)));

// The one place user space stores into a watched global: hits of these stores have their ip in here. The
// empty asm takes the frame address, which makes gcc set up a frame even in this leaf (it leaves one out
// despite -fno-omit-frame-pointer), so a frame-pointer unwind of a hit shows its caller too.
__attribute__((noipa)) void ksw_thread_store(volatile unsigned long *p, unsigned long v) {
    __asm__ volatile("" ::"r"(__builtin_frame_address(0)));
    *p = v;
}

// The one place a helper does a read-modify-write of a watched global (`lock add`).
__attribute__((noipa)) void ksw_thread_add(volatile unsigned long *p, unsigned long v) {
    __asm__ volatile("" ::"r"(__builtin_frame_address(0)));
    __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static long started, stored;     // threads that exist / threads that did their store, under mu
static int go, stop;             // set under mu; stop is also polled unlocked by alternate threads
static pid_t *tids;              // tid of each storing thread, by index
static pid_t hog_tid;
static int hog_held;

struct job {
    long index;
    int hog;                     // this thread holds 4 breakpoints on itself first
    int wait_go;                 // block until "go" before storing (threads/hog); late threads store at once
};

static pid_t gettid_(void) { return (pid_t)syscall(SYS_gettid); }

static void die(const char *what, int err) {
    fprintf(stderr, "threads: %s: %s\n", what, strerror(err));
    exit(2);
}

static int hold_breakpoints(void) {
    int held = 0;
    for (int i = 0; i < 4; i++) {
        if (hold_breakpoint(&hog_vars[i], 0, -1) < 0) {
            fprintf(stderr, "threads: hog perf_event_open %d: %s\n", i, strerror(errno));
            break;
        }
        held++;
    }
    return held;
}

// threads/hog/late: (hold breakpoints,) say it exists, wait for "go" if asked, store once, exit.
static void *store_once(void *arg) {
    struct job *j = arg;
    if (j->hog) {
        hog_held = hold_breakpoints();
        hog_tid = gettid_();
    }
    pthread_mutex_lock(&mu);
    started++;
    pthread_cond_broadcast(&cv);
    while (j->wait_go && !go) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    ksw_thread_store(&target_var, (unsigned long)j->index + 1);
    pthread_mutex_lock(&mu);
    tids[j->index] = gettid_();
    stored++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return NULL;
}

static unsigned long pause_us;

static void *alternate(void *arg) {
    unsigned long i = 0, *total = arg;
    pthread_mutex_lock(&mu);
    started++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
        ksw_thread_store(&target_var, ++i);
        ksw_thread_store(&target_var2, ++i);
        if (pause_us) usleep(pause_us);
    }
    *total = i;
    return NULL;
}

static unsigned long tagged_count, tagged_adds;

static void *tagged(void *arg) {
    (void)arg;
    unsigned long tid = (unsigned long)gettid_();
    pthread_mutex_lock(&mu);
    started++;
    pthread_cond_broadcast(&cv);
    while (!go) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    for (unsigned long seq = 1; seq <= tagged_count; seq++) ksw_thread_store(&target_var, tid << 32 | seq);
    for (unsigned long i = 0; i < tagged_adds; i++) ksw_thread_add(&target_var, 1);
    return NULL;
}

static pthread_attr_t attr;

// churn: store once (where depends on "go"), start the next thread of the chain, exit.
static long churn_stores;  // stores into target_var, atomic
static long churn_live;    // chains still running, under mu
static void *churn_link(void *arg) {
    int counting = __atomic_load_n(&go, __ATOMIC_ACQUIRE);
    if (counting) {
        ksw_thread_store(&target_var, (unsigned long)gettid_());
        __atomic_add_fetch(&churn_stores, 1, __ATOMIC_RELAXED);
    } else {
        ksw_thread_store(&target_var2, (unsigned long)gettid_());
    }
    pthread_t next;
    if (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE) && pthread_create(&next, &attr, churn_link, arg) == 0) {
        pthread_detach(next);
        return NULL;
    }
    pthread_mutex_lock(&mu);
    churn_live--;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return NULL;
}

// count: exists, then sleeps until the process exits.
static void *sleeper(void *arg) {
    (void)arg;
    pthread_mutex_lock(&mu);
    started++;
    pthread_cond_broadcast(&cv);
    for (;;) pthread_cond_wait(&cv, &mu);
    return NULL;
}

static void spawn(pthread_t *t, void *(*fn)(void *), void *arg) {
    int err = pthread_create(t, &attr, fn, arg);
    if (err) die("pthread_create", err);
}

static void wait_count(long *counter, long n) {
    pthread_mutex_lock(&mu);
    while (*counter < n) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

static void say(const char *line) {
    fputs(line, stdout);
    fflush(stdout);
}

// Reads stdin until a line equal to `want` (returns 1) or EOF (returns 0).
static int wait_for(const char *want) {
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        if (strcmp(line, want) == 0) return 1;
    }
    return 0;
}

static void wait_eof(void) {
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
    }
}

static int cmp_pid(const void *a, const void *b) {
    pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
    return (x > y) - (x < y);
}

static long distinct(pid_t *v, long n) {
    qsort(v, n, sizeof *v, cmp_pid);
    long k = 0;
    for (long i = 0; i < n; i++)
        if (i == 0 || v[i] != v[i - 1]) k++;
    return k;
}

static void run_store_once(long n, long late, int hog) {
    pthread_t *t = calloc(n + late, sizeof *t);
    struct job *jobs = calloc(n + late, sizeof *jobs);
    tids = calloc(n + late, sizeof *tids);
    if (!t || !jobs || !tids) die("calloc", ENOMEM);
    for (long i = 0; i < n; i++) {
        jobs[i] = (struct job){ .index = i, .hog = hog && i == n - 1, .wait_go = 1 };
        spawn(&t[i], store_once, &jobs[i]);
    }
    wait_count(&started, n);
    if (hog) printf("hog tid=%d held=%d\n", (int)hog_tid, hog_held);
    say("ready\n");
    if (!wait_for("go")) exit(0);
    pthread_mutex_lock(&mu);
    go = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    wait_count(&stored, n);
    for (long i = n; i < n + late; i++) {
        jobs[i] = (struct job){ .index = i };
        spawn(&t[i], store_once, &jobs[i]);
    }
    for (long i = 0; i < n + late; i++) pthread_join(t[i], NULL);
    printf("done tids=%ld\n", distinct(tids, n + late));
    fflush(stdout);
    wait_eof();
}

// sprout: waits for "go", stores its tid once and exits.
static void *sprout_waiter(void *arg) {
    (void)arg;
    pthread_mutex_lock(&mu);
    while (!go) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    ksw_thread_store(&target_var, (unsigned long)gettid_());
    pthread_mutex_lock(&mu);
    stored++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return NULL;
}

// sprout's stdin: "go" lets the waiters store; EOF before it ends the process.
static void *sprout_reader(void *arg) {
    (void)arg;
    if (!wait_for("go")) exit(0);
    pthread_mutex_lock(&mu);
    go = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return NULL;
}

// Forks a child that stores its pid into `target_var` and exits; waits for it and returns its pid.
static pid_t fork_a_storer(void) {
    pid_t c = fork();
    if (c < 0) die("fork", errno);
    if (c == 0) {
        ksw_thread_store(&target_var, (unsigned long)getpid());
        _exit(0);
    }
    waitpid(c, NULL, 0);
    return c;
}

int main(int argc, char **argv) {
    const char *mode = argc > 2 ? argv[1] : "";
    long n = argc > 2 ? atol(argv[2]) : 0;
    if (n <= 0 || (strcmp(mode, "threads") == 0 && argc < 4)) {
        fprintf(stderr, "usage: threads threads N LATE | alternate N [US] | hog N | count N | churn N | sprout N [US] | forks N | forkexec N | forker N | tagged N COUNT [ADDS] | reexec N\n");
        return 2;
    }
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    printf("addr=%p addr2=%p pid=%d tid=%d\n", (void *)&target_var, (void *)&target_var2, (int)getpid(),
           (int)gettid_());
    fflush(stdout);
    if (strcmp(mode, "threads") == 0) {
        run_store_once(n, atol(argv[3]), 0);
    } else if (strcmp(mode, "hog") == 0) {
        run_store_once(n, 0, 1);
    } else if (strcmp(mode, "alternate") == 0) {
        pause_us = argc > 3 ? strtoul(argv[3], NULL, 10) : 200;
        pthread_t *t = calloc(n, sizeof *t);
        unsigned long *totals = calloc(n, sizeof *totals), sum = 0;
        if (!t || !totals) die("calloc", ENOMEM);
        for (long i = 0; i < n; i++) spawn(&t[i], alternate, &totals[i]);
        wait_count(&started, n);
        say("ready\n");
        wait_for("stop");  // EOF stops them as well
        __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
        for (long i = 0; i < n; i++) {
            pthread_join(t[i], NULL);
            sum += totals[i];
        }
        printf("stores=%lu\ndone\n", sum);
        fflush(stdout);
        wait_eof();
    } else if (strcmp(mode, "churn") == 0) {
        churn_live = n;
        for (long i = 0; i < n; i++) {
            pthread_t t;
            spawn(&t, churn_link, NULL);
            pthread_detach(t);
        }
        say("ready\n");
        if (wait_for("go")) {
            __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
            wait_for("stop");
        }
        __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
        pthread_mutex_lock(&mu);
        while (churn_live > 0) pthread_cond_wait(&cv, &mu);
        pthread_mutex_unlock(&mu);
        printf("stores=%ld\ndone\n", __atomic_load_n(&churn_stores, __ATOMIC_RELAXED));
        fflush(stdout);
        wait_eof();
    } else if (strcmp(mode, "sprout") == 0) {
        // The main thread (the lowest tid, whose events a process watch opens first) makes the threads,
        // so they are made while the watch is being armed.
        useconds_t us = argc > 3 ? (useconds_t)strtoul(argv[3], NULL, 10) : 200;
        pthread_t reader;
        spawn(&reader, sprout_reader, NULL);
        say("ready\n");
        for (long i = 0; i < n; i++) {
            pthread_t t;
            spawn(&t, sprout_waiter, NULL);
            pthread_detach(t);
            if (us) usleep(us);
        }
        pthread_join(reader, NULL);
        wait_count(&stored, n);
        printf("stores=%ld\ndone\n", n);
        fflush(stdout);
        wait_eof();
    } else if (strcmp(mode, "tagged") == 0) {
        tagged_count = argc > 3 ? strtoul(argv[3], NULL, 10) : 1000;
        tagged_adds = argc > 4 ? strtoul(argv[4], NULL, 10) : tagged_count / 10;
        pthread_t *t = calloc(n, sizeof *t);
        if (!t) die("calloc", ENOMEM);
        for (long i = 0; i < n; i++) spawn(&t[i], tagged, NULL);
        wait_count(&started, n);
        say("ready\n");
        if (!wait_for("go")) return 0;
        pthread_mutex_lock(&mu);
        go = 1;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
        for (long i = 0; i < n; i++) pthread_join(t[i], NULL);
        printf("stores=%lu adds=%lu\ndone\n", n * tagged_count, n * tagged_adds);
        fflush(stdout);
        wait_eof();
    } else if (strcmp(mode, "reexec") == 0) {
        say("ready\n");
        if (!wait_for("go")) return 0;
        ksw_thread_store(&target_var, (unsigned long)n);
        char self[4096];
        ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        if (len < 0) die("readlink", errno);
        self[len] = 0;
        execl(self, "threads", "after-exec", "1", (char *)NULL);
        die("execl", errno);
    } else if (strcmp(mode, "after-exec") == 0) {
        ksw_thread_store(&target_var, 2);
        say("exec'd\n");
        wait_eof();
    } else if (strcmp(mode, "forks") == 0) {
        say("ready\n");
        if (!wait_for("go")) return 0;
        printf("children=");
        for (long i = 0; i < n; i++) {
            pid_t c = fork_a_storer();
            printf("%s%d", i ? "," : "", (int)c);
        }
        ksw_thread_store(&target_var, (unsigned long)getpid());
        printf("\ndone\n");
        fflush(stdout);
        wait_eof();
    } else if (strcmp(mode, "forkexec") == 0) {
        say("ready\n");
        if (!wait_for("go")) return 0;
        char self[4096], arg[32];
        ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        if (len < 0) die("readlink", errno);
        self[len] = 0;
        snprintf(arg, sizeof arg, "%ld", n);
        pid_t c = fork();
        if (c < 0) die("fork", errno);
        if (c == 0) {
            ksw_thread_store(&target_var, (unsigned long)getpid());
            execl(self, "threads", "exec-store", arg, (char *)NULL);
            _exit(127);
        }
        int status;
        waitpid(c, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("the exec'd child failed", ECHILD);
        ksw_thread_store(&target_var, (unsigned long)getpid());
        printf("child=%d\ndone\n", (int)c);
        fflush(stdout);
        wait_eof();
    } else if (strcmp(mode, "exec-store") == 0) {
        ksw_thread_store(&target_var, (unsigned long)n);
    } else if (strcmp(mode, "forker") == 0) {
        say("ready\n");
        while (wait_for("fork")) {
            pid_t c = fork_a_storer();
            printf("child=%d\n", (int)c);
            fflush(stdout);
        }
    } else if (strcmp(mode, "count") == 0) {
        pthread_t t;
        for (long i = 0; i < n; i++) spawn(&t, sleeper, NULL);
        wait_count(&started, n);
        say("ready\n");
        wait_eof();  // returning from main ends every thread
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    return 0;
}
