//! Bugs found in landed code, each pinned by the run that showed it: root whose capabilities were dropped
//! told to run as root, `-p` of a zombie, a process whose main thread alone exited, a `--dump-on` before the
//! first hit or without BPF, `--folded` on stdout with `-o FILE`, `rw --if` on a user address (and a
//! `--control` move into it), a launched command's first `rw` values. Subjects are user-space helpers'
//! memory (this kind of machine refuses kernel-address breakpoints); a kernel address appears only where
//! the refusal is the subject.

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::util::{self, Writer, BIN};

/// Whether this test runs as root (the case is root with a capability dropped) and capsh runs here;
/// skipped, saying which, otherwise.
fn root_with_capsh() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        util::skip("not root: the case is root whose capabilities were dropped");
        return false;
    }
    util::capsh()
}

/// Runs ksymwatch with `args` as root with the capabilities `drop` dropped (capsh, e.g. `cap_sys_admin`).
fn dropped(drop: &str, args: &[&str]) -> (i32, String, String) {
    util::run_dropping(drop, args, "")
}

// Root without CAP_SYS_ADMIN is refused a kernel address on every machine (this one refuses it even with
// it): it is told which capability to keep, not to run as root, which it does.
live_test!(root_without_cap_sys_admin_is_told_to_keep_it, {
    if !root_with_capsh() {
        return;
    }
    let addr = util::kallsyms_addr("__start_init_stack").expect("__start_init_stack in kallsyms");
    let target = format!("0x{addr:x}");
    let (code, out, err) = dropped("cap_sys_admin", &["write", &target, "--duration", "1s"]);
    assert_eq!(code, 4, "{err}");
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("kernel addresses need CAP_SYS_ADMIN (CAP_PERFMON is not enough)")
            && err.contains(
                "it runs as root, but without CAP_SYS_ADMIN in its effective capabilities"
            )
            && err.contains("run it with CAP_SYS_ADMIN kept;"),
        "{err}"
    );
    assert!(!err.contains("run as root"), "{err}");
    // A system-wide watch of a user address without CAP_PERFMON either: told to keep CAP_PERFMON.
    let (code, _, err) = dropped(
        "cap_sys_admin,cap_perfmon",
        &["write", "0x400000", "--duration", "1s"],
    );
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("runs as root but without either")
            && err.contains("run it with CAP_PERFMON kept"),
        "{err}"
    );
    assert!(
        !err.contains("sudo") && !err.contains("run as root"),
        "{err}"
    );
});

/// `pid`'s state letter in /proc/PID/status (`Z` for a zombie).
fn state_of(pid: u32) -> Option<char> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("State:"))
        .and_then(|s| s.trim().chars().next())
}

/// Waits (at most 5 s) until /proc shows `pid`'s leader as a zombie.
fn until_zombie(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while state_of(pid) != Some('Z') {
        assert!(Instant::now() < deadline, "{pid} never showed as a zombie");
        std::thread::sleep(Duration::from_millis(10));
    }
}

// `-p` of a zombie (exited, not reaped: here this test's own child, not yet waited for) is refused before
// anything is armed, exit 2, saying what it is and the way out; it used to arm and end at once, exit 0.
live_test!(p_of_a_zombie_is_refused_before_arming, {
    let mut child = Command::new("true").spawn().expect("run true");
    let pid = child.id();
    until_zombie(pid);
    let (code, out, err) = util::run_within(
        &[
            "write",
            "-p",
            &pid.to_string(),
            "0x400000",
            "--duration",
            "2s",
        ],
        Duration::from_secs(20),
    );
    let _ = child.wait();
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.is_empty(), "nothing armed, nothing printed: {out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!("ksymwatch: error: -p {pid}: process {pid} (true) has exited and is not reaped (a zombie"))
            && err.contains("give the pid of a running process")
            && err.contains("`-- CMD`"),
        "{err}"
    );
    assert!(!err.contains("armed"), "{err}");
});

