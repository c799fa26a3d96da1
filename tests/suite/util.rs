//! Shared support for every module of the suite: a machine-wide lock for the live tests (debug registers
//! and CPU hotplug are shared by every test process, including other checkouts' test runs), C helpers built
//! with gcc, a handle on a running ksymwatch that parses its ftrace-style output, and the skip helper.

/// `skip(why)` prints `SKIP: <test>: <why>` past libtest's capture (counted by `scripts/test`); `require`
/// skips when a tool is missing. Shared with the symbols crate's tests, as is the vmlinux fixture.
pub use ksymwatch_symbols::testing::{fixture, have, require, skip, tool};

/// A live test: `#[test]`, ignored unless asked for (`scripts/test` runs them as root, with
/// `--include-ignored`), its body run holding the machine-wide lock ([`live`]).
macro_rules! live_test {
    ($name:ident, $body:block) => {
        live_test!(@lock live, $name, $body);
    };
    (@lock $lock:ident, $name:ident, $body:block) => {
        #[test]
        #[ignore = "live: arms hardware breakpoints (run by scripts/test as root)"]
        fn $name() {
            let Some(_live) = crate::util::$lock() else {
                return;
            };
            crate::util::again_if_a_helper_was_trapped(|| $body);
        }
    };
}

/// [`live_test!`] for a test whose subject is a kernel address: the lock from [`live_kernel`], which
/// skips (visibly) where the kernel refuses such breakpoints.
macro_rules! live_kernel_test {
    ($name:ident, $body:block) => {
        live_test!(@lock live_kernel, $name, $body);
    };
}

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_ksymwatch");

/// Held for the whole of a live test: only one test on this machine may arm breakpoints or touch hotplug.
pub struct LiveLock(
    #[allow(dead_code, reason = "held, never read: the flock lasts until drop")] File,
);

thread_local! {
    /// Whether this test's thread holds the lock: a second flock on a new descriptor would wait for the
    /// first forever, so taking it twice is a test bug, reported as a panic rather than a hung suite.
    static HOLDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Drop for LiveLock {
    fn drop(&mut self) {
        HOLDING.with(|h| h.set(false));
    }
}

/// Takes the machine-wide live-test lock, or returns `None` (after printing why) when this machine cannot
/// run live breakpoint tests at all.
pub fn live() -> Option<LiveLock> {
    if let Some(why) = cannot_run_live() {
        skip(why);
        return None;
    }
    Some(quiet_registers())
}

/// The live tests' lock, taken by a test that arms nothing but whose dry run asks the kernel about a
/// kernel-address breakpoint: while a live test holds every debug register of a CPU, the kernel's answer
/// is "no free register" (ENOSPC, which does not end a dry run) before it ever says whether it takes
/// such a breakpoint, so the dry run's exit code would depend on what ran beside it.
pub fn quiet_registers() -> LiveLock {
    assert!(
        !HOLDING.with(|h| h.replace(true)),
        "this test already holds the live tests' lock: taking it again would wait for itself"
    );
    let f = File::create("/tmp/ksymwatch-live-tests.lock").expect("create lock file");
    // SAFETY: flock on a descriptor we own; blocks until the lock is free.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock: {}", std::io::Error::last_os_error());
    LiveLock(f)
}

/// [`live`] for a test whose subject is a kernel address: it also skips, with [`kernel_breakpoints`]'s
/// reason, on a machine that refuses hardware breakpoints on kernel addresses.
pub fn live_kernel() -> Option<LiveLock> {
    let lock = live()?;
    match kernel_breakpoints() {
        Ok(()) => Some(lock),
        Err(why) => {
            skip(why);
            None
        }
    }
}

/// For a test that checks most of its subject without arming a kernel address and arms one only at the
/// end: `true` (after a SKIP line naming [`kernel_breakpoints`]'s reason and `what` was not checked) on a
/// machine that refuses kernel-address breakpoints, so the test returns before that part.
pub fn kernel_part_skipped(what: &str) -> bool {
    match kernel_breakpoints() {
        Ok(()) => false,
        Err(why) => {
            skip(format_args!("{what} not checked: {why}"));
            true
        }
    }
}

/// The one probe every test asks before it arms a kernel address: whether this kernel accepts a hardware
/// breakpoint on one. Machines of this project's kind differ (some refuse kernel addresses with EPERM even
/// to root with CAP_SYS_ADMIN, user addresses work on both), so it opens a real one: a disabled write
/// breakpoint on CPU 0 at kallsyms' `__start_init_stack` (or `_text`), closed at once. Decided once per
/// test binary; `Err` holds the reason a skip prints.
pub fn kernel_breakpoints() -> Result<(), String> {
    static ANSWER: OnceLock<Result<(), String>> = OnceLock::new();
    ANSWER.get_or_init(probe_kernel_breakpoint).clone()
}

/// Whether this test process holds CAP_SYS_ADMIN (effective), as the ksymwatch it starts will: what a
/// refused kernel address is called depends on it (`kernel_breakpoints_refused` with it, a kernel's own
/// policy; `needs_cap_sys_admin` without, e.g. the suite run under `capsh --drop=cap_sys_admin`).
pub fn has_cap_sys_admin() -> bool {
    has_cap(21)
}

/// Whether this test process holds capability number `cap` (effective; CAP_SYS_PTRACE is 19).
pub fn has_cap(cap: u32) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << cap) != 0)
}

/// The running kernel's address of `name` in /proc/kallsyms; `None` when it is not there or hidden (0).
pub fn kallsyms_addr(name: &str) -> Option<u64> {
    std::fs::read_to_string("/proc/kallsyms")
        .ok()?
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            let addr = u64::from_str_radix(f.next()?, 16).ok()?;
            let _kind = f.next()?;
            (f.next()? == name).then_some(addr)
        })
        .filter(|&addr| addr != 0)
}

/// Why this kernel refuses this process a breakpoint on `addr`, worded as ksymwatch words it, or `None`
/// when it takes one: the tool's own probe (one disabled breakpoint on the first online CPU, closed).
pub fn kernel_refusal(addr: u64) -> Option<String> {
    ksymwatch::perf::probe::probe(addr, online_cpus()[0])
        .err()
        .map(|e| ksymwatch::perf::refusal::explain(&e, &[]).to_string())
}

/// The exit code of `ksymwatch check` on this machine when every debug register is free: 0 where kernel
/// addresses can be watched, 4 ("user-space watches only") where the kernel refuses them.
pub fn check_code_when_all_free() -> i32 {
    if kernel_breakpoints().is_ok() {
        0
    } else {
        4
    }
}

