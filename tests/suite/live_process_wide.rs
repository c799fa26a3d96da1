//! Process watches on the hit path (the default where BPF loads): one breakpoint per CPU, the process
//! chosen in the kernel. Every thread of a 10,000-thread process exactly once; threads created and ended
//! while the watch is being armed and afterwards, each exactly once, with the process named twice; another
//! process storing to the same virtual address dropped in the kernel and counted, never shown; a process
//! given a watched process's pid, during the run or before it was armed, never followed.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::{self, helper, helper_with, Tracer, Writer};

/// The helper's own stores into the watch, by tid: (the kernel's writes, exec zeroing .bss, have kernel
/// ips).
fn stores_by_tid(records: &[Value], pid: u32) -> BTreeMap<u64, usize> {
    let mut by_tid = BTreeMap::new();
    for v in util::hits_of_pid(records, pid)
        .into_iter()
        .filter(|v| v["ip"]["sym"] == "ksw_thread_store")
    {
        *by_tid.entry(v["tid"].as_u64().expect("tid")).or_default() += 1;
    }
    by_tid
}

// 10,000 threads, each storing once after the watch is armed: 10,000 hits from 10,000 tids, nothing
// lost, nothing foreign, with 2 events per CPU-and-target (not one per thread) armed.
live_test!(ten_thousand_threads_each_store_exactly_once, {
    let mut h = Writer::threads(&["threads", "10000", "0"]);
    let pid = h.pid;
    let t = Tracer::write_json(&[
        // 10,000 hits in a fraction of a second, with the tracer sharing 2 CPUs with 10,000 writers: a
        // ring per CPU that holds them all (each hit record is ~360 bytes), so "exactly once" is testable.
        "--buffer-pages",
        "4096",
        "-p",
        &pid.to_string(),
        "target_var",
    ]);
    let header = util::ndjson(&t.header);
    let head = util::record(&header, "header");
    assert_eq!(head["threads"], 10001, "{head}");
    let armed = util::record(&header, "armed");
    assert_eq!(
        armed["events"].as_u64(),
        Some(util::online_cpus().len() as u64),
        "one breakpoint per CPU, not per thread: {armed}"
    );
    h.send("go");
    let lines = h.read_until_prefix("done tids=");
    h.finish();
    let (records, _) = t.json_records(Duration::from_secs(60));
    let by_tid = stores_by_tid(&records, pid);
    assert_eq!(
        by_tid.len(),
        10000,
        "distinct storing tids ({lines:?}); {}",
        util::summary_record(&records)
    );
    assert!(by_tid.values().all(|&n| n == 1), "a thread reported twice");
    assert!(records
        .iter()
        .all(|v| v["type"] != "hit" || v["pid"] == pid));
    assert!(
        records
            .iter()
            .all(|v| v["type"] != "hit" || v["comm"] == "threads"),
        "every writer named by the kernel"
    );
    util::assert_nothing_lost(&records);
});

// Chains of threads that each store once and create the next, running while the watch is armed (storing
// elsewhere until "go") and after it (into the watch): every store after "go" is one hit from its own tid,
// none twice, though the process is named twice (`-p P -p P`).
live_test!(threads_born_during_and_after_arming_are_each_seen_once, {
    let h = Writer::threads(&["churn", "4"]);
    let pid = h.pid.to_string();
    let t = Tracer::write_json(&[
        "--buffer-pages",
        "4096",
        "-p",
        &pid,
        "-p",
        &pid,
        "target_var",
    ]);
    let stores = h.churn_stores::<usize>();
    let (records, _) = t.json_records(Duration::from_secs(60));
    let by_tid = stores_by_tid(&records, h_pid(&pid));
    assert!(stores > 100, "the helper churned: {stores} stores");
    util::assert_nothing_lost(&records);
    assert_eq!(by_tid.values().sum::<usize>(), stores, "one hit per store");
    assert_eq!(
        by_tid.len(),
        stores,
        "each store by its own thread, seen once"
    );
});

fn h_pid(pid: &str) -> u32 {
    pid.parse().expect("pid")
}

