// The write breakpoints the C programs here open: the measuring scripts next to this header (each is
// built alone: `gcc -O1 -pthread scripts/NAME.c`) and the live tests' helpers (through
// tests/helpers/helpers.h). Every function is static and may go unused in one program.
#ifndef KSW_WRITE_BP_H
#define KSW_WRITE_BP_H

#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

// Fills `a` for a write breakpoint on the `len` bytes at `addr`, every other field zero.
static __attribute__((unused)) void write_bp_attr(struct perf_event_attr *a, unsigned long addr, int len) {
    memset(a, 0, sizeof *a);
    a->type = PERF_TYPE_BREAKPOINT;
    a->size = sizeof *a;
    a->bp_type = HW_BREAKPOINT_W;
    a->bp_addr = addr;
    a->bp_len = len;
}

// Opens the write breakpoint the SIGTRAP measuring scripts take (trap-race.c, trap-storm.c), as ksymwatch
// opens a process watch's: on an 8-byte word, pinned, bound to one thread (or every thread of the caller on
// `cpu` when `tid` is 0) and inherited by the threads it creates, not by forked children. For `tid` on `cpu`
// (-1: any), `disabled` until PERF_EVENT_IOC_ENABLE; with `sampling`, every hit is a sample (ip, tid, time,
// user call chain) waking the ring's reader, as a reader that keeps up asks. Returns the descriptor, or -1
// with errno set.
static __attribute__((unused)) int open_write_bp(const volatile void *word, pid_t tid, int cpu, int disabled,
                                                 int sampling) {
    struct perf_event_attr a;
    write_bp_attr(&a, (unsigned long)word, HW_BREAKPOINT_LEN_8);
    a.disabled = disabled ? 1 : 0;
    a.pinned = 1;
    a.inherit = 1;
    a.inherit_thread = 1;
    if (sampling) {
        a.sample_period = 1;
        a.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CALLCHAIN;
        a.exclude_callchain_kernel = 1;
        a.wakeup_events = 1;
    }
    return (int)syscall(SYS_perf_event_open, &a, tid, cpu, -1, 0);
}

#endif