/// The exit code of `write --dry-run` of a plan with a kernel address on this machine: 0 where the kernel
/// takes breakpoints there, 4 where it refuses them (the dry run asks the kernel and says what the run
/// would be told, with the run's code, its plan printed all the same).
pub fn kernel_dry_run_code() -> i32 {
    check_code_when_all_free()
}

fn probe_kernel_breakpoint() -> Result<(), String> {
    if let Some(why) = cannot_run_live() {
        return Err(why);
    }
    let find = |name: &'static str| kallsyms_addr(name).map(|addr| (name, addr));
    let (name, addr) = find("__start_init_stack")
        .or_else(|| find("_text"))
        .ok_or("kallsyms shows no kernel address (unreadable, or kptr_restrict)")?;
    // The tool's own probe: one disabled pinned write breakpoint, closed at once.
    let Err(refused) = ksymwatch::perf::probe::probe(addr, 0) else {
        return Ok(());
    };
    let err = refused.err;
    Err(match err.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => format!(
            "this kernel refuses hardware breakpoints on kernel addresses (a disabled probe at {name} \
             0x{addr:x} on cpu 0: {err}); user-space watches still work"
        ),
        Some(libc::ENOSPC) => format!(
            "no free debug register on cpu 0 for a kernel-address probe ({err}): something else holds them"
        ),
        _ => format!("a kernel-address breakpoint probe at {name} 0x{addr:x} failed: {err}"),
    })
}

fn cannot_run_live() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("live breakpoint tests need root".into());
    }
    if !Path::new("/sys/bus/event_source/devices/breakpoint").exists() {
        return Some("this kernel has no breakpoint PMU".into());
    }
    None
}

/// Peak resident memory of a live process (VmHWM), in KiB.
pub fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// A C helper from tests/helpers, compiled once per test binary.
pub fn helper(name: &str) -> PathBuf {
    helper_with(name, &[])
}

thread_local! {
    /// Whether a helper this thread's test started ended by SIGTRAP ([`note_helper_end`]). Each
    /// [`Writer`] holds its starter's flag, so a helper a test hands to another thread (to drive two at
    /// once) sets its test's flag wherever it ends.
    static HELPER_TRAPPED: Arc<AtomicBool> = Arc::new(AtomicBool::new(false));
}

/// Notes how a watched helper ended in `trapped` (its test's flag): one killed by SIGTRAP was hit by the
/// machine's debug exception with an empty DR6 (docs/machine.md, "A watched process killed by SIGTRAP":
/// about one trapped store in 1 to 4 million here, with or without ksymwatch), which
/// [`again_if_a_helper_was_trapped`] answers.
pub fn note_helper_end(trapped: &AtomicBool, status: ExitStatus) {
    use std::os::unix::process::ExitStatusExt;
    if status.signal() == Some(libc::SIGTRAP) {
        trapped.store(true, Ordering::Relaxed);
    }
}

/// What follows every run of ksymwatch `args` that a runner here ran to its end, handing back what it
/// `ran` (exit code, stdout, stderr): one that launched its command (`-- CMD`) and ended with that
/// command's status 128 + SIGTRAP (the launched command was the watched helper the machine killed,
/// [`note_helper_end`]) is noted in this thread's test's flag.
fn finished(args: &[&str], ran: (i32, String, String)) -> (i32, String, String) {
    if ran.0 == 128 + libc::SIGTRAP && args.contains(&"--") {
        HELPER_TRAPPED.with(|t| t.store(true, Ordering::Relaxed));
    }
    ran
}

/// The (exit code, stdout, stderr) of a command that ran to its end; -1 for a signal.
fn outcome(out: std::process::Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs a live test's body; if it fails after a helper it watched was killed by SIGTRAP (a machine fault
/// the tool cannot prevent or survive for the helper), says so in a `RETRY: <test>: <why>` line past
/// libtest's capture (counted by `scripts/test`) and runs the body once more, whose result stands. Any
/// other failure stands at once.
pub fn again_if_a_helper_was_trapped(body: impl Fn()) {
    again_if_trapped(body, |line| {
        let _ = std::io::stderr().write_all(line.as_bytes());
    });
}

/// [`again_if_a_helper_was_trapped`], saying its `RETRY` line through `say`.
fn again_if_trapped(body: impl Fn(), say: impl FnOnce(&str)) {
    let trapped = HELPER_TRAPPED.with(Arc::clone);
    trapped.store(false, Ordering::Relaxed);
    let Err(first) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&body)) else {
        return;
    };
    if !trapped.swap(false, Ordering::Relaxed) {
        std::panic::resume_unwind(first);
    }
    let why = first
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| first.downcast_ref::<&str>().copied())
        .unwrap_or("a panic")
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("<unnamed test>");
    let line = format!(
        "RETRY: {test}: a watched helper was killed by SIGTRAP (the machine's empty-DR6 debug exception, \
         docs/machine.md) and the test failed ({why}); run once more\n"
    );
    say(&line);
    body();
}

/// gcc flags a helper needs beyond `-O1 -fno-omit-frame-pointer`.
fn helper_flags(name: &str) -> &'static [&'static str] {
    match name {
        "threads" => &["-pthread"],
        _ => &[],
    }
}

/// Like [`helper`], built with `extra` gcc flags as well (e.g. `-no-pie`); each set of flags gets its own
/// binary, named after the helper and the flags.
pub fn helper_with(name: &str, extra: &[&str]) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let dir = DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("ksymwatch-helpers-{}", std::process::id()));
        // A run before this one that had the same pid left its builds here, maybe of older sources:
        // they are this run's to build afresh.
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("helper dir");
        d
    });
    let mut file = name.to_string();
    for flag in extra {
        file.push_str(flag);
    }
    let out = dir.join(file);
    // One build at a time: a test must not run a binary another test's gcc is still writing.
    let _build = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if !out.exists() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/helpers")
            .join(format!("{name}.c"));
        let status = Command::new("gcc")
            .args(["-O1", "-fno-omit-frame-pointer"])
            .args(helper_flags(name))
            .args(extra)
            .arg("-o")
            .arg(&out)
            .arg(&src)
            .status()
            .expect("gcc must be installed to build the live-test helpers");
        assert!(status.success(), "building {}", src.display());
    }
    out
}

pub fn online_cpus() -> Vec<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").expect("online cpus");
    let mut v = Vec::new();
    for part in text.trim().split(',') {
        match part.split_once('-') {
            Some((a, b)) => v.extend(a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap()),
            None => v.push(part.parse().unwrap()),
        }
    }
    v
}

/// The writer helper, started and waiting for "go".
pub struct Writer {
    pub child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    pub addr: u64,
    /// The banner's `addr2=`, for helpers with a second global (threads).
    pub addr2: Option<u64>,
    pub pid: u32,
    pub tid: u32,
    /// The flag of the test that started it ([`note_helper_end`]).
    trapped: Arc<AtomicBool>,
}