// Two runs of one non-PIE program have the watched global at the same address: watching one, the other's
// stores trap too, are dropped in the kernel, and are counted as filtered, never shown.
live_test!(
    another_process_at_the_same_address_is_dropped_and_counted,
    {
        let bin = helper_with("threads", &["-no-pie"]);
        let mut watched = Writer::start_binary(&bin, &["threads", "3", "0"]);
        let mut other = Writer::start_binary(&bin, &["threads", "5", "0"]);
        assert_eq!(
            watched.addr, other.addr,
            "a non-PIE global is at one address"
        );
        watched.read_until("ready");
        other.read_until("ready");
        let pid = watched.pid;
        let t = Tracer::write_json(&["-p", &pid.to_string(), "target_var"]);
        other.send("go");
        other.read_until_prefix("done tids=");
        watched.send("go");
        watched.read_until_prefix("done tids=");
        other.finish();
        watched.finish();
        let (code, out, err) = t.wait(Duration::from_secs(30));
        assert_eq!(code, 0, "{err}");
        let records = util::ndjson(&out);
        assert_eq!(
            stores_by_tid(&records, pid).len(),
            3,
            "the watched process's 3 stores"
        );
        let foreign: Vec<&Value> = records
            .iter()
            .filter(|v| v["type"] == "hit" && v["pid"] != pid)
            .collect();
        assert!(
            foreign.is_empty(),
            "another process's hits shown: {foreign:?}"
        );
        let s = util::summary_record(&records);
        assert!(
            s["filtered"].as_u64().is_some_and(|f| f >= 5),
            "the other process's 5 stores counted as filtered: {s}"
        );
        assert!(
            s["filtered_other_process"].as_u64().is_some_and(|f| f >= 5),
            "and said to be another process's: {s}"
        );
    }
);

// Launch mode follows the command's children, as `perf record -- CMD` does: each child the command forks
// is added to the watched processes in the kernel before it runs, so its store is seen, named by its own
// pid.
live_test!(launch_mode_follows_the_commands_children, {
    let dir = util::temp_dir("ksw-forks");
    let stream = dir.join("stream.ndjson");
    let bin = helper("threads");
    let mut h = Writer::launched(&stream, &["target_var"], &bin, &["forks", "3"]).ready();
    let parent = h.pid;
    h.send("go");
    let lines = h.read_until("done");
    let children: Vec<u32> = lines
        .iter()
        .find_map(|l| l.strip_prefix("children="))
        .expect("children line")
        .split(',')
        .map(|p| p.parse().expect("child pid"))
        .collect();
    let status = h.close_and_wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0));
    let records = util::ndjson(&std::fs::read_to_string(&stream).expect("stream file"));
    for pid in children.iter().chain([&parent]) {
        let by_tid = stores_by_tid(&records, *pid);
        assert_eq!(
            by_tid.values().sum::<usize>(),
            1,
            "one store by process {pid} (parent {parent}, children {children:?})"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
});

// `-p TID` of a thread that is not its process's leader watches the whole process (said on stderr), and
// ends with it.
live_test!(a_non_leader_tid_watches_its_process_and_ends_with_it, {
    let mut h = Writer::threads(&["threads", "3", "0"]);
    let pid = h.pid;
    let tid = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("task dir")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|&t| t != pid)
        .expect("a thread that is not the leader");
    let t = Tracer::write_json(&["-p", &tid.to_string(), "target_var"]);
    h.send("go");
    h.read_until_prefix("done tids=");
    h.finish();
    let (code, out, err) = t.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!("-p {tid} is a thread of process {pid}")),
        "{err}"
    );
    let records = util::ndjson(&out);
    assert_eq!(
        stores_by_tid(&records, pid).len(),
        3,
        "every thread of the process"
    );
    assert_eq!(util::summary_record(&records)["stop"], "exited");
});

