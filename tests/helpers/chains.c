// Test helper for the kernel's tables of call chains and counts: one thread stores into a watched global
// from 2^BITS distinct call chains, each chain made of BITS nested calls through one of two functions
// (ksw_via0/ksw_via1), chosen by a bit of the chain's number, so a hit's chain spells its number. It
// prints its address and ids, waits for "go" on stdin, does the work pinned to CPU, prints "stores=N" and
// "done", and exits on EOF.
//
//   chains BITS REPS CPU [PAUSE]  REPS rounds of the 2^BITS chains; the stored value is the chain's number;
//                                 with PAUSE, sleep PAUSE microseconds after every 256 stores (the reader
//                                 catches up: a small ring then keeps records from all along the run)
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "helpers.h"

volatile unsigned long target_var __attribute__((aligned(64)));

__attribute__((noinline)) void ksw_chain_store(unsigned long v) {
    target_var = v;
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void ksw_via0(unsigned long v, int d);
__attribute__((noinline)) void ksw_via1(unsigned long v, int d);

// Bit d-1 of v picks the function at depth d; the asm keeps each call from becoming a tail call.
__attribute__((noinline)) void ksw_step(unsigned long v, int d) {
    if (d == 0)
        ksw_chain_store(v);
    else if ((v >> (d - 1)) & 1)
        ksw_via1(v, d - 1);
    else
        ksw_via0(v, d - 1);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void ksw_via0(unsigned long v, int d) {
    ksw_step(v, d);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void ksw_via1(unsigned long v, int d) {
    ksw_step(v, d);
    __asm__ volatile("nop" ::: "memory");
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: chains BITS REPS CPU [PAUSE]\n");
        return 2;
    }
    int bits = atoi(argv[1]);
    long reps = atol(argv[2]);
    int cpu = atoi(argv[3]);
    long pause = argc > 4 ? atol(argv[4]) : 0;
    struct timespec nap = {pause / 1000000, (pause % 1000000) * 1000};
    printf("addr=%p pid=%d tid=%ld\n", (void *)&target_var, getpid(), (long)syscall(SYS_gettid));
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        return 0;
    pin(cpu);
    unsigned long stores = 0;
    for (long r = 0; r < reps; r++)
        for (unsigned long v = 0; v < (1UL << bits); v++, stores++) {
            ksw_step(v, bits);
            if (pause && (v & 255) == 255)
                nanosleep(&nap, NULL);
        }
    printf("stores=%lu\ndone\n", stores);
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
    }
    return 0;
}