impl Writer {
    pub fn start(args: &[&str]) -> Writer {
        Writer::spawn(Command::new(helper("writer")).args(args))
    }

    /// Like [`Writer::start`] with address-space randomization off (`setarch -R`): every helper started
    /// this way has its global at the same address, so one system-wide watch sees them all.
    pub fn start_fixed(args: &[&str]) -> Writer {
        Writer::spawn(
            Command::new("setarch")
                .arg("-R")
                .arg(helper("writer"))
                .args(args),
        )
    }

    /// A user-space stand-in for a kernel variable that is always being written (what tests whose
    /// subject is not a kernel address watch, on every kind of machine): the helper storing into its
    /// global every ~200 us, pinned to `cpu`, already going. Watch [`Writer::target`] system-wide.
    pub fn spinning(cpu: u32) -> Writer {
        let mut w = Writer::start(&["spin", &cpu.to_string()]);
        w.send("go");
        w
    }

    /// The helper's global as an 8-byte TARGET (`0xADDR/8`).
    pub fn target(&self) -> String {
        format!("0x{:x}/8", self.addr)
    }

    /// Like [`Writer::start`] with the helper's binary at `path` (a copy the test prepared).
    pub fn start_binary(path: &Path, args: &[&str]) -> Writer {
        Writer::spawn(Command::new(path).args(args))
    }

    /// The `threads` helper started with `args`, past its `ready` line (its threads exist and wait).
    pub fn threads(args: &[&str]) -> Writer {
        Writer::start_binary(&helper("threads"), args).ready()
    }

    /// Reads through the helper's `ready` line.
    pub fn ready(mut self) -> Writer {
        self.read_until("ready");
        self
    }

    /// `ksymwatch write --json --no-status -o STREAM WATCH... -- BIN ARGS...`: ksymwatch launching the
    /// helper `bin`, whose banner and lines come through ksymwatch's stdout while the records go to `stream`.
    pub fn launched(stream: &Path, watch: &[&str], bin: &Path, args: &[&str]) -> Writer {
        let stream = stream.to_str().expect("utf-8 path");
        let bin = bin.to_str().expect("utf-8 path");
        let mut all = vec!["write", "--json", "--no-status", "-o", stream];
        all.extend_from_slice(watch);
        all.extend(["--", bin]);
        all.extend_from_slice(args);
        Writer::start_binary(Path::new(BIN), &all)
    }