// A process whose main thread exited while another runs shows its leader as `Z` too: it is no zombie, and
// `-p` watches it, by its symbols, its hits' user frames named. Its process-level /proc files (maps, exe,
// root) show nothing then, only a live thread's do: the symbol was "no file mapped (a kernel thread, or a
// process that is exiting)", exit 2, an address's frames were `0x... [leaderless]`, and the per-thread
// path's values `?` (read through the zombie leader's pid).
live_test!(p_of_a_process_whose_leader_exited_is_watched, {
    let bin = util::helper("leaderless");
    let mut child = Command::new(&bin)
        .stdout(std::process::Stdio::piped())
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("start leaderless");
    let mut line = String::new();
    {
        use std::io::BufRead;
        let mut r = std::io::BufReader::new(child.stdout.as_mut().expect("stdout"));
        r.read_line(&mut line).expect("the helper's address line");
    }
    let pid = child.id();
    until_zombie(pid);
    let addr = line.trim().to_string();
    // The per-thread path reads each hit's value at the trap where BPF loads (from the process's memory,
    // through a live thread, on perf samples).
    for (target, extra) in [
        ("leaderless_var", None),
        (addr.as_str(), None),
        ("leaderless_var", Some("--per-thread")),
    ] {
        let pid = pid.to_string();
        let mut args = vec![
            "write",
            "-p",
            &pid,
            target,
            "--count",
            "3",
            "--duration",
            "5s",
        ];
        args.extend(extra);
        let (code, out, err) = util::run_within(&args, Duration::from_secs(30));
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        let hits = util::parse_hits(&out);
        assert_eq!(hits.len(), 3, "{args:?}: {out}{err}");
        assert!(
            out.contains("ip=storer+0x") && out.contains(" => storer+0x"),
            "{args:?}: the user frames are named: {out}"
        );
        assert!(
            out.contains(" value=0x") && !out.contains("value=?"),
            "{args:?}: the values are read: {out}"
        );
    }
    let _ = child.kill();
    let _ = child.wait();
});

// A `--dump-on` tracepoint that fires before the first hit (printk:console, fired by a line to /dev/kmsg
// before the helper stores anything) says that no hit had come yet; it said "the last 0 hits".
live_test!(a_dump_before_the_first_hit_says_no_hit_had_come, {
    let Some((mut h, mut t)) = util::dumping_on_tracepoint("printk:console") else {
        return;
    };
    let mut kmsg = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/kmsg")
        .expect("open /dev/kmsg");
    writeln!(kmsg, "ksymwatch live test: a dump before the first hit").expect("write /dev/kmsg");
    let text = t.read_until(|l| l.starts_with("# dump"));
    let heading = text.lines().last().unwrap_or_default();
    assert!(
        heading.contains(": tracepoint printk:console fired on cpu ")
            && heading.ends_with("; no hit had come yet"),
        "{text}"
    );
    h.send("go");
    std::thread::sleep(Duration::from_millis(200));
    h.send("stop");
    h.read_until("done");
    h.finish();
    let (code, _, err) = t.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
});

