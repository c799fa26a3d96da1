// Test helper: a shared library that widgets.c loads with dlopen after its start. gizmo_cycle makes one
// gizmo (gizmo_new), stores into its `level` STORES times after a pause, and frees it (gizmo_free).
#include <stdlib.h>
#include <unistd.h>

struct gizmo {
    long serial;
    long level; // the watched field, at offset 8
    char pad[16];
};

__attribute__((noinline)) struct gizmo *gizmo_new(void) {
    return calloc(1, sizeof(struct gizmo));
}

__attribute__((noinline)) void gizmo_free(struct gizmo *g) {
    free(g);
}

void gizmo_cycle(int stores) {
    struct gizmo *g = gizmo_new();
    if (!g)
        return;
    usleep(20000);
    for (int k = 1; k <= stores; k++)
        ((volatile struct gizmo *)g)->level = k;
    gizmo_free(g);
}