    fn spawn(cmd: &mut Command) -> Writer {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        // A binary the test just wrote can be briefly "busy": another test thread's fork, between its
        // fork and exec, holds a copy of the descriptor the file was written through (ETXTBSY).
        let mut tries = 0;
        let mut child = loop {
            match cmd.spawn() {
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                other => break other.expect("start writer"),
            }
        };
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("writer banner");
        let field = |k: &str| -> String {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .unwrap_or_else(|| panic!("no {k} in {line:?}"))
                .to_string()
        };
        let addr = u64::from_str_radix(field("addr=").trim_start_matches("0x"), 16).unwrap();
        let addr2 = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("addr2=0x"))
            .and_then(|a| u64::from_str_radix(a, 16).ok());
        let pid = field("pid=").parse().unwrap();
        let tid = field("tid=").parse().unwrap();
        Writer {
            child,
            stdin,
            stdout,
            addr,
            addr2,
            pid,
            tid,
            trapped: HELPER_TRAPPED.with(Arc::clone),
        }
    }

    /// Tells the helper to do its work and waits until it reports done; returns lines it printed on the way.
    pub fn go(&mut self) -> Vec<String> {
        self.send("go");
        self.read_until("done")
    }

    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Reads lines up to `want`; returns the lines before it.
    pub fn read_until(&mut self, want: &str) -> Vec<String> {
        let mut lines = self.read_through(want, |l| l == want);
        lines.pop();
        lines
    }

    /// Like [`Writer::read_until`] for a line starting with `prefix`; returns every line read, that one last.
    pub fn read_until_prefix(&mut self, prefix: &str) -> Vec<String> {
        self.read_through(prefix, |l| l.starts_with(prefix))
    }

    fn read_through(&mut self, what: &str, last: impl Fn(&str) -> bool) -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).unwrap();
            if n == 0 {
                // How it ended says who ended it (a signal: which one).
                let status = wait_within(&mut self.child, Duration::from_secs(5));
                note_helper_end(&self.trapped, status);
                panic!("helper exited before `{what}` ({status}); got {lines:?}");
            }
            let line = line.trim_end().to_string();
            let done = last(&line);
            lines.push(line);
            if done {
                return lines;
            }
        }
    }

    pub fn finish(mut self) {
        self.stdin.take();
        if let Ok(status) = self.child.wait() {
            note_helper_end(&self.trapped, status);
        }
    }

    /// Closes the helper's stdin (it exits on EOF) and waits for its process, bounded: the exit status of
    /// what was started (ksymwatch itself, when it launched the helper with `-- CMD`).
    pub fn close_and_wait(mut self, limit: Duration) -> ExitStatus {
        self.stdin.take();
        wait_within(&mut self.child, limit)
    }

    /// The `threads` helper in `churn` mode: lets its chains of threads store into the watch for 300 ms,
    /// stops them and waits for the helper's exit; returns the stores it counted.
    pub fn churn_stores<T: std::str::FromStr>(mut self) -> T {
        self.send("go");
        std::thread::sleep(Duration::from_millis(300));
        self.send("stop");
        let lines = self.read_until("done");
        self.finish();
        helper_number(&lines, "stores=")
    }

    /// [`Writer::go`], then [`Writer::finish`]: the helper did all its work and exited. Returns its tid.
    pub fn go_and_finish(mut self) -> u32 {
        self.go();
        let tid = self.tid;
        self.finish();
        tid
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stdin.take();
        // One that already ended says how; killing it then changes nothing.
        if let Ok(Some(status)) = self.child.try_wait() {
            note_helper_end(&self.trapped, status);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One hit line of the ftrace-style output, with its chain.
#[derive(Debug, Clone)]
pub struct HitLine {
    pub comm: String,
    pub tid: u32,
    pub cpu: u32,
    pub time: String,
    pub target: String,
    pub access: String,
    pub ip: String,
    /// A process watch's ` value=0x...` (or `?`) at the end of the line, without `value=`.
    pub value: Option<String>,
    pub chain: Vec<String>,
}

/// The kernel frames of a hit's chain: those before its first frame with a `[...]` suffix (a user frame's
/// `[binary]` or `[comm]`; a module's kernel frame has one too, so this is for chains through vmlinux
/// only, as a `read()` from /dev/zero is). A kernel write into user memory has both, kernel first.
pub fn kernel_frames(chain: &[String]) -> &[String] {
    let user = chain
        .iter()
        .position(|f| f.ends_with(']'))
        .unwrap_or(chain.len());
    &chain[..user]
}

/// Parses `<comm>-<tid> [<cpu>] <time>: <target> <W|RW> ip=<...>[ value=<...>]` lines and their ` => `
/// frames.
pub fn parse_hits(out: &str) -> Vec<HitLine> {
    let mut hits: Vec<HitLine> = Vec::new();
    for line in out.lines() {
        if let Some(frame) = line.strip_prefix(" => ") {
            hits.last_mut()
                .expect("frame before any hit")
                .chain
                .push(frame.to_string());
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let open = line
            .find(" [")
            .unwrap_or_else(|| panic!("not a hit line: {line:?}"));
        let (who, rest) = line.split_at(open);
        let (comm, tid) = who.trim().rsplit_once('-').expect("comm-tid");
        let close = rest.find("] ").expect("cpu column");
        let cpu = rest[2..close].parse().expect("cpu number");
        let rest = &rest[close + 2..];
        let (time, rest) = rest.trim_start().split_once(": ").expect("timestamp");
        let mut parts = rest.split(' ');
        let target = parts.next().expect("target").to_string();
        let access = parts.next().expect("access").to_string();
        let ip = parts
            .next()
            .expect("ip")
            .trim_start_matches("ip=")
            .to_string();
        let value = rest.rsplit_once(" value=").map(|(_, v)| v.to_string());
        hits.push(HitLine {
            comm: comm.to_string(),
            tid: tid.parse().expect("tid"),
            cpu,
            time: time.to_string(),
            target,
            access,
            ip,
            value,
            chain: Vec::new(),
        });
    }
    hits
}

/// A running ksymwatch whose stdout we have read up to and including `# armed`.
pub struct Tracer {
    pub child: Child,
    pub header: String,
    stdout: Option<BufReader<ChildStdout>>,
}

impl Tracer {
    /// Starts ksymwatch with `args` and waits for its `# armed` line (panics with its stderr if it exits first).
    pub fn start(args: &[&str]) -> Tracer {
        Tracer::start_until(args, |l| l.starts_with("# armed"))
    }

    /// Like [`Tracer::start`] for `--json`: waits for the `armed` record.
    pub fn start_json(args: &[&str]) -> Tracer {
        Tracer::start_until(args, |l| l.contains("\"type\":\"armed\""))
    }

    /// `ksymwatch write --json --no-status ARGS`, started as [`Tracer::start_json`] does.
    pub fn write_json(args: &[&str]) -> Tracer {
        Tracer::write_json_with(&[], args)
    }

    /// Like [`Tracer::start`] for `--quiet`, which says `ksymwatch: armed ...` on stderr: the line is read
    /// a byte at a time, so the rest of stderr stays the child's for [`Tracer::wait`].
    pub fn start_quiet(args: &[&str]) -> Tracer {
        let mut child = spawn(args);
        let mut stderr = child.stderr.take().expect("stderr");
        let mut header = String::new();
        while !header.starts_with("ksymwatch: armed ") {
            header.clear();
            let mut byte = [0u8];
            loop {
                if stderr.read(&mut byte).expect("ksymwatch's stderr") == 0 {
                    let status = child.wait().expect("wait");
                    panic!("ksymwatch {args:?} exited ({status}) before it armed: {header}");
                }
                header.push(char::from(byte[0]));
                if byte[0] == b'\n' {
                    break;
                }
            }
        }
        child.stderr = Some(stderr);
        let stdout = child.stdout.take().map(BufReader::new);
        Tracer {
            child,
            header,
            stdout,
        }
    }

    /// Like [`Tracer::start`] for `--format otlp-json`: waits for the line with the `ksymwatch.armed` event.
    pub fn start_otlp(args: &[&str]) -> Tracer {
        Tracer::start_until(args, |l| l.contains("\"eventName\":\"ksymwatch.armed\""))
    }

    /// Like [`Tracer::start`], run through `prefix` (e.g. [`without_tracefs`]'s).
    pub fn start_with(prefix: &[String], args: &[&str]) -> Tracer {
        Tracer::start_child(spawn_with(prefix, args), args, |l| l.starts_with("# armed"))
    }

    /// [`Tracer::write_json`] run through `prefix` (e.g. [`dropping`]'s): capsh execs ksymwatch, so the
    /// child is ksymwatch itself and [`Tracer::signal`] reaches it.
    pub fn write_json_with(prefix: &[String], args: &[&str]) -> Tracer {
        let mut all = vec!["write", "--json", "--no-status"];
        all.extend_from_slice(args);
        Tracer::start_child(spawn_with(prefix, &all), &all, |l| {
            l.contains("\"type\":\"armed\"")
        })
    }

    /// Like [`Tracer::start`] with `env` added to ksymwatch's environment.
    pub fn start_with_env(args: &[&str], env: &[(&str, &Path)]) -> Tracer {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Tracer::start_child(cmd.spawn().expect("start ksymwatch"), args, |l: &str| {
            l.starts_with("# armed")
        })
    }

    fn start_until(args: &[&str], armed: impl Fn(&str) -> bool) -> Tracer {
        Tracer::start_child(spawn(args), args, armed)
    }

    fn start_child(mut child: Child, args: &[&str], armed: impl Fn(&str) -> bool) -> Tracer {
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut header = String::new();
        loop {
            let mut line = String::new();
            let n = stdout.read_line(&mut line).unwrap();
            if n == 0 {
                let mut err = String::new();
                child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                let status = child.wait().unwrap();
                panic!("ksymwatch {args:?} exited ({status}) before `# armed`:\n{header}\nstderr: {err}");
            }
            header.push_str(&line);
            if armed(&line) {
                break;
            }
        }
        Tracer {
            child,
            header,
            stdout: Some(stdout),
        }
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }

    /// Reads the rest of stdout on a thread of its own, as a reader that keeps up does, so that ksymwatch
    /// never waits for room in the pipe; the thread returns all it read once the output ends.
    pub fn keep_reading(&mut self) -> std::thread::JoinHandle<String> {
        let mut stdout = self.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            let mut out = String::new();
            stdout.read_to_string(&mut out).expect("ksymwatch's stdout");
            out
        })
    }

    /// Reads lines until `pred` matches one (or the output ends); returns everything read.
    pub fn read_until(&mut self, pred: impl Fn(&str) -> bool) -> String {
        let mut text = String::new();
        let stdout = self.stdout.as_mut().expect("stdout");
        loop {
            let mut line = String::new();
            if stdout.read_line(&mut line).unwrap() == 0 {
                return text;
            }
            let hit = pred(&line);
            text.push_str(&line);
            if hit {
                return text;
            }
        }
    }

    /// Stops ksymwatch as Ctrl-C does, once what the helper wrote is in the rings (after a tick for the
    /// loop to drain them), and waits for it like [`Tracer::wait`].
    pub fn interrupt(self, limit: Duration) -> (i32, String, String) {
        std::thread::sleep(Duration::from_millis(50));
        self.signal(libc::SIGINT);
        self.wait(limit)
    }

    /// Waits like [`Tracer::wait`] for a `--json` run that must end with exit 0; returns its records
    /// (after the header already read) and stderr.
    pub fn json_records(self, limit: Duration) -> (Vec<serde_json::Value>, String) {
        let (code, out, err) = self.wait(limit);
        assert_eq!(code, 0, "{err}");
        (ndjson(&out), err)
    }

    /// Like [`Tracer::json_records`], with the records already read at the start (header, armed) first:
    /// the whole stream.
    pub fn json_stream(self, limit: Duration) -> (Vec<serde_json::Value>, String) {
        let header = ndjson(&self.header);
        let (rest, err) = self.json_records(limit);
        (header.into_iter().chain(rest).collect(), err)
    }

    /// Like [`Tracer::json_stream`] for a tracer whose output `reader` ([`Tracer::keep_reading`]) took as
    /// it came: the whole stream, once it ended with exit 0 within `limit`, and its stderr.
    pub fn records_read_by(
        self,
        reader: std::thread::JoinHandle<String>,
        limit: Duration,
    ) -> (Vec<serde_json::Value>, String) {
        let header = ndjson(&self.header);
        let (code, _, err) = self.wait(limit);
        assert_eq!(code, 0, "{err}");
        let out = reader.join().expect("the stdout reader");
        (header.into_iter().chain(ndjson(&out)).collect(), err)
    }

    /// Waits for exit (bounded, so a hung tracer fails the test instead of hanging it); returns
    /// (exit code, rest of stdout, stderr). The bound holds whether or not stdout is still ours to read
    /// ([`Tracer::keep_reading`] and [`Tracer::close_stdout`] take it).
    pub fn wait(mut self, limit: Duration) -> (i32, String, String) {
        let pid = self.child.id() as i32;
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let watchdog = std::thread::spawn(move || {
            if done_rx.recv_timeout(limit).is_err() {
                // SAFETY: kill our own hung child (not reaped before the watchdog is joined, so the pid
                // is still its) so the reads below end and the test fails visibly.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        });
        let mut out = String::new();
        if let Some(mut s) = self.stdout.take() {
            s.read_to_string(&mut out).unwrap();
        }
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            e.read_to_string(&mut err).unwrap();
        }
        let _ = done_tx.send(());
        let _ = watchdog.join();
        let status = self.child.wait().unwrap();
        (status.code().unwrap_or(-1), out, err)
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts ksymwatch with `args`, its stdout and stderr piped to us.
pub fn spawn(args: &[&str]) -> Child {
    spawn_with(&[], args)
}

/// Starts ksymwatch with `args` through `prefix` (a command that ends by running its arguments).
pub fn spawn_with(prefix: &[String], args: &[&str]) -> Child {
    let mut cmd = match prefix.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(BIN);
            c
        }
        None => Command::new(BIN),
    };
    cmd.args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ksymwatch")
}

/// A prefix for [`spawn_with`] that runs ksymwatch as on a machine where tracefs is not mounted: in a
/// mount namespace of its own with tracefs unmounted there (the machine's own mounts are untouched), so a
/// test of the no-tracefs path runs whether or not someone mounted tracefs here (exit 97 if tracefs is
/// still there). `None`, after a visible skip, when this user cannot make one (it needs root).
pub fn without_tracefs() -> Option<Vec<String>> {
    let prefix: Vec<String> = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        "umount -l /sys/kernel/tracing 2>/dev/null; umount -l /sys/kernel/debug/tracing 2>/dev/null; \
         [ -d /sys/kernel/tracing/events ] || [ -d /sys/kernel/debug/tracing/events ] && exit 97; \
         exec \"$0\" \"$@\"",
    ]
    .map(String::from)
    .to_vec();
    let works = Command::new(&prefix[0])
        .args(&prefix[1..])
        .arg("true")
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !works {
        skip("cannot unmount tracefs in a mount namespace of our own (unshare needs root)");
        return None;
    }
    Some(prefix)
}

/// [`run_within`] through `prefix`.
pub fn run_with(prefix: &[String], args: &[&str], limit: Duration) -> (i32, String, String) {
    collect(spawn_with(prefix, args), args, limit)
}

/// Waits for `child` to exit, killing it (SIGKILL) once `limit` has passed: a hung ksymwatch then fails
/// its test (no exit code) instead of hanging the suite.
pub fn wait_within(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait for ksymwatch") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A ksymwatch started as a bare [`Child`] that is killed and reaped when dropped: a test that panics
/// halfway leaves no tracer running with its breakpoints armed.
pub struct KillOnDrop(pub Child);

impl std::ops::Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A stream read line by line on a thread of its own, so a test waits for a line within a time limit
/// instead of blocking in `read` on a tracer that hangs.
pub struct Lines(std::sync::mpsc::Receiver<String>);

impl Lines {
    pub fn read(stream: impl Read + Send + 'static) -> Lines {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                if tx.send(line + "\n").is_err() {
                    break;
                }
            }
        });
        Lines(rx)
    }

    /// The lines read until one contains `want` or the stream ends; panics once `limit` has passed
    /// without either.
    pub fn until(&self, want: &str, limit: Duration) -> String {
        self.collect(Some(want), limit)
    }

    /// The rest of the stream, once it ends; panics once `limit` has passed first.
    pub fn rest(&self, limit: Duration) -> String {
        self.collect(None, limit)
    }

    fn collect(&self, want: Option<&str>, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        let mut text = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.0.recv_timeout(left) {
                Ok(line) => {
                    let found = want.is_some_and(|w| line.contains(w));
                    text.push_str(&line);
                    if found {
                        return text;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return text,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    panic!(
                        "the stream did not end (or show {want:?}) within {limit:?}; read:\n{text}"
                    )
                }
            }
        }
    }
}

