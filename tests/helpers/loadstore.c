// Test helper for ksymwatch's live tests: loads its global `ls_var` once (it holds 0, from .bss), then
// stores 5 into it N times (argv[1], default 3) and exits at once. Under an `rw` watch the load's hit shows
// the value it read only if the tracer knew what the range held before the program ran: by the time the
// tracer takes the hit, the stores have changed it, or the process is gone.
#include <stdlib.h>

volatile unsigned long ls_var __attribute__((aligned(64)));
volatile unsigned long ls_sink;

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 3;
    ls_sink = ls_var;
    for (long i = 0; i < n; i++) ls_var = 5;
    return 0;
}
