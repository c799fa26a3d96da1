//! The `uprobe` PMU against a running helper (tests/helpers/allocs.c): a probe placed by
//! `ksymwatch_symbols::uprobe` on the helper's own function, and on libc's `malloc` found by name in the
//! helper's maps, must count exactly the calls the helper made, at entry and at return.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use ksymwatch::perf::uprobe::{Pmu, Probe, Scope, Uprobe};
use ksymwatch_symbols::uprobe as place;

use crate::util::{helper_with, live, online_cpus, skip, LiveLock};

/// The helper, built with -pthread (its second thread).
fn allocs_exe() -> std::path::PathBuf {
    helper_with("allocs", &["-pthread"])
}

/// The helper, started and waiting for `go N`; killed when dropped.
struct Allocs {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pid: u32,
}

impl Allocs {
    fn start() -> Allocs {
        let mut child = Command::new(allocs_exe())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the allocs helper");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout
            .read_line(&mut line)
            .expect("the helper's ready line");
        let pid = line
            .strip_prefix("ready ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("the helper said {line:?}"));
        Allocs {
            child,
            stdin,
            stdout,
            pid,
        }
    }

    /// Has the helper call make_widget `n` times, and waits until it says it did.
    fn go(&mut self, n: u32) {
        self.command("go", n);
    }

    /// The same, on the helper's second thread (started before the probes opened).
    fn go_threaded(&mut self, n: u32) {
        self.command("tgo", n);
    }

    fn command(&mut self, verb: &str, n: u32) {
        writeln!(self.stdin, "{verb} {n}").expect("write to the helper");
        self.stdin.flush().expect("flush");
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("the helper's done line");
        assert_eq!(line.trim(), format!("done {n}"));
    }
}

impl Drop for Allocs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The PMU, or `None` after a SKIP line where the kernel has none.
fn pmu() -> Option<Pmu> {
    match Pmu::read() {
        Ok(p) => Some(p),
        Err(e) => {
            skip(e);
            None
        }
    }
}

/// An entry probe seen in `entry_scope` and a return probe seen in `return_scope` on `placed`'s function,
/// both enabled; `None` after a SKIP line where this process may not open uprobe events (Linux 6.18 here
/// refuses the uprobe PMU with EACCES to root without CAP_SYS_ADMIN, CAP_PERFMON or not).
fn entry_and_return(
    pmu: &Pmu,
    placed: &place::Placement,
    entry_scope: &Scope,
    return_scope: &Scope,
) -> Option<(Uprobe, Uprobe)> {
    let open = |probe, scope: &Scope| match Uprobe::open(
        pmu,
        &placed.file,
        placed.func.offset,
        probe,
        scope,
    ) {
        Ok(u) => {
            u.enable().unwrap();
            Some(u)
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            skip(format!(
                "this process may not open uprobe events ({e}): the uprobe PMU wants CAP_SYS_ADMIN \
                 here (CAP_PERFMON was not enough)"
            ));
            None
        }
        Err(e) => panic!("{probe:?} uprobe on {}: {e}", placed.shown),
    };
    let entry = open(Probe::Entry, entry_scope)?;
    Some((entry, open(Probe::Return, return_scope)?))
}

/// The live lock, the PMU and a started helper; `None` after a SKIP line where there is no PMU.
fn probing_the_helper() -> Option<(LiveLock, Pmu, Allocs)> {
    let lock = live()?;
    let pmu = pmu()?;
    Some((lock, pmu, Allocs::start()))
}

/// What `entry` and `ret` count after the helper made `main` calls on its main thread, then `threaded`
/// on its other thread.
fn calls_counted(
    allocs: &mut Allocs,
    (main, threaded): (u32, u32),
    (entry, ret): (&Uprobe, &Uprobe),
) -> (u64, u64) {
    allocs.go(main);
    allocs.go_threaded(threaded);
    (entry.count().unwrap(), ret.count().unwrap())
}

/// Entry and return probes on the helper's own `make_widget`, one seen on every CPU for every process, one
/// for the helper only: each counts exactly the calls made, on its main thread and on the thread that
/// existed before the probes opened, none before the events were enabled.
#[test]
#[ignore = "live: opens uprobe events"]
fn uprobe_and_uretprobe_count_the_helpers_calls() {
    let Some((_lock, pmu, mut allocs)) = probing_the_helper() else {
        return;
    };
    allocs.go(7); // before the probes: not counted
    let exe = allocs_exe();
    let placed = place::place_file(&exe, "make_widget").expect("make_widget in the helper");
    let Some((entry, ret)) = entry_and_return(
        &pmu,
        &placed,
        &Scope::Cpus(online_cpus()),
        &Scope::Process(allocs.pid),
    ) else {
        return;
    };
    let (entries, returns) = calls_counted(&mut allocs, (1000, 234), (&entry, &ret));
    eprintln!(
        "make_widget at {}+0x{:x}: {entries} entries, {returns} returns counted",
        exe.display(),
        placed.func.offset
    );
    assert_eq!((entries, returns), (1234, 1234));
    // Disabled, it counts no more.
    entry.disable().unwrap();
    allocs.go(10);
    assert_eq!(entry.count().unwrap(), 1234);
    assert_eq!(ret.count().unwrap(), 1244);
}

/// `libc:malloc`, found by name in the helper's maps: a probe for the helper alone counts its mallocs on
/// both its threads, which are make_widget's and nothing else's (it writes with raw write(2), not stdio).
#[test]
#[ignore = "live: opens uprobe events"]
fn libc_malloc_found_in_the_helpers_maps_counts_its_mallocs() {
    let Some((_lock, pmu, mut allocs)) = probing_the_helper() else {
        return;
    };
    let placed = place::place(Path::new("/proc"), Some(allocs.pid), "libc", "malloc")
        .expect("libc:malloc in the helper's maps");
    let scope = Scope::Process(allocs.pid);
    let Some((entry, ret)) = entry_and_return(&pmu, &placed, &scope, &scope) else {
        return;
    };
    let (entries, returns) = calls_counted(&mut allocs, (300, 200), (&entry, &ret));
    eprintln!(
        "malloc at {}+0x{:x} ({}): {entries} entries, {returns} returns counted",
        placed.shown, placed.func.offset, placed.func.table
    );
    assert_eq!((entries, returns), (500, 500));
    // A library the helper does not map, and that no library directory holds either, is refused with the
    // way out. (One the directories hold is placed there, for a program that dlopens it later: the
    // objects tests cover that.)
    let e = place::place(
        Path::new("/proc"),
        Some(allocs.pid),
        "libksw-not-installed",
        "SSL_write",
    )
    .unwrap_err();
    assert!(e.to_string().contains("dlopen"), "{e}");
}
