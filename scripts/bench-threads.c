// bench-threads N: a process of N threads for scripts/bench-process-wide.py (N counts the thread that
// stores; with the main thread the process has N + 1 tasks).
//
// N - 1 threads sleep for good; one more, the storer, waits on a semaphore. Every thread runs on a 16 KiB
// stack carved out of one mapping (no guard pages), so 100,000 threads need one mapping rather than
// 200,000 and fit in the default vm.max_map_count. Prints
//     addr=0x... addr2=0x... pid=N tid=N
// (the two globals, fixed: build with -no-pie; tid is the storer's), then "ready" once every thread has
// started. Then reads stdin: "store" has the storer write target_var, "store2" target_var2, each answered
// "stored" after the store; EOF ends the process.
//
//     gcc -O1 -pthread -no-pie -o bench-threads scripts/bench-threads.c
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define STACK (16 * 1024)

volatile unsigned long target_var;
volatile unsigned long target_var2;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static long started;
static sem_t go;
static volatile int which;  // 1: target_var, 2: target_var2
static sem_t done;
static volatile pid_t storer_tid;

static void die(const char *what, int err) {
    fprintf(stderr, "bench-threads: %s: %s\n", what, strerror(err));
    exit(1);
}

static void count_started(void) {
    pthread_mutex_lock(&mu);
    started++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void *sleeper(void *arg) {
    (void)arg;
    count_started();
    for (;;) pause();
    return NULL;
}

static void *storer(void *arg) {
    (void)arg;
    storer_tid = (pid_t)syscall(SYS_gettid);
    count_started();
    for (unsigned long i = 1;; i++) {
        while (sem_wait(&go) != 0) {
        }
        if (which == 1)
            target_var = i;
        else
            target_var2 = i;
        sem_post(&done);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: bench-threads N\n");
        return 2;
    }
    long n = atol(argv[1]);
    if (n < 1) {
        fprintf(stderr, "bench-threads: N must be at least 1\n");
        return 2;
    }
    sem_init(&go, 0, 0);
    sem_init(&done, 0, 0);
    char *stacks = mmap(NULL, (size_t)n * STACK, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (stacks == MAP_FAILED) die("mmap stacks", errno);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    for (long i = 0; i < n; i++) {
        pthread_t t;
        int err = pthread_attr_setstack(&attr, stacks + (size_t)i * STACK, STACK);
        if (err) die("pthread_attr_setstack", err);
        err = pthread_create(&t, &attr, i == 0 ? storer : sleeper, NULL);
        if (err) {
            fprintf(stderr, "bench-threads: pthread_create #%ld: %s\n", i + 1, strerror(err));
            exit(1);
        }
    }
    pthread_mutex_lock(&mu);
    while (started < n) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    printf("addr=%p addr2=%p pid=%d tid=%d\nready\n", (void *)&target_var, (void *)&target_var2, (int)getpid(),
           (int)storer_tid);
    fflush(stdout);

    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (strcmp(line, "store\n") == 0)
            which = 1;
        else if (strcmp(line, "store2\n") == 0)
            which = 2;
        else
            continue;
        sem_post(&go);
        while (sem_wait(&done) != 0) {
        }
        printf("stored\n");
        fflush(stdout);
    }
    return 0;  // returning from main ends every thread
}