// A watched process that execs another program stops being watched there, before the new program runs:
// the program re-exec'd (non-PIE, so the global is at the same address) stores into it again, and that
// store is never a hit. The exec is reported in the stream, and with no watched process left the run ends.
live_test!(an_exec_ends_the_watch_of_that_process_and_is_reported, {
    let mut h = Writer::start_binary(&helper_with("threads", &["-no-pie"]), &["reexec", "7"]);
    h.read_until("ready");
    let pid = h.pid;
    let t = Tracer::write_json(&["-p", &pid.to_string(), "target_var"]);
    h.send("go");
    h.read_until("exec'd");
    // The tracer ends by itself: its only process is no longer watched (it is still running).
    let (code, out, err) = t.wait(Duration::from_secs(30));
    h.finish();
    assert_eq!(code, 0, "{err}");
    let records = util::ndjson(&out);
    let user: Vec<_> = records
        .iter()
        .filter(|v| v["type"] == "hit" && v["ip"]["sym"] == "ksw_thread_store")
        .collect();
    assert_eq!(user.len(), 1, "only the store before the exec: {user:?}");
    assert_eq!(user[0]["value"], "0x7");
    let exec = records
        .iter()
        .position(|v| v["type"] == "process_exec")
        .unwrap_or_else(|| panic!("no process_exec record: {out}"));
    assert_eq!(records[exec]["pid"], pid);
    assert_eq!(records[exec]["comm"], "threads-no-pie");
    assert!(
        records[exec..].iter().all(|v| v["type"] != "hit"),
        "no hit after the exec mark"
    );
    assert_eq!(util::summary_record(&records)["stop"], "exited");
    // Counted with the filtered traps: the ELF loader's writes into the new program's memory.
    assert!(
        util::summary_record(&records)["filtered"].as_u64() >= Some(1),
        "{err}"
    );
});

/// Makes the next process the kernel creates get pid `want`, as root can (`ns_last_pid`), and runs `make`
/// until the process it makes has that pid: another process may fork in between and take it. `make` gives
/// the new process's pid and whether it is to be kept. `None` after 50 tries.
pub(crate) fn with_pid<T>(want: u32, mut make: impl FnMut() -> (u32, T)) -> Option<T> {
    for _ in 0..50 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (want - 1).to_string())
            .expect("write ns_last_pid (root)");
        let (pid, made) = make();
        if pid == want {
            return Some(made);
        }
    }
    None
}

// `-p A -p B`; A exits; an unrelated process then forks a child that gets A's pid (no exec), and later a
// new program is started under it (fork and exec), both storing into the same address (non-PIE): A left
// the kernel's set of watched processes when it ended, so neither is reported (both counted among the
// other processes' traps, dropped in the kernel), and the second's exec is no `process_exec` of A.
live_test!(
    a_pid_reused_after_a_watched_process_exited_is_not_watched,
    {
        let bin = helper_with("threads", &["-no-pie"]);
        let mut a = Writer::start_binary(&bin, &["threads", "2", "0"]);
        let mut b = Writer::start_binary(&bin, &["threads", "3", "0"]);
        let mut forker = Writer::start_binary(&bin, &["forker", "1"]);
        a.read_until("ready");
        b.read_until("ready");
        forker.read_until("ready");
        let (pid_a, pid_b) = (a.pid, b.pid);
        let t = Tracer::write_json(&[
            "-p",
            &pid_a.to_string(),
            "-p",
            &pid_b.to_string(),
            "target_var",
        ]);
        a.send("go");
        a.read_until_prefix("done tids=");
        // A exits and is reaped: its pid is free.
        a.finish();
        // An unwatched process's child under A's pid: it stores its pid and exits.
        let forked = with_pid(pid_a, || {
            forker.send("fork");
            let lines = forker.read_until_prefix("child=");
            let child = util::helper_number(&lines, "child=");
            (child, ())
        });
        // A new program under A's pid: `threads threads 5 0`, started as any command is (fork, exec).
        let started = with_pid(pid_a, || {
            let w = Writer::start_binary(&bin, &["threads", "5", "0"]);
            (w.pid, w)
        });
        let (Some(()), Some(mut reused)) = (forked, started) else {
            util::skip(format!(
                "pid {pid_a} could not be given to a new process (other processes took it first)"
            ));
            return;
        };
        reused.read_until("ready");
        reused.send("go");
        reused.read_until_prefix("done tids=");
        reused.finish();
        forker.finish();
        b.send("go");
        b.read_until_prefix("done tids=");
        b.finish();
        let (records, _) = t.json_stream(Duration::from_secs(30));
        let of_a = util::hits_of_pid(&records, pid_a);
        assert_eq!(
            of_a.len(),
            2,
            "only A's own 2 stores under pid {pid_a}: {of_a:?}"
        );
        assert!(of_a.iter().all(|v| v["ip"]["sym"] == "ksw_thread_store"));
        assert_eq!(stores_by_tid(&records, pid_b).len(), 3, "B's 3 stores");
        let execs: Vec<&Value> = records
            .iter()
            .filter(|v| v["type"] == "process_exec")
            .collect();
        assert!(execs.is_empty(), "no watched process exec'd: {execs:?}");
        let s = util::summary_record(&records);
        assert_eq!(s["stop"], "exited");
        // Decided in the kernel: the forked child's store and the new program's 5 are other processes'.
        assert!(
            s["filtered_other_process"].as_u64().is_some_and(|f| f >= 6),
            "the stores under the reused pid dropped in the kernel: {s}"
        );
    }
);