// The same before the first hit with SIGUSR1, in JSON: the `dump` record has `hits` 0 and `no_hit_yet`.
live_test!(a_signal_dump_before_the_first_hit_says_so_in_json, {
    let (h, mut t) = util::dumping_on_signal("4");
    t.signal(libc::SIGUSR1);
    let line = t.read_until(|l| l.contains("\"type\":\"dump\""));
    let dump: serde_json::Value = serde_json::from_str(line.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(dump["trigger"], "signal", "{dump}");
    assert_eq!(dump["hits"], 0, "{dump}");
    assert_eq!(dump["no_hit_yet"], true, "{dump}");
    let (code, _, err) = t.interrupt(Duration::from_secs(30));
    h.finish();
    assert_eq!(code, 0, "{err}");
});

/// Waits (at most 20 s) until `path` holds `want`; returns what it holds then.
fn until_file_has(path: &std::path::Path, want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(want) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{} never held {want:?}: {text}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `write -p PID target_var -o FILE --folded --duration DURATION`: the stream to FILE, the stacks to stdout.
fn folded_with_o<'a>(pid: &'a str, file: &'a str, duration: &'a str) -> [&'a str; 9] {
    [
        "write",
        "-p",
        pid,
        "target_var",
        "-o",
        file,
        "--folded",
        "--duration",
        duration,
    ]
}

// `--folded` on stdout with `-o FILE`: the stream goes to FILE (it was an empty file: `--folded` turned
// the stream off wherever it went) and the stacks to stdout.
live_test!(folded_on_stdout_with_o_file_keeps_the_stream_in_the_file, {
    let h = Writer::spinning(0);
    let pid = h.pid.to_string();
    let file = util::temp_dir("ksymwatch-bugs-folded").join("stream.txt");
    let file_arg = file.to_str().expect("utf-8 path");
    let (code, out, err) = util::run_within(
        &folded_with_o(&pid, file_arg, "1s"),
        Duration::from_secs(30),
    );
    h.finish();
    assert_eq!(code, 0, "{err}");
    let stream = std::fs::read_to_string(&file).expect("the stream file");
    assert!(stream.contains("# armed "), "{stream}");
    let hits = util::parse_hits(&stream);
    assert!(!hits.is_empty(), "hits in the file: {stream}");
    let stacks: Vec<&str> = out.lines().collect();
    assert!(
        !stacks.is_empty()
            && stacks
                .iter()
                .all(|l| l.starts_with("writer;") && !l.starts_with('#')),
        "stdout holds the stacks alone: {out}"
    );
});

// With `-o FILE`, `--folded`'s reader on stdout going away ends the run as `| head` ends a streaming one
// ("stopped: output closed", exit 0), instead of holding the breakpoints to the end for a report that
// can no longer be delivered; the file keeps the stream up to then.
live_test!(folded_on_stdout_with_o_file_ends_when_its_reader_goes, {
    let h = Writer::spinning(0);
    let pid = h.pid.to_string();
    let file = util::temp_dir("ksymwatch-bugs-folded-closed").join("stream.txt");
    let file_arg = file.to_str().expect("utf-8 path");
    let mut child = util::spawn(&folded_with_o(&pid, file_arg, "60s"));
    until_file_has(&file, "# armed ");
    let started = Instant::now();
    drop(child.stdout.take());
    let status = util::wait_within(&mut child, Duration::from_secs(20));
    let waited = started.elapsed();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    h.finish();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.contains("stopped: output closed"), "{err}");
    assert!(
        waited < Duration::from_secs(10),
        "ended when stdout's reader went, not at --duration: {waited:?}"
    );
    let stream = std::fs::read_to_string(&file).expect("the stream file");
    assert!(stream.contains("# armed "), "{stream}");
});

// `rw --if` on a user address kept every hit whatever it stored (`--if 'value == 5'` printed all 100 of
// the helper's stores): the kernel cannot read the bytes of such a watch at the trap, and an unknown
// value is never hidden. Refused before anything runs, exit 2; the launched command is never run.
live_test!(if_on_a_read_write_watch_of_a_user_address_is_refused, {
    let writer = util::helper("writer");
    let (code, out, err) = util::run_fed(
        &util::launching(
            &["rw", "target_var", "--if", "value == 5"],
            &writer,
            &["write", "100", "0"],
        ),
        "go\n",
    );
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("`target_var` is a read-write watch of a user address")
            && err.contains("watch it with `write`, or drop --if"),
        "{err}"
    );
    assert!(
        out.is_empty(),
        "the command never ran, nothing armed: {out}"
    );
});

