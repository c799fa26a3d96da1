// LD_PRELOAD for a watched helper: logs every SIGTRAP it receives (pid, tid, si_code, address, ip, trap
// number, error code) to the file named by TRAP_CATCH_LOG (default /tmp/trap-caught.log) and lets the thread go
// on, so a spurious SIGTRAP is seen with its si_code instead of killing the helper: TRAP_BRKPT (1) is a #DB
// whose DR6 showed no cause (the kernel takes it for an ICEBP), TRAP_HWBKPT (4) a breakpoint bit no
// breakpoint claimed next to another DR6 bit, TRAP_TRACE (2) a single-step bit. Used by trap-rounds.py.
//
//   gcc -O1 -shared -fPIC scripts/trap-catch.c -o /tmp/trap-catch.so
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/syscall.h>
static const char *log_path = "/tmp/trap-caught.log";

static void on_trap(int sig, siginfo_t *si, void *uc_) {
    ucontext_t *uc = uc_;
    char buf[256];
    int n = snprintf(buf, sizeof buf, "pid=%d tid=%ld code=%d addr=%p ip=%llx trapno=%lld err=%lld errno_si=%d\n",
                     getpid(), syscall(SYS_gettid), si->si_code, si->si_addr,
                     (unsigned long long)uc->uc_mcontext.gregs[REG_RIP], (long long)uc->uc_mcontext.gregs[REG_TRAPNO],
                     (long long)uc->uc_mcontext.gregs[REG_ERR], si->si_errno);
    int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd >= 0) { write(fd, buf, n); close(fd); }
    (void)sig;
}
__attribute__((constructor)) static void init(void) {
    const char *p = getenv("TRAP_CATCH_LOG");
    if (p && *p) log_path = p;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGTRAP, &sa, NULL);
}
