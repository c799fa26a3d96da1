//! `--control`: moving a running watch in place and pausing it, acknowledged in the stream.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::util::{self, helper, parse_hits, Tracer, Writer, BIN};

/// The threads helper alternating its stores over `threads` threads, watched by `write -p PID target_var
/// --control FIFO` (armed): the helper, the tracer, a temporary directory `dir_name` and the FIFO in it.
fn watched_with_a_fifo(threads: &str, dir_name: &str) -> (Writer, Tracer, PathBuf, PathBuf) {
    let h = Writer::threads(&["alternate", threads, "300"]);
    let dir = util::temp_dir(dir_name);
    let fifo = dir.join("ctl");
    let pid = h.pid.to_string();
    let t = Tracer::start(&[
        "write",
        "-p",
        &pid,
        "target_var",
        "--control",
        fifo.to_str().expect("utf-8 path"),
        "--no-status",
    ]);
    (h, t, dir, fifo)
}

/// Writes `line` to the control FIFO `fifo` and closes it (a writer that comes and goes, as `echo` does).
fn send_line(fifo: &std::path::Path, line: &str) {
    util::send_control(fifo, line);
}

// The retarget test: threads alternate stores to two globals; `watch target_var2` over a FIFO
// moves the watch. Every hit before the acknowledgement is of target_var, every hit after it of
// target_var2, and nothing is reported lost on the way.
live_test!(a_retarget_splits_the_stream_at_its_acknowledgement, {
    let (mut h, mut t, dir, fifo) = watched_with_a_fifo("4", "ksw-control");
    assert!(fifo.exists(), "ksymwatch creates the FIFO");
    let mut before = t.read_until(|l| l.contains(" target_var W "));
    send_line(&fifo, "watch target_var2");
    before.push_str(&t.read_until(|l| l.starts_with("# watch ")));
    let (before, ack) = before.rsplit_once("# watch ").expect("acknowledgement");
    let ack = ack.trim_end().to_string();
    let before = before.to_string();
    let mut after = String::new();
    while parse_hits(&after).len() < 50 {
        let more = t.read_until(|l| l.contains(" target_var2 W "));
        assert!(!more.is_empty(), "the stream ended early:\n{after}");
        after.push_str(&more);
    }
    let (code, rest, err) = t.interrupt(Duration::from_secs(10));
    h.send("stop");
    h.read_until("done");
    h.finish();
    assert_eq!(code, 0, "{err}");
    after.push_str(&rest);
    let hits_before = parse_hits(&before);
    let hits_after = parse_hits(&after);
    assert!(!hits_before.is_empty());
    assert!(
        hits_before.iter().all(|h| h.target == "target_var"),
        "{before}"
    );
    assert!(
        hits_after.iter().all(|h| h.target == "target_var2"),
        "a hit of the old watch after the acknowledgement:\n{after}"
    );
    assert!(hits_after.len() >= 50);
    assert!(
        ack.starts_with("target_var2 (0x")
            && ack.contains("armed on ")
            && (ack.contains(" threads in ") || ack.contains(" CPUs in ")),
        "{ack}"
    );
    // Neither a lost record nor a hit a full ring did not print (which the totals would still count):
    // the stream itself is whole on both sides of the mark.
    let dropped = |s: &str| s.contains("# lost") || s.contains(" hits not printed on cpu ");
    assert!(!dropped(&after) && !dropped(&before), "{after}");
    assert!(
        !fifo.exists(),
        "the FIFO ksymwatch made is removed at the end"
    );
    let _ = std::fs::remove_dir(&dir);
});