// Launch mode follows a forked child that then execs a non-PIE program with the global at the same
// address, by the rule the launched process itself follows: the child's store before its exec is its
// hit, its exec is reported (`process_exec` with its pid), and nothing of it after that is a hit (not the
// ELF loader's writes into the new program's memory, not the new program's store); the loader's writes
// are counted as filtered.
live_test!(
    a_followed_child_that_execs_is_reported_and_no_longer_watched,
    {
        let dir = util::temp_dir("ksw-forkexec");
        let stream = dir.join("stream.ndjson");
        let bin = helper_with("threads", &["-no-pie"]);
        let mut h = Writer::launched(&stream, &["target_var"], &bin, &["forkexec", "9"]).ready();
        let parent = h.pid;
        h.send("go");
        let lines = h.read_until("done");
        let child: u32 = util::helper_number(&lines, "child=");
        let status = h.close_and_wait(Duration::from_secs(30));
        assert_eq!(status.code(), Some(0));
        let records = util::ndjson(&std::fs::read_to_string(&stream).expect("stream file"));
        let _ = std::fs::remove_dir_all(&dir);
        let of_child = util::hits_of_pid(&records, child);
        assert_eq!(
            of_child.len(),
            1,
            "the child's one store before its exec, nothing else: {of_child:?}"
        );
        assert_eq!(of_child[0]["ip"]["sym"], "ksw_thread_store");
        assert_eq!(of_child[0]["value"], format!("{child:#x}"));
        let execs: Vec<(usize, &Value)> = records
            .iter()
            .enumerate()
            .filter(|(_, v)| v["type"] == "process_exec")
            .collect();
        assert_eq!(execs.len(), 1, "one exec record: {execs:?}");
        let (at, exec) = execs[0];
        assert_eq!(exec["pid"], child);
        assert!(
            records[at..]
                .iter()
                .all(|v| v["type"] != "hit" || v["pid"] != child),
            "no hit of the child after its exec"
        );
        assert_eq!(
            stores_by_tid(&records, parent).values().sum::<usize>(),
            1,
            "the parent's store: {records:?}"
        );
        let s = util::summary_record(&records);
        assert!(
            s["filtered"].as_u64() >= Some(1),
            "the ELF loader's writes into the exec'd program, filtered: {s}"
        );
    }
);

/// The tracer started with `args` and `extra`, its stderr the full pipe `err`: it waits there at
/// planning, on its first note, until the test reads the pipe (killed if the test ends first).
fn held_at_planning(args: &[&str], extra: &[&str], err: OwnedFd) -> util::KillOnDrop {
    let mut tracer = util::KillOnDrop(
        Command::new(util::BIN)
            .args(args)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .expect("start ksymwatch"),
    );
    assert!(
        writing_stderr(tracer.id()),
        "the tracer never waited on its stderr: {:?}",
        tracer.try_wait()
    );
    tracer
}

/// A pipe whose buffer is full: (its read end, its write end, blocking), so the first write into it waits
/// until the read end is read.
fn full_pipe() -> (File, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills `fds` with two new descriptors, owned here from now on.
    let (read, write) = unsafe {
        assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0, "pipe2");
        (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
    };
    let set_flags = |flags: i32| {
        // SAFETY: fcntl on a descriptor owned here.
        let done = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETFL, flags) };
        assert_eq!(done, 0, "fcntl");
    };
    // Filled without waiting, then made to wait again before it is handed on.
    set_flags(libc::O_NONBLOCK);
    let mut filling = File::from(write.try_clone().expect("dup"));
    while filling.write(&[b'.'; 4096]).is_ok_and(|n| n > 0) {}
    set_flags(0);
    (File::from(read), write)
}