/// Writes `line` to the `--control` FIFO `fifo` and closes it (a writer that comes and goes, as `echo`
/// does). Opened without blocking: with no tracer holding the FIFO's read end (it died), the open fails
/// (ENXIO) instead of waiting for a reader forever.
pub fn send_control(fifo: &Path, line: &str) {
    use std::os::unix::fs::OpenOptionsExt;
    let mut ctl = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(fifo)
        .expect("open the control FIFO (is the tracer still running?)");
    writeln!(ctl, "{line}").expect("write to the FIFO");
}

/// Like [`run`], bounded by [`wait_within`]: after `limit` ksymwatch is killed and the exit code is -1.
pub fn run_within(args: &[&str], limit: Duration) -> (i32, String, String) {
    collect(spawn(args), args, limit)
}

/// Waits (bounded by [`wait_within`]) for a ksymwatch started with `args`: (exit code, stdout, stderr).
fn collect(mut child: Child, args: &[&str], limit: Duration) -> (i32, String, String) {
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut bytes);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let out = drain(child.stdout.take().map(|s| Box::new(s) as _));
    let err = drain(child.stderr.take().map(|s| Box::new(s) as _));
    let status = wait_within(&mut child, limit);
    finished(
        args,
        (
            status.code().unwrap_or(-1),
            out.join().expect("stdout reader"),
            err.join().expect("stderr reader"),
        ),
    )
}

