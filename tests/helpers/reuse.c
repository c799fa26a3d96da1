// Test helper for user-space objects whose memory is reused at once: `reuse THREADS N` starts THREADS
// threads, each making N objects (struct slip, malloc'ed: 72 bytes, built with -g for its DWARF) one after
// another: after a pause for the tracer to arm it, its `mark` is stored STORES times (1, 2, 3), then it is
// freed and the next one malloc'ed. glibc's free writes its tcache key over `mark` (offset 8) and the next
// malloc of that size clears it: stores after the free, which are not the object's.
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#define STORES 3

struct slip {
    long id;
    int mark; // the watched field, where a freed chunk's tcache key goes
    int flags;
    char text[56];
}; // 72 bytes

static long per_thread = 5;

__attribute__((noinline)) static void stamp(struct slip *s) {
    for (int k = 1; k <= STORES; k++)
        ((volatile struct slip *)s)->mark = k;
}

static void *run(void *arg) {
    (void)arg;
    for (long i = 0; i < per_thread; i++) {
        struct slip *s = malloc(sizeof *s);
        if (!s)
            exit(1);
        usleep(30000); // the tracer arms it
        stamp(s);
        free(s);
    }
    return NULL;
}

int main(int argc, char **argv) {
    long threads = argc > 1 ? atol(argv[1]) : 4;
    if (argc > 2)
        per_thread = atol(argv[2]);
    if (threads > 16)
        threads = 16;
    pthread_t t[16];
    for (long i = 0; i < threads; i++)
        if (pthread_create(&t[i], NULL, run, NULL) != 0)
            return 1;
    for (long i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    return 0;
}
