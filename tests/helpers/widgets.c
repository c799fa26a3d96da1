// Test helper for user-space `--on` sources: a program with its own allocator (widget_new/widget_free),
// which also calls libc's malloc for requests of other sizes, and can load a library (argv[1], with
// dlopen) that allocates objects of its own. Built with -g: the tests name `struct widget` from its DWARF.
//
// `widgets go N [PAUSE_US]` / `widgets regrow N` / `widgets aligned N` / `widgets hold N` /
// `widgets lib N LIB` do one command (below) and exit, writing nothing: for `-- CMD`. `widgets bench N` times N widgets made and freed back
// to back (the benchmark's cost per allocation) and writes "ns_per_widget X". `widgets [LIB]` writes
// "ready PID\n", then per line: "go N" makes N widgets (each: widget_new, then `count` stored STORES
// times, then widget_free; between them a malloc of 24 and of 200 bytes, freed); "lib N" dlopens argv[1]
// once and has its gizmo_cycle make N of its objects; "exit" ends. Each answered "done N\n".
// Reads and writes with raw read/write: stdio would call malloc.
#include <dlfcn.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STORES 3

struct widget {
    long id;
    char name[40];
    int count; // the watched field, at offset 48
    int flags;
    void *next;
}; // 64 bytes

// A type of another size that nothing allocates: the benchmark's source that fires on every malloc and
// takes none (its probes' own cost).
struct spare {
    long words[5];
};
volatile struct spare spare_sink;

static void *volatile keep;

// Sets up a new widget: the object is its argument 0 (a `uprobe:...:widget_init:arg0` source).
__attribute__((noinline)) void widget_init(struct widget *w, long id) {
    memset(w, 0, sizeof *w);
    w->id = id;
}

__attribute__((noinline)) struct widget *widget_new(long id) {
    struct widget *w = malloc(sizeof *w);
    if (w)
        widget_init(w, id);
    return w;
}

__attribute__((noinline)) void widget_free(struct widget *w) {
    free(w);
}

static void say(const char *s, long n) {
    char buf[64];
    size_t len = strlen(s);
    memcpy(buf, s, len);
    char digits[24];
    int d = 0;
    do {
        digits[d++] = (char)('0' + n % 10);
        n /= 10;
    } while (n > 0);
    while (d > 0)
        buf[len++] = digits[--d];
    buf[len++] = '\n';
    if (write(1, buf, len) != (ssize_t)len)
        exit(1);
}

static int read_line(char *line, size_t max) {
    size_t n = 0;
    while (n + 1 < max) {
        char c;
        if (read(0, &c, 1) != 1)
            return -1;
        if (c == '\n')
            break;
        line[n++] = c;
    }
    line[n] = 0;
    return (int)n;
}

__attribute__((noinline)) static void go(long n, long pause_us) {
    for (long i = 0; i < n; i++) {
        keep = malloc(24);
        free(keep);
        struct widget *w = widget_new(i);
        // A pause for the tracer to arm it: arming is behind the allocation.
        usleep((useconds_t)pause_us);
        for (int k = 1; k <= STORES; k++)
            ((volatile struct widget *)w)->count = k;
        keep = malloc(200);
        free(keep);
        widget_free(w);
    }
}

// N widgets alive at once (at most 64): each made (a pause after each for the tracer), then each one's
// `count` stored STORES times in the order they were made, then all freed.
__attribute__((noinline)) static void hold(long n) {
    struct widget *held[64];
    if (n > 64)
        n = 64;
    for (long i = 0; i < n; i++) {
        held[i] = widget_new(i);
        usleep(20000);
    }
    for (long i = 0; i < n; i++)
        for (int k = 1; k <= STORES; k++)
            ((volatile struct widget *)held[i])->count = k;
    for (long i = 0; i < n; i++)
        widget_free(held[i]);
}

// N widgets back to back (widget_new, one store, widget_free), timed: writes "ns_per_widget X\n".
static void bench(long n) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        struct widget *w = widget_new(i);
        ((volatile struct widget *)w)->count = 1;
        widget_free(w);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    long ns = (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec);
    say("ns_per_widget ", n > 0 ? ns / n : 0);
}

// N objects that realloc makes: a 32-byte block grown to a widget (a new object of its size), its
// `count` stored STORES times, then grown again to 200 bytes (which ends it) and freed.
__attribute__((noinline)) static void regrow(long n) {
    for (long i = 0; i < n; i++) {
        char *p = malloc(32);
        struct widget *w = realloc(p, sizeof *w);
        if (!w)
            exit(1);
        usleep(20000);
        for (int k = 1; k <= STORES; k++)
            ((volatile struct widget *)w)->count = k;
        keep = realloc(w, 200);
        free(keep);
    }
}

// N widgets from posix_memalign (16-byte aligned), each `count` stored STORES times, then freed; beside
// each, a call that fails (alignment 3: EINVAL, its out-pointer holding a live 200-byte block) and one
// for 24 bytes, neither a widget.
__attribute__((noinline)) static void aligned(long n) {
    for (long i = 0; i < n; i++) {
        void *p = NULL;
        if (posix_memalign(&p, 16, sizeof(struct widget)) != 0)
            exit(1);
        struct widget *w = p;
        usleep(20000);
        for (int k = 1; k <= STORES; k++)
            ((volatile struct widget *)w)->count = k;
        free(w);
        void *q = malloc(200);
        if (posix_memalign(&q, 3, sizeof(struct widget)) == 0)
            exit(1);
        free(q);
        if (posix_memalign(&q, 16, 24) != 0)
            exit(1);
        keep = q;
        free(keep);
    }
}

static void (*gizmo_cycle)(int);

static int lib(long n, const char *path) {
    if (!gizmo_cycle) {
        void *h = dlopen(path, RTLD_NOW);
        if (!h)
            return 3;
        gizmo_cycle = (void (*)(int))dlsym(h, "gizmo_cycle");
        if (!gizmo_cycle)
            return 4;
    }
    for (long i = 0; i < n; i++)
        gizmo_cycle(STORES);
    return 0;
}

/* The commands `widgets NAME N` that do their work N times and exit. */
static const struct {
    const char *name;
    void (*run)(long n);
} counted[] = {
    {"hold", hold},
    {"bench", bench},
    {"aligned", aligned},
    {"regrow", regrow},
};

int main(int argc, char **argv) {
    char line[64];
    if (argc >= 3 && strcmp(argv[1], "go") == 0) {
        go(atol(argv[2]), argc >= 4 ? atol(argv[3]) : 20000);
        return 0;
    }
    for (size_t i = 0; argc >= 3 && i < sizeof counted / sizeof counted[0]; i++) {
        if (strcmp(argv[1], counted[i].name) == 0) {
            counted[i].run(atol(argv[2]));
            return 0;
        }
    }
    if (argc >= 4 && strcmp(argv[1], "lib") == 0)
        return lib(atol(argv[2]), argv[3]);
    say("ready ", getpid());
    while (read_line(line, sizeof line) >= 0) {
        if (strncmp(line, "go ", 3) == 0) {
            long n = atol(line + 3);
            go(n, 20000);
            say("done ", n);
        } else if (strncmp(line, "lib ", 4) == 0 && argc > 1) {
            long n = atol(line + 4);
            int e = lib(n, argv[1]);
            if (e)
                return e;
            say("done ", n);
        } else if (strcmp(line, "exit") == 0) {
            break;
        }
    }
    return 0;
}