/// Makes a FIFO at `path` (mode 0600).
pub fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL in path");
    // SAFETY: mkfifo reads a NUL-terminated path that outlives the call.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(
        rc,
        0,
        "mkfifo {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// The uid and gid of `nobody`, a user other than the one running the tests.
pub const NOBODY: u32 = 65534;

/// Gives `path` to [`NOBODY`] without following it if it is a symlink (lchown; needs root).
pub fn give_to_nobody(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL in path");
    // SAFETY: lchown reads a NUL-terminated path that outlives the call.
    let rc = unsafe { libc::lchown(c.as_ptr(), NOBODY, NOBODY) };
    assert_eq!(
        rc,
        0,
        "lchown {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// Runs ksymwatch to completion; returns (exit code, stdout, stderr).
pub fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .output()
        .expect("run ksymwatch");
    finished(args, outcome(out))
}

impl Tracer {
    /// Closes our end of ksymwatch's stdout, as `| head` does when it has read enough.
    pub fn close_stdout(&mut self) {
        self.stdout.take();
    }
}

const CPU1_ONLINE: &str = "/sys/devices/system/cpu/cpu1/online";

/// Sets a CPU's online state through sysfs.
pub fn set_online(cpu: u32, online: bool) {
    let path = format!("/sys/devices/system/cpu/cpu{cpu}/online");
    std::fs::write(&path, if online { "1" } else { "0" })
        .unwrap_or_else(|e| panic!("writing {path}: {e}"));
}

/// Whether this machine lets tests take cpu1 offline; prints why not.
pub fn can_hotplug_cpu1() -> bool {
    let ok = std::fs::OpenOptions::new()
        .write(true)
        .open(CPU1_ONLINE)
        .is_ok();
    if !ok {
        skip(format_args!(
            "{CPU1_ONLINE} is not writable: no CPU hotplug here"
        ));
    }
    ok
}

/// Brings a CPU back online when dropped, on every path out of a test (panics included).
pub struct OnlineGuard(pub u32);

impl Drop for OnlineGuard {
    fn drop(&mut self) {
        let path = format!("/sys/devices/system/cpu/cpu{}/online", self.0);
        if std::fs::read_to_string(&path)
            .map(|s| s.trim() == "0")
            .unwrap_or(false)
        {
            let _ = std::fs::write(&path, "1");
        }
    }
}

/// Number of open descriptors of a process, and how many of them are perf events.
pub fn fd_count(pid: u32) -> (usize, usize) {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return (0, 0);
    };
    let links: Vec<String> = dir
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|l| l.to_string_lossy().into_owned())
        .collect();
    let perf = links
        .iter()
        .filter(|l| l.as_str() == "anon_inode:[perf_event]")
        .count();
    (links.len(), perf)
}

/// The holder helper keeping `held` pinned breakpoints until dropped; it stops asking at the first refusal,
/// so the CPU (or, task-bound, every CPU) is full afterwards even when `held` is less than asked.
pub struct Holder {
    child: Child,
    pub held: u32,
}

impl Holder {
    /// Asks for `k` breakpoints on `cpu`; returns once the helper says how many it got.
    pub fn start(cpu: u32, k: u32) -> Holder {
        Holder::spawn(&cpu.to_string(), k)
    }

    /// Asks for `k` breakpoints bound to the helper's own task (as a debugger's watchpoints are): the
    /// kernel reserves each one's register on every CPU, so `k` = 4 leaves no CPU-bound breakpoint anywhere.
    pub fn start_task(k: u32) -> Holder {
        Holder::spawn("task", k)
    }

    fn spawn(which: &str, k: u32) -> Holder {
        let child = Command::new(helper("holder"))
            .args([which, &k.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("holder");
        // Owned by the guard before anything can panic: a failed test still frees the registers.
        let mut holder = Holder { child, held: 0 };
        let mut line = String::new();
        BufReader::new(holder.child.stdout.as_mut().expect("holder stdout"))
            .read_line(&mut line)
            .expect("holder banner");
        holder.held = line
            .trim()
            .trim_start_matches("held ")
            .parse()
            .unwrap_or_else(|e| panic!("holder banner {line:?}: {e}"));
        holder
    }
}

impl Drop for Holder {
    /// Kills the helper and reaps it: its descriptors, and with them the registers, are released before
    /// `wait` returns.
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How long a rejected run may take before it is killed and its test fails: bad input is refused before
/// anything is armed, in well under a second; a regression that hangs (a FIFO) or reads forever
/// (/dev/zero) fails instead of hanging the suite.
const REJECT_LIMIT: Duration = Duration::from_secs(10);

/// Runs ksymwatch `args`, which must fail with exit `code` and exactly one `ksymwatch: error:` line on
/// stderr (nothing else there, nothing armed), containing every one of `needles`; returns that line.
pub fn rejects(args: &[&str], code: i32, needles: &[&str]) -> String {
    let (got, out, err) = run_within(args, REJECT_LIMIT);
    assert_eq!(
        got, code,
        "{args:?}: expected exit {code}, got {got}; stderr: {err}"
    );
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("ksymwatch: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{args:?}: one error line expected: {err}");
    assert_eq!(
        err.lines().count(),
        1,
        "{args:?}: nothing but the error line: {err}"
    );
    for n in needles {
        assert!(
            errors[0].contains(n),
            "{args:?}: `{n}` missing from: {}",
            errors[0]
        );
    }
    assert!(
        !out.contains("# armed"),
        "{args:?}: nothing may be armed: {out}"
    );
    errors[0].to_string()
}

/// The value of a `key: value` line of `resolve`'s text output.
pub fn field<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("no `{key}:` in {out}"))
        .trim()
}

/// Runs ksymwatch `args` as `nobody`, with no capabilities (setpriv); returns (exit code, stdout, stderr),
/// or `None` after a SKIP line when this test process cannot drop to it (not root, or no setpriv).
/// setpriv's arguments that drop every privilege: user nobody, group nogroup, no capabilities.
pub const AS_NOBODY: [&str; 6] = [
    "--reuid",
    "nobody",
    "--regid",
    "nogroup",
    "--clear-groups",
    "--inh-caps=-all",
];

pub fn run_as_nobody(args: &[&str]) -> Option<(i32, String, String)> {
    run_as_nobody_with(&[], args)
}

/// [`run_as_nobody`] with `caps` (e.g. `["perfmon"]`) kept as ambient capabilities.
pub fn run_as_nobody_with(caps: &[&str], args: &[&str]) -> Option<(i32, String, String)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip("dropping privileges needs root");
        return None;
    }
    if !Path::new("/usr/bin/setpriv").exists() {
        skip("setpriv is not installed");
        return None;
    }
    let keep: Vec<String> = caps.iter().map(|c| format!("+{c}")).collect();
    let keep = keep.join(",");
    let mut cmd = Command::new("setpriv");
    if caps.is_empty() {
        cmd.args(AS_NOBODY);
    } else {
        // Every capability dropped but `caps`, which stay across the exec as ambient ones.
        cmd.args(&AS_NOBODY[..5])
            .arg(format!("--inh-caps=-all,{keep}"))
            .args(["--ambient-caps", &keep]);
    }
    let out = cmd.arg(BIN).args(args).output().expect("run setpriv");
    Some(finished(args, outcome(out)))
}

