// Test helper for ksymwatch's live value tests: stores of known forms and values into one 8-byte global, so
// a test can check each hit's `value` against what the store wrote. It prints its address and ids, waits
// for "go" on stdin, does the work pinned to one CPU, says "done", and exits on EOF.
//
//   stores after48 N CPU  the global's upper half set to 0x5a5a5a5a once; then N times a 4-byte
//                         `mov %eax,(%rsi)` of i (1..=N) into its lower half, right after a
//                         `mov 0x48(%rdi),%eax` (whose last byte, 0x48, is also a REX.W prefix: the bytes
//                         before the store's end read as `48 89 06`, an 8-byte store, from the wrong start)
//   stores widths N CPU   N rounds of four stores into the global, one of each width: 1 byte at +0, 2 bytes
//                         at +2, 4 bytes at +4, then 8 bytes (values from the round number, see below)
//   stores spin CPU       after "go", an 8-byte store of 1, 2, 3, ... every ~200 us until a "stop" line,
//                         then prints "stores=N" and "done"
#define _GNU_SOURCE
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "helpers.h"

volatile unsigned long ksw_var __attribute__((aligned(64)));
// The load's source: the stored value sits at byte 0x48 of it.
unsigned int ksw_src[32] __attribute__((aligned(64)));

// Exactly the failing form: `8b 47 48` (mov 0x48(%rdi),%eax) then `89 06` (mov %eax,(%rsi)).
__attribute__((noinline)) void ksw_after48(const unsigned int *from, volatile unsigned long *to) {
    __asm__ volatile("mov 0x48(%0),%%eax\n\tmov %%eax,(%1)" : : "D"(from), "S"(to) : "eax", "memory");
}

// One store of each width, each its own instruction.
__attribute__((noinline)) void ksw_store1(unsigned char v) { *(volatile unsigned char *)&ksw_var = v; }
__attribute__((noinline)) void ksw_store2(unsigned short v) { *(volatile unsigned short *)((char *)&ksw_var + 2) = v; }
__attribute__((noinline)) void ksw_store4(unsigned int v) { *(volatile unsigned int *)((char *)&ksw_var + 4) = v; }
__attribute__((noinline)) void ksw_store8(unsigned long v) { ksw_var = v; }

int main(int argc, char **argv) {
    const char *mode = mode_of(argc, argv, "stores after48|widths N CPU | spin CPU");
    if (!mode) return 2;
    int spin = strcmp(mode, "spin") == 0;
    long n = spin ? 0 : atol(argv[2]);
    int cpu = atoi(spin ? argv[2] : argv[3]);
    printf("addr=%p pid=%d tid=%ld\n", (void *)&ksw_var, getpid(), (long)syscall(SYS_gettid));
    fflush(stdout);
    wait_line();
    pin(cpu);
    if (strcmp(mode, "after48") == 0) {
        ksw_var = 0x5a5a5a5a00000000UL;
        for (long i = 1; i <= n; i++) {
            ksw_src[0x48 / 4] = (unsigned int)i;
            ksw_after48(ksw_src, &ksw_var);
        }
    } else if (strcmp(mode, "widths") == 0) {
        // Round r: 1 byte r, 2 bytes 0x100 + r, 4 bytes 0x10000 + r, then 8 bytes 0x100000000 * r + r.
        for (long r = 1; r <= n; r++) {
            ksw_store1((unsigned char)r);
            ksw_store2((unsigned short)(0x100 + r));
            ksw_store4((unsigned int)(0x10000 + r));
            ksw_store8(0x100000000UL * (unsigned long)r + (unsigned long)r);
        }
    } else if (spin) {
        long stores = 0;
        struct pollfd p = {.fd = 0, .events = POLLIN};
        while (poll(&p, 1, 0) == 0) {
            ksw_store8((unsigned long)++stores);
            usleep(200);
        }
        wait_line();
        printf("stores=%ld\n", stores);
    } else {
        return unknown_mode(mode);
    }
    return done_then_wait();
}
