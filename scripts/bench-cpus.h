// The online CPUs for the C benchmark helpers, from /sys/devices/system/cpu/online (`0-1`, `0,2-3`).
// Included by scripts/bench-*.c next to it (each is built alone by its benchmark script).
#ifndef KSW_BENCH_CPUS_H
#define KSW_BENCH_CPUS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Fills `cpus` with the online CPUs, at most `max`; returns how many. Exits 1 when the list is unreadable.
static int read_online_cpus(int *cpus, int max) {
    char line[4096];
    int n = 0;
    FILE *f = fopen("/sys/devices/system/cpu/online", "r");
    if (!f || !fgets(line, sizeof line, f)) {
        perror("/sys/devices/system/cpu/online");
        exit(1);
    }
    fclose(f);
    for (char *part = strtok(line, ",\n"); part; part = strtok(NULL, ",\n")) {
        int a, b;
        int got = sscanf(part, "%d-%d", &a, &b);
        if (got < 1) continue;
        if (got == 1) b = a;
        for (int c = a; c <= b && n < max; c++) cpus[n++] = c;
    }
    return n;
}

#endif
