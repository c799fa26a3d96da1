// Test helper: occupies debug registers by holding K pinned CPU-bound write breakpoints on one CPU (on its
// own variables), so tests can prove that ksymwatch never half-arms. Prints "held K" and waits for EOF.
//
//   holder CPU K
#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile unsigned long vars[8] __attribute__((aligned(64)));

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: holder CPU K\n");
        return 2;
    }
    int cpu = atoi(argv[1]), k = atoi(argv[2]), held = 0;
    for (int i = 0; i < k; i++) {
        struct perf_event_attr a;
        memset(&a, 0, sizeof a);
        a.type = PERF_TYPE_BREAKPOINT;
        a.size = sizeof a;
        a.bp_type = HW_BREAKPOINT_W;
        a.bp_addr = (unsigned long)&vars[i];
        a.bp_len = HW_BREAKPOINT_LEN_8;
        a.sample_period = 1;
        a.pinned = 1;
        a.disabled = 1;
        int fd = syscall(SYS_perf_event_open, &a, -1, cpu, -1, 0);
        if (fd < 0) {
            perror("perf_event_open");
            break;
        }
        held++;
    }
    printf("held %d\n", held);
    fflush(stdout);
    char buf[16];
    while (fgets(buf, sizeof buf, stdin)) {
    }
    return 0;
}