/// A system-wide `--json --control -` watch of the threads helper's first global (`a`; `b` is its
/// second), the helper's `threads` threads storing to both in turn, with `extra` arguments for ksymwatch.
struct Controlled {
    h: Writer,
    a: String,
    b: String,
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl Controlled {
    fn start(threads: &str, extra: &[&str]) -> Controlled {
        let h = Writer::threads(&["alternate", threads, "300"]);
        let a = format!("0x{:x}", h.addr);
        let b = format!("0x{:x}", h.addr2.expect("the threads helper prints addr2="));
        let (child, stdin, out) =
            controlled_from_stdin(&["write", "--json", "--no-status", &a], extra);
        let stdin = stdin.expect("stdin");
        Controlled {
            h,
            a,
            b,
            child,
            stdin,
            out,
        }
    }

    /// The stream's next record, `None` when it ended.
    fn next(&mut self) -> Option<serde_json::Value> {
        use std::io::BufRead;
        let mut line = String::new();
        if self.out.read_line(&mut line).expect("read stream") == 0 {
            return None;
        }
        Some(serde_json::from_str(&line).expect("one JSON record a line"))
    }

    /// Ends the commands, stops ksymwatch as Ctrl-C does and then the helper; ksymwatch's exit status.
    fn stop(self) -> std::process::ExitStatus {
        let Controlled {
            mut h,
            mut child,
            stdin,
            ..
        } = self;
        drop(stdin);
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let status = util::wait_within(&mut child, Duration::from_secs(10));
        h.send("stop");
        h.read_until("done");
        h.finish();
        status
    }
}

// `--control -` on a system-wide watch of a user address, NDJSON: a bad line is refused and the watch
// kept; `watch ADDR2` moves both CPUs' events; `off` stops hits until `on`, also across a move made
// while off.
live_test!(
    stdin_control_refuses_moves_and_pauses_a_system_wide_watch,
    {
        let mut c = Controlled::start("2", &[]);
        let (a, b) = (c.a.clone(), c.b.clone());
        let mut records: Vec<serde_json::Value> = Vec::new();
        let read_until = |c: &mut Controlled,
                          records: &mut Vec<serde_json::Value>,
                          want: &dyn Fn(&serde_json::Value) -> bool| loop {
            let v = c
                .next()
                .unwrap_or_else(|| panic!("the stream ended early: {records:?}"));
            let done = want(&v);
            records.push(v);
            if done {
                return;
            }
        };
        let pid = c.h.pid;
        let mine = |v: &serde_json::Value| v["type"] == "hit" && v["pid"] == pid;
        read_until(&mut c, &mut records, &|v| v["type"] == "armed");
        read_until(&mut c, &mut records, &mine);
        writeln!(c.stdin, "frobnicate\nwatch {b}").expect("send commands");
        read_until(&mut c, &mut records, &|v| v["type"] == "watch");
        read_until(&mut c, &mut records, &|v| {
            v["type"] == "hit" && v["target"] == b.as_str()
        });
        writeln!(c.stdin, "off").expect("send off");
        read_until(&mut c, &mut records, &|v| v["type"] == "watch_off");
        // A move while off stays off until `on`.
        writeln!(c.stdin, "watch {a}").expect("send watch");
        read_until(&mut c, &mut records, &|v| {
            v["type"] == "watch" && v["enabled"] == false
        });
        std::thread::sleep(Duration::from_millis(100));
        writeln!(c.stdin, "on").expect("send on");
        read_until(&mut c, &mut records, &|v| v["type"] == "watch_on");
        read_until(&mut c, &mut records, &|v| {
            v["type"] == "hit" && v["target"] == a.as_str()
        });
        let status = c.stop();
        assert_eq!(status.code(), Some(0));

        let at = |ty: &str| {
            records
                .iter()
                .position(|v| v["type"] == ty)
                .unwrap_or_else(|| panic!("no {ty}"))
        };
        let refused = &records[at("control_refused")];
        assert_eq!(refused["command"], "frobnicate");
        assert_eq!(refused["kind"], "bad_command");
        assert!(refused["reason"]
            .as_str()
            .unwrap_or("")
            .contains("unknown command"));
        let moved = &records[at("watch")];
        assert_eq!(moved["target"]["addr"], b.as_str());
        assert_eq!(moved["cpus"], util::online_cpus().len());
        assert_eq!(moved["enabled"], true);
        let (w, off, on) = (at("watch"), at("watch_off"), at("watch_on"));
        for (i, v) in records.iter().enumerate().filter(|(_, v)| mine(v)) {
            let want = if i < w || i > on {
                a.as_str()
            } else {
                b.as_str()
            };
            assert_eq!(v["target"], want, "hit {i}");
            assert!(!(off..on).contains(&i), "a hit while the watch was off");
        }
        assert!(records.iter().all(|v| v["type"] != "lost"));
    }
);

// `--control -` with stdin a regular file (a script of commands) or /dev/null: the file's lines are
// applied in order as the watch starts and its end does not end the watch; /dev/null is no command at all.
// Neither can be polled, which once failed the run after arming.
live_test!(stdin_control_from_a_file_or_dev_null_is_read_not_polled, {
    let dir = util::temp_dir("ksw-control-file");
    let script = dir.join("commands");
    std::fs::write(&script, "off\n# a comment\non\nfrobnicate").expect("write commands");
    // A helper storing all the time: hits whatever else the machine does (an idle CPU's stack is not
    // written while other jobs keep it busy).
    let mut w = util::Writer::start(&["spin", "0"]);
    w.send("go");
    let target = format!("0x{:x}/8", w.addr);
    for (stdin, refused) in [
        (script.as_path(), 1),
        (std::path::Path::new("/dev/null"), 0),
    ] {
        let out = Command::new(BIN)
            .args([
                "write",
                "--json",
                "--no-status",
                &target,
                "--duration",
                "300ms",
                "--control",
                "-",
            ])
            .stdin(std::fs::File::open(stdin).expect("stdin file"))
            .output()
            .expect("run ksymwatch");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{}: {err}", stdin.display());
        let records = util::ndjson(&String::from_utf8_lossy(&out.stdout));
        let count = |ty: &str| records.iter().filter(|v| v["type"] == ty).count();
        let paused = usize::from(refused == 1);
        assert_eq!(count("watch_off"), paused, "{}", stdin.display());
        assert_eq!(count("watch_on"), paused, "{}", stdin.display());
        assert_eq!(count("control_refused"), refused, "{}", stdin.display());
        let summary = records.last().expect("summary");
        assert_eq!(
            summary["stop"], "duration",
            "the end of the commands is not the end: {summary}"
        );
        assert!(count("hit") > 0, "the watch ran on after its commands");
    }
    let _ = std::fs::remove_dir_all(&dir);
});

// `--if` reads the kernel's `old`, kept per process; a move starts it afresh there too: the first hit
// at the new address has no `old` (not the old address's last value), the next one has the value before.
live_test!(a_move_forgets_the_kernels_old_values, {
    let mut c = Controlled::start("1", &["--if", "changed"]);
    let (a, b, pid) = (c.a.clone(), c.b.clone(), c.h.pid);
    let next = |c: &mut Controlled, want: &dyn Fn(&serde_json::Value) -> bool| loop {
        let v = c.next().expect("the stream ended early");
        if want(&v) {
            return v;
        }
    };
    let hit_at = |addr: String| {
        move |v: &serde_json::Value| {
            v["type"] == "hit" && v["pid"] == pid && v["target"] == addr.as_str()
        }
    };
    next(&mut c, &|v| v["type"] == "armed");
    next(&mut c, &hit_at(a.clone()));
    let second_at_a = next(&mut c, &hit_at(a.clone()));
    writeln!(c.stdin, "watch {b}").expect("send the move");
    next(&mut c, &|v| v["type"] == "watch");
    let first_at_b = next(&mut c, &hit_at(b.clone()));
    let second_at_b = next(&mut c, &hit_at(b.clone()));
    let status = c.stop();
    assert_eq!(status.code(), Some(0));
    assert!(second_at_a["old"].is_string(), "{second_at_a}");
    assert!(
        first_at_b["old"].is_null(),
        "the old address's value: {first_at_b}"
    );
    assert!(second_at_b["old"].is_string(), "{second_at_b}");
});

/// A move from `w` to `rw` on a process watch: the program stops reading the watched bytes at the trap,
/// as a watch armed `rw` does (its own read would trap again, once per byte: traps the kernel counts and
/// delivers to no program). After the move, no trap is unaccounted for in the summary and the hits are
/// the helper's stores.
#[test]
#[ignore = "live: arms hardware breakpoints (run by scripts/test as root)"]
fn a_move_to_read_write_costs_no_extra_traps() {
    use std::io::BufRead;
    let Some(_live) = util::live() else { return };
    let mut h = Writer::start_binary(&helper("stores"), &["spin", "0"]);
    let pid = h.pid;
    let mut child = Command::new(BIN)
        .args(["write", "--json", "--no-status", "--summary", "-p"])
        .arg(pid.to_string())
        .args(["ksw_var", "--control", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ksymwatch");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut records: Vec<serde_json::Value> = Vec::new();
    let mut next = |records: &mut Vec<serde_json::Value>| -> serde_json::Value {
        let mut line = String::new();
        let n = out.read_line(&mut line).expect("read stream");
        assert!(n > 0, "the stream ended early: {records:?}");
        let v: serde_json::Value = serde_json::from_str(&line).expect("one JSON record a line");
        records.push(v.clone());
        v
    };
    while next(&mut records)["type"] != "armed" {}
    h.send("go");
    let hit = |v: &serde_json::Value| v["type"] == "hit" && v["pid"] == pid;
    while records.iter().filter(|v| hit(v)).count() < 20 {
        next(&mut records);
    }
    writeln!(stdin, "watch ksw_var rw").expect("send the move");
    while next(&mut records)["type"] != "watch" {}
    let moved = records.len();
    while records[moved..].iter().filter(|v| hit(v)).count() < 300 {
        next(&mut records);
    }
    h.send("stop");
    let lines = h.read_until("done");
    drop(stdin);
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).expect("read stream") == 0 {
            break;
        }
        records.push(serde_json::from_str(&line).expect("one JSON record a line"));
    }
    let status = util::wait_within(&mut child, Duration::from_secs(10));
    h.finish();
    assert_eq!(status.code(), Some(0));
    let stores: u64 = util::helper_number(&lines, "stores=");
    let ack = &records[moved - 1];
    assert_eq!(ack["target"]["access"], "RW", "{ack}");
    let summary = util::record(&records, "summary");
    let warnings = summary["warnings"].to_string();
    assert!(!warnings.contains("unaccounted"), "{summary}");
    assert_eq!(summary["lost"], 0, "{summary}");
    // After the move: every hit is one of the helper's stores, none the program's own read.
    let after: Vec<&serde_json::Value> = records[moved..].iter().filter(|v| hit(v)).collect();
    assert!(after.len() >= 300);
    assert!(
        after.len() as u64 <= stores,
        "{} hits for {stores} stores",
        after.len()
    );
    for v in &after {
        assert_eq!(v["ip"]["sym"], "ksw_store8", "{v}");
        assert_eq!(v["access"], "RW", "{v}");
    }
}

/// ksymwatch with `args`, `extra` and `--control -`, all three streams piped: the child, its stdin (the
/// commands' way in) and its stdout.
fn controlled_from_stdin(
    args: &[&str],
    extra: &[&str],
) -> (
    std::process::Child,
    Option<std::process::ChildStdin>,
    std::io::BufReader<std::process::ChildStdout>,
) {
    let mut child = Command::new(BIN)
        .args(args)
        .args(extra)
        .args(["--control", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ksymwatch");
    let stdin = child.stdin.take();
    let out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    (child, stdin, out)
}

/// `ksymwatch write -p PID TARGET --control - [extra]` with text output, its stdin piped: the commands'
/// way in.
struct Piped {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl Piped {
    fn start(pid: u32, target: &str, extra: &[&str]) -> Piped {
        let pid = pid.to_string();
        let (child, stdin, out) =
            controlled_from_stdin(&["write", "--no-status", "-p", &pid, target], extra);
        let mut p = Piped { child, stdin, out };
        p.line_with("# armed");
        p
    }

    /// Reads lines up to the first holding `needle`; returns it.
    fn line_with(&mut self, needle: &str) -> String {
        use std::io::BufRead;
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            if self.out.read_line(&mut line).expect("read stream") == 0 {
                panic!("the stream ended before `{needle}`:\n{seen}");
            }
            if line.contains(needle) {
                return line;
            }
            seen.push_str(&line);
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{line}").expect("send a command");
        stdin.flush().expect("flush the command");
    }

    /// Stops ksymwatch as Ctrl-C does; its exit code.
    fn stop(mut self) -> Option<i32> {
        self.stdin.take();
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        util::wait_within(&mut self.child, Duration::from_secs(10)).code()
    }
}

/// Stores `value` into the `writer set` helper's global and returns the value the hit line printed.
fn store_and_see(w: &mut Writer, t: &mut Piped, value: u64) -> String {
    w.send(&format!("set 0x{value:x}"));
    w.read_until("done");
    let hit = t.line_with(" W ip=");
    hit.trim_end()
        .rsplit_once(" value=")
        .map(|(_, v)| v.to_string())
        .unwrap_or_else(|| panic!("no value on {hit:?}"))
}

// Issue 38 item 8: a process watch without `--value` moves to another length (it was refused with
// "--value reads 8 bytes"), and its hits then show the new length's value: shorter than the program
// reads (masked), and longer (read from the process); with `--value` the move is still refused.
live_test!(a_move_to_another_length_needs_no_value, {
    let mut w = Writer::start(&["set", "0"]);
    let full = 0x1122_3344_5566_7788u64;

    let mut t = Piped::start(w.pid, "target_var", &[]);
    assert_eq!(store_and_see(&mut w, &mut t, full), format!("0x{full:x}"));
    for (target, want) in [
        ("target_var/4", full & 0xffff_ffff),
        ("target_var+4/4", full >> 32),
        ("target_var+2/2", (full >> 16) & 0xffff),
        ("target_var/1", full & 0xff),
        ("target_var/8", full),
    ] {
        t.send(&format!("watch {target}"));
        let ack = t.line_with("# watch ");
        assert!(
            ack.starts_with(&format!("# watch {target} (0x")),
            "{target}: {ack}"
        );
        assert_eq!(
            store_and_see(&mut w, &mut t, full),
            format!("0x{want:x}"),
            "{target}"
        );
    }
    assert_eq!(t.stop(), Some(0));

    // The program reads 2 bytes; a move to 8 shows all 8.
    let mut t = Piped::start(w.pid, "target_var/2", &[]);
    assert_eq!(store_and_see(&mut w, &mut t, full), "0x7788");
    t.send("watch target_var/8");
    assert!(t
        .line_with("# watch ")
        .starts_with("# watch target_var/8 (0x"));
    let other = 0x0102_0304_0506_0708u64;
    assert_eq!(store_and_see(&mut w, &mut t, other), format!("0x{other:x}"));
    assert_eq!(t.stop(), Some(0));

    let mut t = Piped::start(w.pid, "target_var", &["--value"]);
    t.send("watch target_var/4");
    let refused = t.line_with("# control ");
    assert!(
        refused.starts_with("# control `watch target_var/4` refused: --value/--if reads 8 bytes"),
        "{refused}"
    );
    assert_eq!(t.stop(), Some(0));
    w.finish();
});

// Issue 38 items 9 and 10, over a FIFO: a writer's last line without a newline is a command once it
// closes (it was glued to the next writer's line, and both refused); a line over 4096 bytes is refused
// as too long (it was "unknown command `(a`"), and the lines after it are applied.
live_test!(fifo_lines_end_at_a_writers_close_and_long_ones_are_named, {
    let (mut h, mut t, dir, fifo) = watched_with_a_fifo("1", "ksw-control-close");
    // A mark that never comes must fail the test, not hang it with the live lock held. The child is not
    // reaped before `done` is sent or dropped, so its pid is still its own when the watchdog fires.
    let pid = t.child.id() as i32;
    let (done, done_rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            done_rx.recv_timeout(Duration::from_secs(60))
        {
            // SAFETY: kill(2) on our own child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    let write = |text: &[u8]| {
        // Non-blocking: a tracer gone is ENXIO, not a test blocked in open() forever.
        let mut ctl = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .expect("open the control FIFO");
        ctl.write_all(text).expect("write to the FIFO");
    };
    let mark = |t: &mut util::Tracer| {
        let text = t.read_until(|l| l.starts_with("# watch ") || l.starts_with("# control "));
        text.lines().last().unwrap_or_default().to_string()
    };
    // Each writer waits for the one before to be acknowledged: two writers with the FIFO open at once
    // share one byte stream, as any FIFO's.
    write(b"watch target_var2");
    let first = mark(&mut t);
    assert!(first.starts_with("# watch target_var2 (0x"), "{first}");
    write(b"watch target_var\n");
    let second = mark(&mut t);
    assert!(second.starts_with("# watch target_var (0x"), "{second}");
    // Several writes of one writer are still one line.
    {
        // Non-blocking: a tracer gone is ENXIO, not a test blocked in open() forever.
        let mut ctl = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .expect("open the control FIFO");
        ctl.write_all(b"watch targ").expect("write");
        ctl.flush().expect("flush");
        std::thread::sleep(Duration::from_millis(50));
        ctl.write_all(b"et_var2").expect("write");
    }
    let third = mark(&mut t);
    assert!(third.starts_with("# watch target_var2 (0x"), "{third}");
    let mut long = b"watch ".to_vec();
    long.resize(5000, b'a');
    long.extend_from_slice(b"\nwatch target_var\n");
    write(&long);
    let refused = mark(&mut t);
    assert!(
        refused.starts_with("# control `watch aaaa")
            && refused.contains("refused: the line is longer than 4096 bytes")
            && !refused.contains("unknown command"),
        "{refused}"
    );
    let after = mark(&mut t);
    assert!(after.starts_with("# watch target_var (0x"), "{after}");
    // The same without a newline at all: the close ends the too-long line.
    write(&long[..4500]);
    let refused = mark(&mut t);
    assert!(refused.contains("longer than 4096 bytes"), "{refused}");
    write(b"off");
    assert!(mark(&mut t).starts_with("# watch off"));
    let _ = done.send(());
    let (code, _, err) = t.interrupt(Duration::from_secs(10));
    h.send("stop");
    h.read_until("done");
    h.finish();
    assert_eq!(code, 0, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
});

// `write -p PID target_var --control FIFO --json --buffer-pages 1 | (sleep 3; cat)`, then `watch
// target_var2` while the reader was stalled: the hit program's one-page ring had dropped thousands of
// target_var's hits (kept in the kernel's totals), and no record had carried their count when the move was
// made, so their `lost` mark came at the end, after the `watch` record, among the new target's hits. The
// move now marks what the old watch lost before its acknowledgement: every hit before it is target_var's,
// printed or marked, and the writer, which never stores into target_var2, leaves nothing to mark after it.
live_test!(a_move_marks_what_the_old_watch_lost_before_it, {
    let w = Writer::spinning(0);
    let dir = util::temp_dir("ksw-control-lost");
    let fifo = dir.join("ctl");
    let pid = w.pid.to_string();
    let mut t = Tracer::start_json(&[
        "write",
        "--json",
        "--no-status",
        "-p",
        &pid,
        "target_var",
        "--buffer-pages",
        "1",
        "--control",
        fifo.to_str().expect("utf-8 path"),
    ]);
    // Nothing is read for a while: the tracer waits on the full pipe, its ring fills and the program counts
    // what it drops. The move is sent meanwhile, and carried out once the reader reads again.
    std::thread::sleep(Duration::from_millis(1500));
    send_line(&fifo, "watch target_var2");
    let reader = t.keep_reading();
    std::thread::sleep(Duration::from_millis(1000));
    t.signal(libc::SIGINT);
    let (records, err) = t.records_read_by(reader, Duration::from_secs(30));
    let _ = std::fs::remove_dir_all(&dir);
    let moved = records
        .iter()
        .position(|r| r["type"] == "watch")
        .unwrap_or_else(|| panic!("no `watch` record: {err}"));
    // Hits not printed, which the kernel's totals count (a mark of task records the perf ring lost, a
    // thread's name or exit, is no hit, and comes when the ring has room again: after the move or not).
    let counted = |rs: &[serde_json::Value]| -> u64 {
        rs.iter()
            .filter(|r| r["type"] == "lost" && r["counted"] == true)
            .map(|r| r["count"].as_u64().expect("count"))
            .sum()
    };
    let (before, after) = records.split_at(moved);
    assert!(
        counted(before) > 0,
        "the one-page ring was to drop hits: {err}"
    );
    let marks_after: Vec<&serde_json::Value> =
        after.iter().filter(|r| r["type"] == "lost").collect();
    assert_eq!(
        counted(after),
        0,
        "a loss marked after the move: {marks_after:?} {err}"
    );
    let hits = |rs: &[serde_json::Value], target: &str| {
        rs.iter()
            .filter(|r| r["type"] == "hit" && r["target"] == target)
            .count() as u64
    };
    assert_eq!(hits(after, "target_var2"), 0, "{err}");
    let summary = util::summary_record(&records);
    assert_eq!(
        hits(before, "target_var") + counted(before),
        summary["hits"].as_u64().expect("hits"),
        "every hit before the move printed or marked: {err}"
    );
});

// A move to the same variable at another length or access (`watch target_var/4 rw`) leaves the
// breakpoint at the same address: the hits recorded before the move, still in the rings or held by the
// merge when it is made, were printed under the new watch's label, length and access (54 of 2,700 in one
// move here), and their value cut to its length. Each move's hits before its acknowledgement are the old
// watch's, every hit after it the new one's, back and forth while two threads store.
live_test!(
    a_move_at_the_same_address_names_earlier_hits_by_the_old_watch,
    {
        let mut h = Writer::threads(&["alternate", "2", "300"]);
        let dir = util::temp_dir("ksw-control-same");
        let fifo = dir.join("ctl");
        let pid = h.pid.to_string();
        let mut t = Tracer::write_json(&[
            "-p",
            &pid,
            "target_var",
            "--control",
            fifo.to_str().expect("utf-8 path"),
        ]);
        let is_hit = |l: &str| l.contains("\"type\":\"hit\"");
        let mut text = t.read_until(is_hit);
        let moves = [
            "target_var/4 rw",
            "target_var",
            "target_var/4 rw",
            "target_var",
        ];
        for m in moves {
            // The rings and the merge hold the old watch's latest hits as the move is made.
            std::thread::sleep(Duration::from_millis(200));
            send_line(&fifo, &format!("watch {m}"));
            text.push_str(&t.read_until(|l| l.contains("\"type\":\"watch\"")));
            text.push_str(&t.read_until(is_hit));
        }
        let (code, rest, err) = t.interrupt(Duration::from_secs(10));
        h.send("stop");
        h.read_until("done");
        h.finish();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(code, 0, "{err}");
        text.push_str(&rest);
        // The watch each stretch of the stream is of: (label, length, access).
        let short = ("target_var/4", 4, "RW");
        let whole = ("target_var", 8, "W");
        let mut now = whole;
        let mut moved = 0;
        for r in util::ndjson(&text) {
            match r["type"].as_str() {
                Some("watch") => {
                    moved += 1;
                    now = if now == whole { short } else { whole };
                    assert_eq!(r["target"]["len"], now.1, "{r}");
                }
                Some("hit") => {
                    let (label, len, access) = now;
                    let hit = (
                        r["target"].as_str(),
                        r["len"].as_u64(),
                        r["access"].as_str(),
                    );
                    assert_eq!(
                        hit,
                        (Some(label), Some(len), Some(access)),
                        "a hit after {moved} moves named by another watch: {r}"
                    );
                }
                _ => {}
            }
        }
        assert_eq!(moved, moves.len(), "{err}");
    }
);