/// Runs ksymwatch `args` with `input` on its standard input (then closed); returns (exit code, stdout,
/// stderr).
pub fn run_fed(args: &[&str], input: &str) -> (i32, String, String) {
    finished(args, fed(Command::new(BIN).args(args), input))
}

/// Runs `cmd` with `input` on its standard input (then closed): its exit code (-1 for a signal), stdout
/// and stderr.
fn fed(cmd: &mut Command, input: &str) -> (i32, String, String) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the command");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    outcome(child.wait_with_output().expect("wait for the command"))
}

/// The helper storing into its `target_var` once told "go" (`spin 0`), and a JSON tracer watching it
/// under `--last LAST --dump-on signal`.
pub fn dumping_on_signal(last: &str) -> (Writer, Tracer) {
    let h = Writer::start(&["spin", "0"]);
    let pid = h.pid.to_string();
    let t = Tracer::write_json(&[
        "--last",
        last,
        "--dump-on",
        "signal",
        "-p",
        &pid,
        "target_var",
    ]);
    (h, t)
}

/// The helper storing into its `target_var` once told "go" (`spin 0`), and the tracer watching it under
/// `--no-status --last 4 --dump-on tracepoint:GROUP:NAME` with tracefs unmounted (as on a fresh machine:
/// the tracepoint is found in the kernel's BTF). None when the test is skipped (visibly): the kernel's
/// BTF has no such tracepoint, or tracefs cannot be hidden.
pub fn dumping_on_tracepoint(tracepoint: &str) -> Option<(Writer, Tracer)> {
    let name = tracepoint.rsplit(':').next().unwrap_or(tracepoint);
    if btf_tracepoint(name).is_none() {
        skip(format_args!(
            "the kernel's BTF has no {tracepoint} tracepoint (btf_trace_{name})"
        ));
        return None;
    }
    let no_tracefs = without_tracefs()?;
    let h = Writer::start(&["spin", "0"]);
    let pid = h.pid.to_string();
    let trigger = format!("tracepoint:{tracepoint}");
    let t = Tracer::start_with(
        &no_tracefs,
        &[
            "write",
            "--no-status",
            "--last",
            "4",
            "--dump-on",
            &trigger,
            "-p",
            &pid,
            "target_var",
        ],
    );
    Some((h, t))
}

/// `args`, then `-- HELPER HELPER_ARGS`: ksymwatch's arguments launching the helper built at `helper`.
pub fn launching<'a>(args: &[&'a str], helper: &'a Path, helper_args: &[&'a str]) -> Vec<&'a str> {
    let mut all = args.to_vec();
    all.push("--");
    all.push(helper.to_str().expect("utf-8 path"));
    all.extend_from_slice(helper_args);
    all
}

/// `args`, then `--json --no-status --duration 1s --control -`: a one-second JSON run steered by the
/// control commands on its standard input.
pub fn controlled_from_stdin<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut all = args.to_vec();
    all.extend([
        "--json",
        "--no-status",
        "--duration",
        "1s",
        "--control",
        "-",
    ]);
    all
}

/// Whether capsh (libcap2-bin) runs here; the test is skipped, saying so, when it does not.
pub fn capsh() -> bool {
    let ok = Command::new("capsh")
        .arg("--print")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip("capsh is not installed (package libcap2-bin)");
    }
    ok
}

/// Runs ksymwatch with `args` as root with the capabilities `drop` dropped (`capsh --drop=DROP`, e.g.
/// `cap_sys_admin`: gone from the bounding set and every set, the others stay), `stdin` written to its
/// standard input.
pub fn run_dropping(drop: &str, args: &[&str], stdin: &str) -> (i32, String, String) {
    let capsh = dropping(drop);
    let ran = fed(
        Command::new(&capsh[0])
            .args(&capsh[1..])
            .arg(BIN)
            .args(args),
        stdin,
    );
    finished(args, ran)
}

/// A prefix for [`spawn_with`] (and [`Tracer::write_json_with`]) that runs ksymwatch as [`run_dropping`]
/// does: as root with the capabilities `drop` dropped (`capsh --drop=DROP`).
pub fn dropping(drop: &str) -> Vec<String> {
    vec![
        "capsh".to_string(),
        format!("--drop={drop}"),
        "--".to_string(),
        "-c".to_string(),
        "exec \"$0\" \"$@\"".to_string(),
    ]
}

/// NDJSON output, one parsed record per line (a line that is not JSON fails the test, naming it).
pub fn ndjson(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The `hit` records of process `pid`.
pub fn hits_of_pid(records: &[serde_json::Value], pid: u32) -> Vec<&serde_json::Value> {
    records
        .iter()
        .filter(|v| v["type"] == "hit" && v["pid"] == pid)
        .collect()
}

/// The first record of type `kind` (`header`, `armed`, ...) of NDJSON output.
pub fn record<'a>(records: &'a [serde_json::Value], kind: &str) -> &'a serde_json::Value {
    records
        .iter()
        .find(|v| v["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} record in {records:?}"))
}

/// The lines of `out` that are JSON objects, parsed: a stream that shares stdout with other lines (a
/// launched command's own).
pub fn stream_records(out: &str) -> Vec<serde_json::Value> {
    ndjson(
        &out.lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
    )
}

