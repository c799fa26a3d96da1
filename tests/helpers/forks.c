// Test helper for user-space objects in a process that forks: `forks N` makes N objects (struct parcel,
// malloc'ed, built with -g for its DWARF) one after another; for each, after a pause for the tracer to arm
// it, a forked child stores into its copy of the object's `weight` STORES times (values 11, 12, 13) and
// exits, then the parent, once the child has ended, stores 1, 2, 3 into its own and frees it. The child's
// stores are at the same address in another process's memory: not the parent's object's.
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define STORES 3

struct parcel {
    long id;
    int weight; // the watched field
    int flags;
    char label[40];
}; // 56 bytes

__attribute__((noinline)) static void weigh(struct parcel *p, int base) {
    for (int k = 1; k <= STORES; k++)
        ((volatile struct parcel *)p)->weight = base + k;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 3;
    for (long i = 0; i < n; i++) {
        struct parcel *p = malloc(sizeof *p);
        if (!p)
            return 1;
        p->id = i;
        usleep(30000); // the tracer arms it
        pid_t child = fork();
        if (child == 0) {
            weigh(p, 10);
            _exit(0);
        }
        waitpid(child, NULL, 0);
        weigh(p, 0);
        free(p);
    }
    return 0;
}
