// Test helper for ksymwatch's live tests: a process whose main thread has exited while another thread
// runs, so /proc/PID/status shows its leader as a zombie (`Z`) although the process is alive. It prints the
// address of `leaderless_var` (0x hex) and a newline, then the main thread exits (pthread_exit); the other
// thread stores into the variable every millisecond until stdin reaches EOF (the test closing it or dying).
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

volatile unsigned long leaderless_var __attribute__((aligned(64)));

static void *storer(void *arg) {
    (void)arg;
    for (unsigned long i = 1;; i++) {
        leaderless_var = i;
        usleep(1000);
    }
    return NULL;
}

static void *eof_watcher(void *arg) {
    (void)arg;
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    _exit(0);
    return NULL;
}

int main(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, storer, NULL) != 0 || pthread_create(&t, NULL, eof_watcher, NULL) != 0) {
        perror("pthread_create");
        return 1;
    }
    printf("%p\n", (void *)&leaderless_var);
    fflush(stdout);
    // Give the printed line time to be read before the leader becomes a zombie.
    usleep(100 * 1000);
    pthread_exit(NULL);
}
