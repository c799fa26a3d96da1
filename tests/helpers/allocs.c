// Test helper for uprobes: a program whose own allocation function the tests probe, and which calls libc's
// malloc only when asked. stdin and stdout are read and written with raw read/write, never stdio, so
// nothing but make_widget calls malloc once it is running (stdio allocates its buffers on first use).
//
// Writes "ready PID\n", then for each line "go N" calls make_widget N times (each mallocs 48 bytes, keeps
// the pointer where the compiler cannot drop it, frees it) and writes "done N\n"; "tgo N" has a second
// thread, started before "ready" and waiting since, make the N calls. Ends at EOF.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *volatile last;

__attribute__((noinline)) void *make_widget(int i) {
    char *p = malloc(48);
    if (p)
        p[0] = (char)i;
    return p;
}

static int to_worker[2], from_worker[2];

// The second thread: N read from to_worker, N calls, N written back. It exists before any probe opens.
static void *worker(void *arg) {
    (void)arg;
    free(make_widget(0)); // its malloc arena, before "ready"
    int n;
    while (read(to_worker[0], &n, sizeof n) == sizeof n) {
        for (int i = 0; i < n; i++) {
            last = make_widget(i);
            free(last);
        }
        if (write(from_worker[1], &n, sizeof n) != sizeof n)
            break;
    }
    return NULL;
}

static void say(const char *s) {
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(1, s, n);
        if (w <= 0)
            exit(1);
        s += w;
        n -= (size_t)w;
    }
}

int main(void) {
    char line[64];
    pthread_t t;
    if (pipe(to_worker) || pipe(from_worker) || pthread_create(&t, NULL, worker, NULL))
        return 1;
    int zero = 0;
    // One round trip: the worker has made its arena before "ready".
    if (write(to_worker[1], &zero, sizeof zero) != sizeof zero ||
        read(from_worker[0], &zero, sizeof zero) != sizeof zero)
        return 1;
    snprintf(line, sizeof line, "ready %d\n", (int)getpid());
    say(line);
    size_t have = 0;
    for (;;) {
        ssize_t r = read(0, line + have, sizeof line - 1 - have);
        if (r <= 0)
            return 0;
        have += (size_t)r;
        line[have] = 0;
        char *nl;
        while ((nl = strchr(line, '\n'))) {
            *nl = 0;
            // By hand, not sscanf/snprintf: only make_widget may call malloc while the probes count.
            int threaded = strncmp(line, "tgo ", 4) == 0;
            if (threaded || strncmp(line, "go ", 3) == 0) {
                int n = atoi(line + (threaded ? 4 : 3));
                if (threaded) {
                    if (write(to_worker[1], &n, sizeof n) != sizeof n ||
                        read(from_worker[0], &n, sizeof n) != sizeof n)
                        return 1;
                } else {
                    for (int i = 0; i < n; i++) {
                        last = make_widget(i);
                        free(last);
                    }
                }
                char out[32], digits[16];
                int d = 0;
                do
                    digits[d++] = (char)('0' + n % 10);
                while ((n /= 10) > 0);
                memcpy(out, "done ", 5);
                for (int k = 0; k < d; k++)
                    out[5 + k] = digits[d - 1 - k];
                out[5 + d] = '\n';
                out[6 + d] = 0;
                say(out);
            }
            size_t used = (size_t)(nl - line) + 1;
            memmove(line, nl + 1, have - used + 1);
            have -= used;
        }
        if (have == sizeof line - 1)
            have = 0;
    }
}