/// The number after `prefix` on the first of a helper's `lines` that starts with it (`done tids=`).
pub fn helper_number<T: std::str::FromStr>(lines: &[String], prefix: &str) -> T {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|k| k.parse().ok())
        .unwrap_or_else(|| panic!("no number after `{prefix}` in {lines:?}"))
}

/// The directory `NAME-PID` under the temporary directory (made if missing), for one test's files.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// The header's `objects` line of an `--on` watch's NDJSON records, asserted to say each of `says`.
pub fn objects_header<'a>(records: &'a [serde_json::Value], says: &[&str]) -> &'a str {
    let header = records[0]["objects"].as_str().unwrap_or_default();
    for s in says {
        assert!(header.contains(s), "{}", records[0]);
    }
    header
}

/// The last `summary` record of NDJSON output.
pub fn summary_record(records: &[serde_json::Value]) -> &serde_json::Value {
    records
        .iter()
        .rev()
        .find(|v| v["type"] == "summary")
        .expect("summary record")
}

/// The sum of the `count`s of a summary record's list `key` (`hits_by_cpu`, `lost_by_cpu`, `by_thread`):
/// what its total must equal.
pub fn counts(summary: &serde_json::Value, key: &str) -> u64 {
    summary[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} list in {summary}"))
        .iter()
        .map(|c| c["count"].as_u64().expect("count"))
        .sum()
}

/// Asserts that the run whose NDJSON `records` these are lost nothing, showing its summary if it did.
pub fn assert_nothing_lost(records: &[serde_json::Value]) {
    let summary = summary_record(records);
    assert_eq!(summary["lost"], 0, "{summary}");
}

/// The running kernel's raw tracepoint `name` as its BTF describes it: what decides whether a tracepoint
/// test can run (tracefs need not be mounted). `None`: no BTF, or no such tracepoint.
pub fn btf_tracepoint(name: &str) -> Option<ksymwatch_symbols::TracepointInfo> {
    let btf = ksymwatch_symbols::Btf::open(Path::new(ksymwatch_symbols::Btf::VMLINUX)).ok()?;
    btf.tracepoint(name).ok().flatten()
}

/// A shell command that execs the `threads` helper (3 threads, no delay), built non-PIE so that its
/// globals have the same address before the exec as after it, and `target_var`'s address in it as `nm`
/// gives it; `None` (skipped visibly) without `nm`.
pub fn execed_threads() -> Option<(String, String)> {
    if !require("nm") {
        return None;
    }
    let bin = helper_with("threads", &["-no-pie"]);
    let nm = Command::new("nm").arg(&bin).output().expect("run nm");
    let addr = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find_map(|l| {
            l.strip_suffix(" B target_var")
                .map(|a| format!("0x{}", a.trim_start_matches('0')))
        })
        .expect("target_var in nm output");
    Some((addr, format!("exec {} threads 3 0", bin.display())))
}

/// Runs `ksymwatch write --json --no-status -o STREAM FLAGS... ADDR -- sh -c SCRIPT` on what
/// [`execed_threads`] gave, lets the helper's threads store, and returns the helper's pid and the stream's
/// records once ksymwatch has ended with 0.
pub fn watch_execed_threads(
    addr: &str,
    script: &str,
    flags: &[&str],
    stream: &Path,
) -> (u32, Vec<serde_json::Value>) {
    let mut args = vec!["write", "--json", "--no-status", "-o"];
    args.push(stream.to_str().expect("utf-8 path"));
    args.extend(flags);
    args.extend([addr, "--", "sh", "-c", script]);
    let mut h = Writer::start_binary(Path::new(BIN), &args);
    h.read_until("ready");
    h.send("go");
    h.read_until_prefix("done tids=");
    let pid = h.pid;
    let status = h.close_and_wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{flags:?}");
    let records = ndjson(&std::fs::read_to_string(stream).expect("stream file"));
    (pid, records)
}

/// A run that launched its command and ended with 128 + SIGTRAP marks its test for the retry; another
/// end does not.
#[test]
fn a_launched_command_killed_by_sigtrap_marks_its_test() {
    let flag = HELPER_TRAPPED.with(Arc::clone);
    flag.store(false, Ordering::Relaxed);
    let ended = |code| (code, String::new(), String::new());
    finished(&["write", "-p", "1", "v"], ended(128 + libc::SIGTRAP));
    assert!(!flag.load(Ordering::Relaxed), "no command was launched");
    finished(&["write", "v", "--", "cmd"], ended(1));
    assert!(!flag.load(Ordering::Relaxed), "the command exited");
    finished(&["write", "v", "--", "cmd"], ended(128 + libc::SIGTRAP));
    assert!(flag.swap(false, Ordering::Relaxed));
}

/// A body that fails after a helper died of SIGTRAP runs once more (and its second result stands); one
/// that fails otherwise fails at once, run once.
#[test]
fn a_body_that_failed_after_a_trapped_helper_runs_once_more() {
    let trapped = || {
        let status = Command::new("sh")
            .args(["-c", "kill -TRAP $$"])
            .status()
            .expect("sh runs");
        // Ended on another thread, as a helper a test drives from a thread of its own.
        let flag = HELPER_TRAPPED.with(Arc::clone);
        std::thread::spawn(move || note_helper_end(&flag, status))
            .join()
            .expect("the noting thread");
    };
    let runs = std::cell::Cell::new(0);
    let said = std::cell::RefCell::new(String::new());
    again_if_trapped(
        || {
            runs.set(runs.get() + 1);
            if runs.get() == 1 {
                trapped();
                panic!("the helper died");
            }
        },
        |line| said.borrow_mut().push_str(line),
    );
    assert_eq!(runs.get(), 2);
    let said = said.into_inner();
    assert!(said.starts_with("RETRY: util::"), "{said}");
    assert!(said.contains("(the helper died)"), "{said}");
    let runs = std::cell::Cell::new(0);
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        again_if_trapped(
            || {
                runs.set(runs.get() + 1);
                panic!("a plain failure");
            },
            |line| panic!("no retry: {line}"),
        )
    }));
    assert!(failed.is_err());
    assert_eq!(runs.get(), 1);
}

/// A tracer that does not end is killed at the limit of its wait, also once its stdout was taken (as
/// [`Tracer::keep_reading`] takes it): the test fails instead of hanging the suite.
#[test]
fn a_hung_tracer_whose_stdout_was_taken_is_killed_at_the_limit() {
    let mut child = Command::new("sleep")
        .arg("60")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sleep runs");
    let stdout = child.stdout.take();
    let t = Tracer {
        child,
        header: String::new(),
        stdout: None,
    };
    let started = Instant::now();
    let (code, _, _) = t.wait(Duration::from_millis(200));
    assert_eq!(code, -1, "killed");
    assert!(started.elapsed() < Duration::from_secs(30));
    drop(stdout);
}