/// Reads the read end of a [`full_pipe`] to its end on a thread of its own: what was written after the
/// dots that filled it.
fn read_after_the_fill(mut read: File) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = read.read_to_end(&mut text);
        String::from_utf8_lossy(&text)
            .trim_start_matches('.')
            .to_string()
    })
}

/// Waits (a minute at most) until process `pid`'s main thread is in a write(2) to its stderr; whether it
/// got there.
fn writing_stderr(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        // x86-64's write is system call 1; its first argument the descriptor.
        let call = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
        if call.starts_with("1 0x2 ") {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

// `-p A`, and A exits between the tracer's planning and its arming, leaving its pid to a new program
// (`reused`) or to no one (the tracer held there: its stderr is a full pipe when it says its planning's
// note, `--comm` matching no thread now). The newcomer is not followed: the run ends as it begins, as for
// a watched process gone before the run (`stopped: watched process exited`, exit 0), with the newcomer
// still running and nothing of it reported. The same on the per-thread path (`extra`), which arms no
// breakpoint then. No race: the tracer waits for the pipe, read only once the pid is the newcomer's (or a
// visible skip when other processes keep taking the pid first).
fn a_pid_gone_before_arming(reused: bool, extra: &[&str]) {
    let bin = helper_with("threads", &["-no-pie"]);
    let a = Writer::start_binary(&bin, &["threads", "2", "0"]).ready();
    let pid_a = a.pid;
    let (err_read, err_write) = full_pipe();
    // Planning reads A's start time; its note then waits for room in the pipe.
    let pid = pid_a.to_string();
    let args = [
        "write",
        "--json",
        "--no-status",
        "-p",
        &pid,
        "--comm",
        "nosuch",
        "target_var",
    ];
    let mut tracer = held_at_planning(&args, extra, err_write);
    // A exits and is reaped: its pid goes to a new program, started as any command is.
    assert!(a.close_and_wait(Duration::from_secs(10)).success());
    let newcomer = match reused {
        true => with_pid(pid_a, || {
            let w = Writer::start_binary(&bin, &["threads", "3", "0"]);
            (w.pid, Some(w))
        }),
        false => Some(None),
    };
    let Some(newcomer) = newcomer else {
        util::skip(format!(
            "pid {pid_a} could not be given to a new process (other processes took it first)"
        ));
        return;
    };
    let mut newcomer = newcomer.map(Writer::ready);
    let err = read_after_the_fill(err_read);
    // Its few lines fit in the stdout pipe: read once it has ended (killed after 30 s, following the
    // newcomer, it fails here).
    let status = util::wait_within(&mut tracer, Duration::from_secs(30));
    let mut out = String::new();
    let mut stdout = tracer.stdout.take().expect("stdout");
    stdout.read_to_string(&mut out).expect("ksymwatch's stdout");
    let err = err.join().expect("stderr reader");
    assert_eq!(status.code(), Some(0), "{out}\n{err}");
    let records = util::ndjson(&out);
    assert_eq!(
        util::summary_record(&records)["stop"],
        "exited",
        "{out}\n{err}"
    );
    assert!(util::hits_of_pid(&records, pid_a).is_empty(), "{out}");
    let armed = records
        .iter()
        .find(|v| v["type"] == "armed")
        .unwrap_or_else(|| panic!("it began as any run does: {out}"));
    if extra.contains(&"--per-thread") {
        assert_eq!(
            armed["events"], 0,
            "no thread to arm, no breakpoint held: {out}"
        );
    }
    if let Some(newcomer) = newcomer.as_mut() {
        assert!(
            newcomer.child.try_wait().expect("wait").is_none(),
            "the run ended on its own, the newcomer still running"
        );
        newcomer.send("go");
        newcomer.read_until_prefix("done tids=");
    }
    if let Some(newcomer) = newcomer {
        newcomer.finish();
    }
}

live_test!(a_pid_reused_before_arming_is_not_followed, {
    a_pid_gone_before_arming(true, &[]);
});

live_test!(a_pid_reused_before_arming_per_thread_is_not_followed, {
    a_pid_gone_before_arming(true, &["--per-thread"]);
});

live_test!(a_pid_exited_before_arming_per_thread_ends_the_run, {
    a_pid_gone_before_arming(false, &["--per-thread"]);
});

// `-p A -p B --count 3`, and A exits between the tracer's planning and its arming (the tracer held there
// as in the test above: its stderr a full pipe when it says its planning's note, here that `-p` named one
// of B's threads). A new program is then given A's pid, before the tracer arms (`newcomer_first`) or
// after, and stores 5 times. It is not A: none of its stores is a hit, and none takes one of `--count`'s
// 3, which B's 3 stores then fill. (The kernel's program that takes an exiting process out of the watched
// ones ran before A's pid was entered: the pid stayed there, and the newcomer's stores took the count, 0
// hits printed and 3 filtered, or were printed as A's.)
fn a_pid_left_before_arming(newcomer_first: bool, extra: &[&str]) {
    let bin = helper_with("threads", &["-no-pie"]);
    let a = Writer::start_binary(&bin, &["threads", "2", "0"]).ready();
    let mut b = Writer::start_binary(&bin, &["threads", "3", "0"]).ready();
    let (pid_a, pid_b) = (a.pid, b.pid);
    let b_thread = std::fs::read_dir(format!("/proc/{pid_b}/task"))
        .expect("B's threads")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|&tid| tid != pid_b)
        .expect("a thread of B besides its leader");
    let (err_read, err_write) = full_pipe();
    let (pa, pb) = (pid_a.to_string(), b_thread.to_string());
    let args = [
        "write",
        "--json",
        "--no-status",
        "-p",
        &pa,
        "-p",
        &pb,
        "--count",
        "3",
        "target_var",
    ];
    let mut tracer = held_at_planning(&args, extra, err_write);
    assert!(a.close_and_wait(Duration::from_secs(10)).success());
    let newcomer = || {
        with_pid(pid_a, || {
            let w = Writer::start_binary(&bin, &["threads", "5", "0"]);
            (w.pid, w)
        })
    };
    let mut early = newcomer_first.then(newcomer).flatten();
    let err = read_after_the_fill(err_read);
    let stdout = util::Lines::read(tracer.stdout.take().expect("stdout"));
    let mut out = stdout.until("\"type\":\"armed\"", Duration::from_secs(30));
    if !newcomer_first {
        early = newcomer();
    }
    let Some(newcomer) = early else {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(tracer.id() as i32, libc::SIGKILL) };
        let _ = tracer.wait();
        util::skip(format!(
            "pid {pid_a} could not be given to a new process (other processes took it first)"
        ));
        return;
    };
    let mut newcomer = newcomer.ready();
    newcomer.send("go");
    newcomer.read_until_prefix("done tids=");
    b.send("go");
    b.read_until_prefix("done tids=");
    let status = util::wait_within(&mut tracer, Duration::from_secs(10));
    out.push_str(&stdout.rest(Duration::from_secs(10)));
    let err = err.join().expect("stderr reader");
    newcomer.finish();
    b.finish();
    let records = util::ndjson(&out);
    assert!(util::hits_of_pid(&records, pid_a).is_empty(), "{out}");
    assert_eq!(
        stores_by_tid(&records, pid_b).values().sum::<usize>(),
        3,
        "B's 3 stores are the count's 3 hits: {out}\n{err}"
    );
    assert_eq!(status.code(), Some(0), "{out}\n{err}");
    assert_eq!(util::summary_record(&records)["stop"], "count", "{out}");
}

live_test!(a_pid_reused_before_arming_takes_no_count, {
    a_pid_left_before_arming(true, &[]);
});

live_test!(a_pid_left_before_arming_and_reused_after_is_not_watched, {
    a_pid_left_before_arming(false, &[]);
});

live_test!(a_pid_reused_before_arming_per_thread_takes_no_count, {
    a_pid_left_before_arming(true, &["--per-thread"]);
});