// Launch mode seeds `--value`'s `rw` values as `-p` does: the range as the program starts (read while it
// is stopped at its exec). A load's hit shows the value it read, the one before it: here 0 from .bss,
// though the program then stores 5 and exits at once. It showed 0x5 (memory read when the tracer took the
// hit, after the stores) or null (the process gone), right only when the tracer happened to be quick.
live_test!(a_launched_commands_load_shows_the_value_before_it, {
    let bin = util::helper("loadstore");
    for run in 0..5 {
        let (code, out, err) = util::run_within(
            &[
                "rw",
                "ls_var",
                "--value",
                "--json",
                "--no-status",
                "--",
                bin.to_str().expect("utf-8 path"),
                "3",
            ],
            Duration::from_secs(30),
        );
        assert_eq!(code, 0, "{err}");
        let hits: Vec<serde_json::Value> = util::ndjson(&out)
            .into_iter()
            .filter(|r| r["type"] == "hit" && r["in_kernel"] == false)
            .collect();
        let values: Vec<&str> = hits
            .iter()
            .map(|h| h["value"].as_str().unwrap_or("null"))
            .collect();
        assert_eq!(values, ["0x0", "0x5", "0x5", "0x5"], "run {run}: {out}");
    }
});

// The same through `--control`: a move of an `--if` watch from `w` to `rw` of a user address is refused
// (the move was made, and the filter then kept every hit), and the watch stays where it was.
live_test!(a_control_move_to_rw_under_if_is_refused, {
    let h = Writer::spinning(0);
    let pid = h.pid.to_string();
    let (code, out, err) = util::run_fed(
        &util::controlled_from_stdin(&["write", "-p", &pid, "target_var", "--if", "value != 0"]),
        "watch target_var rw\n",
    );
    h.finish();
    assert_eq!(code, 0, "{err}");
    let recs = util::ndjson(&out);
    let refused = util::record(&recs, "control_refused");
    let reason = refused["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("a read-write watch of a user address") && reason.contains("move with `w`"),
        "{refused}"
    );
    assert!(
        !recs.iter().any(|r| r["type"] == "watch"),
        "the watch did not move: {out}"
    );
    assert!(
        recs.iter()
            .filter(|r| r["type"] == "hit")
            .all(|r| r["access"] == "W"),
        "{out}"
    );
});

// Without BPF (root with CAP_BPF and CAP_SYS_ADMIN dropped), a `--dump-on` tracepoint or hit condition is
// refused naming itself; it was refused as "--value and --if read the value in the kernel with BPF",
// options the command line did not have.
live_test!(dump_on_without_bpf_names_itself, {
    if !root_with_capsh() {
        return;
    }
    let h = Writer::spinning(0);
    let pid = h.pid.to_string();
    let run = |trigger: &str| {
        dropped(
            "cap_bpf,cap_sys_admin",
            &[
                "write",
                "-p",
                &pid,
                "target_var",
                "--last",
                "3",
                "--dump-on",
                trigger,
                "--duration",
                "1s",
            ],
        )
    };
    let (code, _, err) = run("tracepoint:printk:console");
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains(
            "error: --dump-on tracepoint:printk:console counts the tracepoint's firings in the kernel \
             with BPF, but loading a BPF program was refused"
        ) && err.contains("`--dump-on signal` works without it"),
        "{err}"
    );
    assert!(!err.contains("--value and --if"), "{err}");
    let (code, _, err) = run("value == 5");
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains(
            "error: --dump-on 'value == 5' is decided on the value the kernel reads at each hit"
        ),
        "{err}"
    );
    assert!(!err.contains("--value and --if"), "{err}");
    h.finish();
});

// `-o -` is stdout (as `--control -` is stdin): it wrote the stream to a file named `-` in the current
// directory, and nothing to stdout.
live_test!(o_dash_is_stdout, {
    let dir = util::temp_dir("ksymwatch-bugs-dash");
    let _ = std::fs::remove_file(dir.join("-"));
    let h = Writer::spinning(0);
    let out = Command::new(BIN)
        .current_dir(&dir)
        .args([
            "write",
            "-p",
            &h.pid.to_string(),
            "target_var",
            "-o",
            "-",
            "--count",
            "2",
        ])
        .output()
        .expect("run ksymwatch");
    h.finish();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("# armed ") && util::parse_hits(&stdout).len() == 2,
        "{stdout}"
    );
    assert!(!dir.join("-").exists(), "no file named `-`");
});
