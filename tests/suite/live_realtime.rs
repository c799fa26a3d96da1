//! The reader's scheduling (`--realtime`): the tracer's reading thread (its main thread) runs SCHED_FIFO
//! at the priority asked for where the caller may raise it, keeps the normal policy with `--realtime off`,
//! and where the raise is refused (no CAP_SYS_NICE, RLIMIT_RTPRIO 0) watches on at the normal policy as
//! before. Each case reads the policy from /proc after the first hit was printed, when the loop runs.

use std::time::Duration;

use crate::util::{self, Tracer, Writer};

const SCHED_OTHER: u32 = 0;
const SCHED_FIFO: u32 = 1;

/// The (policy, rt_priority) of task `pid` (its main thread), from /proc/PID/stat fields 41 and 40.
fn policy(pid: u32) -> (u32, u32) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat");
    // Fields after the command name's `)`, starting at field 3 (the state).
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    (f[41 - 3].parse().unwrap(), f[40 - 3].parse().unwrap())
}

/// Watches a writer's global with `extra` options through `prefix`, waits for its hit line, and returns
/// the tracer's policy then; the run ends cleanly, with the hit counted.
fn policy_while_watching(prefix: &[String], extra: &[&str]) -> (u32, u32) {
    let mut w = Writer::start(&["write", "1", "0"]);
    let target = format!("0x{:x}/8", w.addr);
    let pid = w.pid.to_string();
    let mut args = vec!["write", "-p", &pid, &target];
    args.extend_from_slice(extra);
    let mut t = Tracer::start_with(prefix, &args);
    w.send("go");
    let seen = t.read_until(|l| l.contains(" W ip="));
    assert!(seen.contains(" W ip="), "no hit line: {seen}");
    let p = policy(t.child.id());
    w.finish();
    let (code, _, err) = t.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("1 hits"), "{err}");
    p
}

live_test!(
    the_reader_runs_sched_fifo_where_permitted_and_normal_with_off,
    {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            util::skip("raising the reader's priority needs root (CAP_SYS_NICE)");
            return;
        }
        assert_eq!(policy_while_watching(&[], &[]), (SCHED_FIFO, 1));
        assert_eq!(
            policy_while_watching(&[], &["--realtime", "7"]),
            (SCHED_FIFO, 7)
        );
        assert_eq!(
            policy_while_watching(&[], &["--realtime", "off"]),
            (SCHED_OTHER, 0)
        );
    }
);

live_test!(
    a_refused_raise_leaves_the_reader_at_the_normal_policy_and_watching,
    {
        let mut rtprio = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the rlimit we own.
        let rc = unsafe { libc::getrlimit(libc::RLIMIT_RTPRIO, &mut rtprio) };
        assert_eq!(rc, 0);
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !root || !std::path::Path::new("/usr/bin/setpriv").exists() || rtprio.rlim_cur != 0 {
            util::skip("refusing the raise needs root, setpriv and an RLIMIT_RTPRIO of 0");
            return;
        }
        let no_nice: Vec<String> = [
            "setpriv",
            "--bounding-set=-sys_nice",
            "--inh-caps=-sys_nice",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(policy_while_watching(&no_nice, &[]), (SCHED_OTHER, 0));
    }
);
