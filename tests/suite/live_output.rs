//! Tests of the output modes (`--json`, `--summary`, `--folded`, `--flamegraph`, filters, user-space
//! symbols, several targets) against real hits on this machine, plus the JSON schema checked line by line
//! with `deny_unknown_fields`. Live tests hold `util::live()` and match hits by the helper's tid.

use crate::util;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use util::{parse_hits, run, Writer, BIN};

const KERNEL_TARGET: &str = "__start_init_stack+0x3e00";

/// The JSON schema of docs/outputs.md ("JSON output") as types that refuse any field they do not name. Fields
/// exist to be checked by deserialization; not every test reads every one.
#[allow(dead_code)]
mod schema {
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    pub enum Line {
        Header(Header),
        Armed(Armed),
        Hit(Hit),
        Lost(Lost),
        CpuOffline(Cpu),
        CpuOnline(CpuOnline),
        CpuArmFailed(ArmFailed),
        Summary(Summary),
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Header {
        pub version: u32,
        pub targets: Vec<Target>,
        pub cpus: Vec<u32>,
        pub symbols: String,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Target {
        pub name: String,
        pub addr: String,
        pub len: u8,
        pub access: String,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct CpuOnline {
        pub time_ns: u64,
        pub cpu: u32,
        pub after_uevent_ns: Option<u64>,
        pub open_ns: u64,
        pub enabled: bool,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Armed {
        pub time_ns: u64,
        pub events: usize,
        pub cpus: Vec<u32>,
    }

    /// A system-wide watch's hit: no `value` (only a process watch reads one), which
    /// `deny_unknown_fields` checks too.
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Hit {
        pub time_ns: u64,
        pub cpu: u32,
        pub pid: u32,
        pub tid: u32,
        pub comm: String,
        pub target: String,
        pub target_index: usize,
        pub addr: String,
        pub len: u8,
        pub access: String,
        pub in_kernel: bool,
        pub ip: Frame,
        pub chain: Vec<Frame>,
    }

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Frame {
        pub addr: String,
        pub kernel: bool,
        pub sym: Option<String>,
        pub off: u64,
        pub size: Option<u64>,
        pub module: Option<String>,
        pub binary: Option<String>,
        /// Only with --lines.
        pub line: Option<String>,
        pub inlined: Option<Vec<String>>,
        /// A user frame no mapping named: why.
        pub unnamed: Option<String>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Lost {
        pub time_ns: u64,
        pub cpu: u32,
        pub count: u64,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Cpu {
        pub time_ns: u64,
        pub cpu: u32,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct ArmFailed {
        pub time_ns: u64,
        pub cpu: u32,
        pub reason: String,
        pub kind: String,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct CpuCount {
        pub cpu: u32,
        pub count: u64,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Summary {
        pub hits: u64,
        pub lost: u64,
        pub filtered: u64,
        pub filtered_other_process: u64,
        pub raced: u64,
        pub condition_disagreed: u64,
        pub elapsed_s: f64,
        pub stop: String,
        pub signal: Option<String>,
        pub hits_by_cpu: Vec<CpuCount>,
        pub lost_by_cpu: Vec<CpuCount>,
        pub unprinted: u64,
        pub unprinted_by_cpu: Vec<CpuCount>,
        pub from_totals: bool,
        pub unwatched_ns_by_cpu: Vec<CpuCount>,
        pub chains: Option<Vec<Chain>>,
        pub by_ip: Option<Vec<IpCount>>,
        pub by_comm: Option<Vec<CommCount>>,
        pub by_thread: Option<Vec<ThreadCount>>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct ThreadCount {
        pub pid: u32,
        pub tid: u32,
        pub comm: String,
        pub count: u64,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Chain {
        pub count: u64,
        pub target: String,
        pub target_index: usize,
        pub comms: Vec<CommCount>,
        pub chain: Vec<Frame>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct IpCount {
        pub count: u64,
        pub ip: Frame,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct CommCount {
        pub comm: String,
        pub count: u64,
    }

    /// Parses every line; panics naming the first line that does not fit the schema.
    pub fn parse(out: &str) -> Vec<Line> {
        out.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }
}

/// A running ksymwatch whose stdout and stderr are collected in the background.
struct Traced {
    child: Child,
    out: JoinHandle<String>,
    err: JoinHandle<String>,
}

/// Which stream says the breakpoints are armed: stdout in stream modes, stderr under --quiet/--folded.
#[derive(Clone, Copy)]
enum Ready {
    Stdout(&'static str),
    Stderr(&'static str),
}

fn collect(
    r: impl Read + Send + 'static,
    want: Option<&'static str>,
    tx: mpsc::Sender<()>,
) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let mut r = BufReader::new(r);
        let mut want = want;
        loop {
            let mut line = String::new();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => return text,
                Ok(_) => {}
            }
            if want.is_some_and(|w| line.contains(w)) {
                want = None;
                let _ = tx.send(());
            }
            text.push_str(&line);
        }
    })
}

impl Traced {
    /// Starts ksymwatch and waits until it says it is armed (panics with its output if it exits first).
    fn start(args: &[&str], ready: Ready) -> Traced {
        let mut child = util::spawn(args);
        let (tx, rx) = mpsc::channel();
        let (on_out, on_err) = match ready {
            Ready::Stdout(w) => (Some(w), None),
            Ready::Stderr(w) => (None, Some(w)),
        };
        let out = collect(child.stdout.take().unwrap(), on_out, tx.clone());
        let err = collect(child.stderr.take().unwrap(), on_err, tx);
        let t = Traced { child, out, err };
        if rx.recv_timeout(Duration::from_secs(30)).is_err() {
            let (code, out, err) = t.wait(Duration::from_secs(5));
            panic!("ksymwatch {args:?} never armed (exit {code}):\n{out}\nstderr: {err}");
        }
        t
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }

    /// Waits (bounded) for exit; returns (exit code, stdout, stderr).
    /// Ctrl-C once the helper's writes are in the rings (a tick for the loop), then [`Traced::wait`].
    fn interrupt(self, limit: Duration) -> (i32, String, String) {
        std::thread::sleep(Duration::from_millis(50));
        self.signal(libc::SIGINT);
        self.wait(limit)
    }

    fn wait(mut self, limit: Duration) -> (i32, String, String) {
        let status = util::wait_within(&mut self.child, limit);
        let out = self.out.join().unwrap();
        let err = self.err.join().unwrap();
        (status.code().unwrap_or(-1), out, err)
    }
}

/// Runs the helper's work under ksymwatch `args`, then SIGINT; returns (tid, exit code, stdout, stderr).
fn trace_helper(helper: &[&str], args: &[String], ready: Ready) -> (u32, i32, String, String) {
    let w = Writer::start(helper);
    let args: Vec<String> = args
        .iter()
        .map(|a| {
            a.replace("{addr}", &format!("0x{:x}", w.addr))
                .replace("{tid}", &w.tid.to_string())
        })
        .collect();
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let t = Traced::start(&argv, ready);
    let tid = w.go_and_finish();
    let (code, out, err) = t.interrupt(Duration::from_secs(30));
    (tid, code, out, err)
}

/// [`trace_helper`] with the helper's `work` on the first online CPU, which must exit 0: (tid, stdout,
/// stderr).
fn traced(work: &[&str], args: &[&str], ready: Ready) -> (u32, String, String) {
    let cpu = first_cpu();
    let helper: Vec<&str> = work.iter().copied().chain([cpu.as_str()]).collect();
    let (tid, code, out, err) = trace_helper(&helper, &owned(args), ready);
    assert_eq!(code, 0, "{err}");
    (tid, out, err)
}

fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn first_cpu() -> String {
    util::online_cpus()[0].to_string()
}

const ARMED_JSON: Ready = Ready::Stdout("\"type\":\"armed\"");

/// [`trace_helper`] with `--json`, which must exit 0: the helper's tid, stdout, stderr and stdout's lines.
fn json_of_helper(helper: &[&str], args: &[&str]) -> (u32, String, String, Vec<schema::Line>) {
    let mut args = owned(args);
    args.push("--json".into());
    let (tid, code, out, err) = trace_helper(helper, &args, ARMED_JSON);
    assert_eq!(code, 0, "{err}");
    let lines = schema::parse(&out);
    (tid, out, err, lines)
}

/// The hit lines of a `--json` run.
fn json_hits(lines: &[schema::Line]) -> Vec<&schema::Hit> {
    lines
        .iter()
        .filter_map(|l| match l {
            schema::Line::Hit(h) => Some(h),
            _ => None,
        })
        .collect()
}

/// The summary, which must be the last line.
fn json_summary(lines: &[schema::Line]) -> &schema::Summary {
    match lines.last() {
        Some(schema::Line::Summary(s)) => s,
        other => panic!("the last line is not the summary: {other:?}"),
    }
}

live_test!(json_lines_fit_the_schema_and_carry_the_helpers_writes, {
    const N: usize = 200;
    let cpu = first_cpu();
    let (tid, out, err) = traced(
        &["write", &N.to_string()],
        &["write", "{addr}/8", "--json"],
        ARMED_JSON,
    );
    let lines = schema::parse(&out);
    assert!(
        matches!(lines.first(), Some(schema::Line::Header(h)) if h.version == 1 && h.targets.len() == 1)
    );
    assert!(matches!(lines.get(1), Some(schema::Line::Armed(_))));
    let summary = json_summary(&lines);
    let hits = json_hits(&lines);
    assert_eq!(summary.hits as usize, hits.len());
    assert_eq!(summary.stop, "signal");
    assert_eq!(summary.signal.as_deref(), Some("SIGINT"));
    let mine: Vec<&&schema::Hit> = hits.iter().filter(|h| h.tid == tid).collect();
    assert_eq!(mine.len(), N, "stderr: {err}");
    for h in &mine {
        assert_eq!(h.comm, "writer");
        assert_eq!(h.cpu.to_string(), cpu);
        assert!(h.target.starts_with("0x") && h.addr == h.target, "{h:?}");
        assert_eq!((h.len, h.access.as_str(), h.target_index), (8, "W", 0));
        assert!(!h.in_kernel && !h.ip.kernel);
        assert!(
            !h.chain.is_empty()
                && h.chain
                    .iter()
                    .all(|f| !f.kernel && f.addr.starts_with("0x"))
        );
    }
    assert!(
        err.contains(&format!("ksymwatch: {} hits", hits.len())),
        "stderr keeps the one-line summary: {err}"
    );
});

/// The `N filtered` of the end-of-run status line on stderr.
fn filtered_count(err: &str) -> u64 {
    err.split(", ")
        .find_map(|p| p.strip_suffix(" filtered"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no filtered count: {err}"))
}

live_test!(filters_drop_hits_before_printing_and_counting, {
    const N: usize = 100;
    let cpu = first_cpu();
    let helper = ["write", "100", cpu.as_str()];
    // The helper's stores run in user space: --user-only with its comm keeps every one of them.
    let (tid, out, _, lines) = json_of_helper(
        &helper,
        &["write", "{addr}", "--user-only", "--comm", "writer"],
    );
    let hits = json_hits(&lines);
    assert!(
        hits.iter().all(|h| h.comm == "writer" && !h.in_kernel),
        "{out}"
    );
    assert_eq!(hits.iter().filter(|h| h.tid == tid).count(), N);
    assert_eq!(json_summary(&lines).hits as usize, hits.len());

    // --kernel-only drops all of them; they are reported as filtered, not as hits.
    let (_, out, err, lines) = json_of_helper(
        &helper,
        &["write", "{addr}", "--kernel-only", "--tid", "{tid}"],
    );
    assert!(json_hits(&lines).is_empty(), "{out}");
    let summary = json_summary(&lines);
    assert_eq!(summary.hits, 0);
    assert!(summary.filtered >= N as u64, "{summary:?}");
    assert!(err.contains(" filtered,"), "{err}");
});

live_test!(filtered_hits_do_not_count_toward_count, {
    // The helper's 100 stores all run in user space: with --kernel-only, --count 1 is never met.
    let (_, out, err) = traced(
        &["write", "100"],
        &["write", "{addr}", "--kernel-only", "--count", "1"],
        Ready::Stdout("# armed"),
    );
    assert!(parse_hits(&out).is_empty(), "{out}");
    assert!(err.contains("ksymwatch: 0 hits"), "{err}");
    assert!(
        err.contains("stopped: signal SIGINT"),
        "the count was never met: {err}"
    );
    assert!(filtered_count(&err) >= 100, "{err}");
});

// A run that ends at --count still reports what the kernel dropped before it (the program's filtered
// count is read on every kind of stop): `--if 'value == 50'` over stores of 0..99 keeps one hit, and the 50
// stores before it are counted as filtered.
live_test!(
    a_run_stopped_by_count_still_counts_what_the_kernel_filtered,
    {
        let (_, out, err) = traced(
            &["sites", "100"],
            &["write", "{addr}", "--if", "value == 50", "--count", "1"],
            Ready::Stdout("# armed"),
        );
        assert_eq!(parse_hits(&out).len(), 1, "{out}");
        assert!(err.contains("stopped: count reached"), "{err}");
        assert!(filtered_count(&err) >= 50, "{err}");
    }
);

#[test]
fn contradictory_flags_are_a_one_line_usage_error() {
    let (code, out, err) = run(&["write", KERNEL_TARGET, "--kernel-only", "--user-only"]);
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--kernel-only and --user-only"), "{err}");
}

const ARMED_STDERR: Ready = Ready::Stderr("ksymwatch: armed ");

live_test!(
    quiet_prints_only_the_summary_of_the_helpers_kernel_writes,
    {
        const N: u64 = 40;
        let cpu = first_cpu();
        // read() from /dev/zero: the kernel writes the watched global on the helper's behalf, N times.
        let (_, out, err) = traced(
            &["read", &N.to_string()],
            &["write", "{addr}", "--quiet", "--tid", "{tid}", "--top", "0"],
            ARMED_STDERR,
        );
        assert!(
            out.lines().all(|l| l.starts_with('#')),
            "only the report: {out}"
        );
        // The kernel clears the 8 bytes with `rep stosb`: a trap per byte stored, so N reads give N*k hits.
        let hits: u64 = out
            .strip_prefix("# summary: ")
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no summary first: {out}"));
        assert!(
            hits >= N && hits.is_multiple_of(N),
            "{hits} hits for {N} reads: {out}"
        );
        assert!(
            out.contains("stopped: signal SIGINT"),
            "written on Ctrl-C: {out}"
        );
        assert!(out.contains("comm: writer "), "{out}");
        assert!(out.contains("#  => read_zero+0x"), "{out}");
        assert!(out.contains("#  => vfs_read+0x"), "{out}");
        assert!(
            out.contains(&format!("# hits by comm:\n# {hits:>8} 100.0%  writer\n")),
            "{out}"
        );
        assert!(out.contains(&format!("100.0%  cpu{cpu}\n")), "{out}");
        assert!(err.contains(&format!("ksymwatch: {hits} hits")), "{err}");
    }
);

live_test!(json_summary_record_counts_chains_ips_and_comms, {
    const N: u64 = 60;
    let (_, out, _) = traced(
        &["write", &N.to_string()],
        &["write", "{addr}", "--json", "--summary", "--tid", "{tid}"],
        ARMED_JSON,
    );
    let lines = schema::parse(&out);
    assert_eq!(
        json_hits(&lines).len() as u64,
        N,
        "the stream is still there"
    );
    let s = json_summary(&lines);
    assert_eq!(s.hits, N);
    let chains = s.chains.as_ref().expect("--summary adds chains");
    // One store in one loop: every hit has the same call path.
    assert_eq!(chains.len(), 1, "{chains:?}");
    assert_eq!(chains[0].count, N);
    assert_eq!(chains[0].comms[0].comm, "writer");
    assert!(chains[0].target.starts_with("0x"));
    let by_ip = s.by_ip.as_ref().expect("by_ip");
    assert_eq!(by_ip.iter().map(|i| i.count).sum::<u64>(), N);
    assert!(!by_ip[0].ip.kernel);
    let by_comm = s.by_comm.as_ref().expect("by_comm");
    assert_eq!((by_comm[0].comm.as_str(), by_comm[0].count), ("writer", N));
});

// "Who wrote" names the task as it was named when it wrote. 100 short-lived writers, each started by a
// bash loop on one CPU through `taskset` and `setarch` onto the other: every new task is first named after
// its parent (FORK), then renamed by each exec (COMM). Applied out of order with the samples, hits were
// credited to `taskset` or `bash`, and `--comm writer` dropped most of them.
live_test!(
    short_lived_writers_are_named_as_they_were_when_they_wrote,
    {
        let cpus = util::online_cpus();
        if cpus.len() < 2 {
            return util::skip("needs two online CPUs");
        }
        for tool in ["taskset", "setarch", "bash"] {
            if !ksymwatch_symbols::testing::have(tool) {
                return util::skip(format!("needs {tool}"));
            }
        }
        const RUNS: usize = 100;
        const STORES: usize = 5;
        let writer = util::helper("writer");
        // With ASLR off every run has its global at the same address: one system-wide watch sees them all.
        let banner = Command::new("setarch")
            .arg("-R")
            .arg(&writer)
            .args(["now", "0", "0"])
            .output()
            .expect("run writer");
        let banner = String::from_utf8_lossy(&banner.stdout);
        let addr = banner
            .split_whitespace()
            .find_map(|w| w.strip_prefix("addr="))
            .expect("addr")
            .to_string();
        let script = format!(
        "for i in $(seq {RUNS}); do taskset -c {} setarch -R {} now {STORES} {} >/dev/null; done",
        cpus[0],
        writer.display(),
        cpus[0]
    );
        for filter in [&[][..], &["--comm", "writer"][..]] {
            let mut args = vec!["write", addr.as_str(), "--json", "--summary"];
            args.extend_from_slice(filter);
            let t = util::Tracer::start_json(&args);
            let status = Command::new("taskset")
                .args(["-c", &cpus[1].to_string(), "bash", "-c", &script])
                .status()
                .expect("run the loop");
            assert!(status.success());
            let (code, out, err) = t.interrupt(Duration::from_secs(30));
            assert_eq!(code, 0, "{err}");
            let lines = schema::parse(&out);
            let hits = json_hits(&lines);
            let s = json_summary(&lines);
            let wrong: Vec<_> = hits.iter().filter(|h| h.comm != "writer").collect();
            assert!(wrong.is_empty(), "{filter:?}: named wrong: {wrong:?}");
            assert_eq!(
                s.filtered, 0,
                "{filter:?}: no hit is filtered out as another task"
            );
            // Each run: its own stores from user space, plus the kernel's when exec clears its .bss.
            let user = hits.iter().filter(|h| !h.ip.kernel).count();
            assert_eq!(user, RUNS * STORES, "{filter:?}: {err}");
            let by_comm = s.by_comm.as_ref().expect("by_comm");
            assert_eq!(by_comm.len(), 1, "{by_comm:?}");
            assert_eq!(by_comm[0].comm, "writer");
        }
    }
);

live_test!(folded_stacks_feed_inferno_and_flamegraph_writes_an_svg, {
    let cpu = first_cpu();
    let (_, code, out, err) = trace_helper(
        &["read", "20", &cpu],
        &owned(&["write", "{addr}", "--folded", "--tid", "{tid}"]),
        ARMED_STDERR,
    );
    assert_eq!(code, 0, "{err}");
    let mut total = 0u64;
    for line in out.lines() {
        let (stack, count) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        total += count.parse::<u64>().unwrap_or_else(|_| panic!("{line:?}"));
        let frames: Vec<&str> = stack.split(';').collect();
        assert_eq!(frames[0], "writer", "comm is the root: {line}");
        assert_eq!(
            frames.last(),
            Some(&"read_zero"),
            "the writer is the leaf: {line}"
        );
        assert!(frames.contains(&"vfs_read"), "{line}");
    }
    assert!(err.contains(&format!("ksymwatch: {total} hits")), "{err}");
    // inferno's own folded-stack reader takes it.
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(
        &mut inferno::flamegraph::Options::default(),
        out.lines(),
        &mut svg,
    )
    .expect("inferno reads --folded output");
    assert!(String::from_utf8_lossy(&svg).contains("vfs_read"));

    let path = std::env::temp_dir().join(format!("ksymwatch-flame-{}.svg", std::process::id()));
    let path_arg = path.display().to_string();
    let (_, code, out, err) = trace_helper(
        &["read", "20", &cpu],
        &owned(&[
            "write",
            "{addr}",
            "--tid",
            "{tid}",
            "--flamegraph",
            &path_arg,
        ]),
        Ready::Stdout("# armed"),
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        !parse_hits(&out).is_empty(),
        "the stream goes on beside the flame graph"
    );
    let svg = std::fs::read_to_string(&path).expect("flame graph written");
    let _ = std::fs::remove_file(&path);
    assert!(svg.contains("<svg") && svg.contains("read_zero") && svg.contains("writer"));
});

/// The total of a folded file's counts.
fn folded_total(text: &str) -> u64 {
    text.lines()
        .map(|l| {
            let (_, n) = l.rsplit_once(' ').unwrap_or_else(|| panic!("{l:?}"));
            n.parse::<u64>().unwrap_or_else(|_| panic!("{l:?}"))
        })
        .sum()
}

/// Outputs opened non-blocking and checked (see `bad_input` for the refusals) still take every ordinary
/// destination: /dev/null, a FIFO with a reader, an existing longer file (truncated), and a symlink in a
/// directory that is not shared with other users, whoever owns it.
#[test]
#[ignore = "live: arms hardware breakpoints (run by scripts/test as root)"]
fn outputs_other_than_a_new_file_still_work() {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let Some(_lock) = util::live() else { return };
    let limit = Duration::from_secs(30);
    let dir = std::env::temp_dir().join(format!("ksymwatch-outputs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let w = Writer::spinning(0);
    let target = w.target();
    let traced = |out: &str| {
        let (code, _, err) = util::run_within(
            &[
                "write",
                &target,
                "--duration",
                "300ms",
                &format!("--folded={out}"),
            ],
            limit,
        );
        assert_eq!(code, 0, "--folded={out}: {err}");
        let hits: u64 = err
            .split("ksymwatch: ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no summary: {err}"));
        hits
    };

    traced("/dev/null");
    assert!(std::fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());

    // The reader is there first (a non-blocking open for reading needs no writer); after ksymwatch closes
    // its end, everything it wrote is in the pipe, then end-of-file.
    let fifo = dir.join("fifo");
    util::mkfifo(&fifo);
    let mut reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let hits = traced(fifo.to_str().unwrap());
    assert!(hits > 0, "the spinning helper stored while the watch ran");
    let mut text = String::new();
    reader.read_to_string(&mut text).unwrap();
    assert_eq!(folded_total(&text), hits, "through the FIFO: {text}");

    let file = dir.join("stacks.folded");
    std::fs::write(&file, "stale ".repeat(100_000)).unwrap();
    let hits = traced(file.to_str().unwrap());
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains("stale"), "truncated before writing");
    assert_eq!(folded_total(&text), hits);

    // Someone else's symlink in a directory only root can write to is root's to follow.
    let link = dir.join("link");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    util::give_to_nobody(&link);
    let hits = traced(link.to_str().unwrap());
    assert_eq!(folded_total(&std::fs::read_to_string(&file).unwrap()), hits);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stdout_has_one_product() {
    for extra in ["--json", "--summary", "--quiet"] {
        let (code, out, err) = run(&["write", KERNEL_TARGET, "--folded", extra]);
        assert_eq!(code, 2, "{extra}: {err}");
        assert!(out.is_empty());
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("use --folded=FILE"), "{err}");
    }
    let (code, _, err) = run(&[
        "write",
        KERNEL_TARGET,
        "--flamegraph",
        "/nonexistent/dir/x.svg",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--flamegraph: cannot create"), "{err}");
}

live_test!(user_frames_are_named_from_the_writers_elf_symbols, {
    let cpu = first_cpu();
    let (tid, out, _, lines) = json_of_helper(
        &["write", "5", &cpu],
        &["write", "{addr}", "--tid", "{tid}"],
    );
    let hits = json_hits(&lines);
    assert_eq!(hits.len(), 5, "{out}");
    for h in hits {
        assert_eq!(h.tid, tid);
        // The store is in the helper's main(), a PIE: named through its mapping and PT_LOAD segments.
        assert_eq!(h.ip.sym.as_deref(), Some("main"), "{h:?}");
        assert_eq!(h.ip.binary.as_deref(), Some("writer"));
        assert!(
            h.ip.off > 0 && h.ip.size.is_some_and(|s| h.ip.off < s),
            "{h:?}"
        );
        // Its caller is in libc: the binary is known even where a stripped libc has no name for it.
        assert!(
            h.chain
                .iter()
                .any(|f| f.binary.as_deref().is_some_and(|b| b.starts_with("libc"))),
            "{h:?}"
        );
    }
    // The same names in ftrace form: ` => main+0xOFF [writer]`.
    let (_, out, _) = traced(
        &["write", "2"],
        &["write", "{addr}", "--tid", "{tid}"],
        Ready::Stdout("# armed"),
    );
    let hits = parse_hits(&out);
    assert_eq!(hits.len(), 2, "{out}");
    for h in &hits {
        assert!(h.ip.starts_with("main+0x"), "{h:?}");
        assert!(
            h.chain[0].starts_with("main+0x") && h.chain[0].ends_with(" [writer]"),
            "{h:?}"
        );
        // Its caller is named by libc's mapping, as JSON's `binary` (the program's name only outside
        // every mapping): `0x7f... [libc.so.6]` where a stripped libc has no symbol there.
        assert!(h.chain[1..].iter().any(|f| f.contains(" [libc")), "{h:?}");
    }
});

// A watched process chooses which files the root tracer opens: one running from a 4 GiB sparse copy of the
// helper still gets named frames, and the tracer reads the headers and tables it needs, not the file.
live_test!(
    a_writer_running_from_a_huge_sparse_file_is_named_without_reading_the_file,
    {
        let dir = util::temp_dir("ksymwatch-sparse-writer");
        let exe = dir.join("writer");
        std::fs::copy(util::helper("writer"), &exe).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&exe)
            .unwrap()
            .set_len(4 << 30)
            .unwrap();
        let w = Writer::start_binary(&exe, &["write", "3", &first_cpu()]);
        let mut t = util::Tracer::start(&[
            "write",
            &format!("0x{:x}", w.addr),
            "--tid",
            &w.tid.to_string(),
        ]);
        w.go_and_finish();
        let mut out = t.read_until(|l| l.contains(" [writer]"));
        let peak_kib = util::peak_rss_kib(t.child.id());
        let (code, rest, err) = t.interrupt(Duration::from_secs(30));
        out.push_str(&rest);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(code, 0, "{err}");
        let hits = parse_hits(&out);
        assert_eq!(hits.len(), 3, "{out}");
        for h in &hits {
            assert!(h.ip.starts_with("main+0x"), "{h:?}");
            assert!(h.chain[0].ends_with(" [writer]"), "{h:?}");
        }
        // Reading the file would take 4 GiB; the tracer itself needs a few MB.
        assert!(
            peak_kib < 256 * 1024,
            "peak RSS {peak_kib} KiB: the file was read, not its tables"
        );
    }
);

/// The helper in `write2` mode, started by hand: util::Writer knows only the first global's address.
struct TwoGlobals {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
    addrs: [String; 2],
    tid: u32,
}

impl TwoGlobals {
    fn start(n: usize, cpu: &str) -> TwoGlobals {
        let mut child = Command::new(util::helper("writer"))
            .args(["write2", &n.to_string(), cpu])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start writer");
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut banner = String::new();
        stdout.read_line(&mut banner).unwrap();
        let field = |k: &str| {
            banner
                .split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .unwrap_or_else(|| panic!("no {k} in {banner:?}"))
                .to_string()
        };
        let addrs = [field("addr="), field("addr2=")];
        let tid = field("tid=").parse().unwrap();
        TwoGlobals {
            child,
            stdin,
            stdout,
            addrs,
            tid,
        }
    }

    fn go_and_finish(mut self) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "go").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        while self.stdout.read_line(&mut line).unwrap() > 0 && line.trim_end() != "done" {
            line.clear();
        }
        self.stdin.take();
        let _ = self.child.wait();
    }
}

impl Drop for TwoGlobals {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

live_test!(two_targets_armed_together_and_named_in_every_mode, {
    const N: usize = 50;
    let cpu = first_cpu();
    let folded_path =
        std::env::temp_dir().join(format!("ksymwatch-two-{}.folded", std::process::id()));
    let folded_arg = format!("--folded={}", folded_path.display());
    for json in [true, false] {
        let w = TwoGlobals::start(N, &cpu);
        let tid = w.tid.to_string();
        let [a, b] = w.addrs.clone();
        let mut args = vec!["write", &a, &b, "--tid", &tid, "--summary", &folded_arg];
        if json {
            args.push("--json");
        }
        let ready = if json {
            ARMED_JSON
        } else {
            Ready::Stdout("# armed")
        };
        let t = Traced::start(&args, ready);
        w.go_and_finish();
        let (code, out, err) = t.interrupt(Duration::from_secs(30));
        assert_eq!(code, 0, "{err}");
        if json {
            let lines = schema::parse(&out);
            let schema::Line::Header(h) = &lines[0] else {
                panic!("{out}")
            };
            assert_eq!(
                h.targets
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>(),
                [a.as_str(), b.as_str()]
            );
            let hits = json_hits(&lines);
            for (i, name) in [&a, &b].into_iter().enumerate() {
                let of: Vec<_> = hits.iter().filter(|h| h.target_index == i).collect();
                assert_eq!(of.len(), N, "target {name}: {err}");
                assert!(of.iter().all(|h| &h.target == name && &h.addr == name));
            }
            let chains = json_summary(&lines).chains.as_ref().unwrap();
            assert_eq!(chains.len(), 2, "one chain per target: {chains:?}");
            assert!(chains
                .iter()
                .all(|c| c.count == N as u64 && c.target == [&a, &b][c.target_index].as_str()));
        } else {
            assert!(
                out.contains(&format!("# target: {a} addr={a} len=8"))
                    && out.contains(&format!("# target: {b} "))
            );
            let hits = parse_hits(&out);
            assert_eq!(hits.iter().filter(|h| h.target == a).count(), N, "{err}");
            assert_eq!(hits.iter().filter(|h| h.target == b).count(), N, "{err}");
            assert!(out.contains(&format!("hits  50.0%  target={a}")), "{out}");
            assert!(out.contains(&format!("hits  50.0%  target={b}")), "{out}");
        }
        let folded = std::fs::read_to_string(&folded_path).expect("folded file");
        assert!(
            folded
                .lines()
                .any(|l| l.starts_with(&format!("{a};writer;"))),
            "{folded}"
        );
        assert!(
            folded
                .lines()
                .any(|l| l.starts_with(&format!("{b};writer;"))),
            "{folded}"
        );
    }
    let _ = std::fs::remove_file(&folded_path);
});

live_test!(
    status_line_only_on_a_terminal_and_cleared_before_the_report,
    {
        let w = Writer::spinning(0);
        let target = w.target();
        // Not a terminal: not a byte of it.
        let (code, out, err) = run(&["write", &target, "--quiet", "--duration", "600ms"]);
        assert_eq!(code, 0, "{err}");
        assert!(
            !err.contains('\r') && !err.contains('\x1b') && !err.contains("cpus armed"),
            "{err:?}"
        );
        assert!(!out.contains("cpus armed"));
        // A terminal (script(1) gives the command a pty for stdout and stderr; --quiet keeps stdout free).
        if Command::new("script").arg("--version").output().is_err() {
            util::skip("no script(1) to give ksymwatch a terminal");
            return;
        }
        let cmd = format!("{BIN} write {target} --quiet --duration 1500ms --top 1");
        let tty = Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .output()
            .expect("script");
        let text = String::from_utf8_lossy(&tty.stdout);
        assert!(tty.status.success(), "{text}");
        let last_status = text
            .rfind("cpus armed")
            .unwrap_or_else(|| panic!("no status line: {text:?}"));
        let report = text.find("# summary: ").expect("report");
        assert!(
            last_status < report,
            "status drawn after the report: {text:?}"
        );
        // Cleared (erase-line) between the last draw and the report.
        assert!(text[last_status..report].contains("\x1b[2K"), "{text:?}");
    }
);

// Issue 38 item 6, live: a thread that names itself `x\n => evil+0x1`, then ESC, CR and a backslash,
// storing into a watched global. Every hit is exactly one line, its name escaped; no chain line is forged
// and no control character reaches the output (the summary's comm table included).
live_test!(a_hostile_thread_name_cannot_forge_lines, {
    const N: usize = 20;
    let names = ["x\n => evil+0x1", "\u{1b}[2J\r\\e"];
    let shown = ["x\\n => evil+0x1", "\\x1b[2J\\r\\\\e"];
    let mut w = util::Writer::start_binary(
        &util::helper("renamer"),
        &[&N.to_string(), names[0], names[1]],
    );
    let pid = w.pid.to_string();
    let t = util::Tracer::start(&[
        "write",
        "-p",
        &pid,
        "target_var",
        "--summary",
        "--no-status",
    ]);
    w.go();
    let (code, out, err) = t.interrupt(std::time::Duration::from_secs(30));
    w.finish();
    assert_eq!(code, 0, "{err}");
    assert!(
        !out.contains(['\u{1b}', '\r']) && !err.contains(['\u{1b}', '\r']),
        "{out:?}"
    );
    assert!(!out.lines().any(|l| l.starts_with(" => evil")), "{out}");
    let stores: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(": target_var W ip=main+"))
        .collect();
    assert_eq!(stores.len(), 2 * N, "{out}");
    for (i, line) in stores.iter().enumerate() {
        let name = shown[i / N];
        assert!(
            line.trim_start().starts_with(&format!("{name}-{pid} ")),
            "{line}"
        );
    }
    // Every line of the stream is a hit, a frame of one, or a `#` line.
    assert!(
        out.lines().all(|l| l.starts_with('#')
            || l.starts_with(" => ")
            || l.contains(": target_var W ip=")),
        "{out}"
    );
    for name in shown {
        assert!(
            out.contains(&format!("%  {name}\n")),
            "summary by comm: {out}"
        );
    }
});
