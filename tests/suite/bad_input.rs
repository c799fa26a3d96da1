//! Every row of docs/bad-input.md's table: a one-line error naming the problem and the fix, the
//! documented exit code, and nothing armed. Rows that need no breakpoint run without the live lock.

use crate::util;

use ksymwatch_symbols::testing::assert_mentions;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use util::{rejects, run};

/// A kallsyms-format fixture with real data symbols, duplicates and a tiny variable.
const FIXTURE: &str = "\
ffffffff81000000 T _text
ffffffff81000100 t dup_static
ffffffff81000200 t dup_static
ffffffff81000300 T vfs_read
ffffffff83000000 D __start_init_stack
ffffffff83000100 D tiny
ffffffff83000104 D jiffies
ffffffff8300010c D jiffies_64
ffffffff83000114 D pid_max
ffffffff83000118 d var_a
ffffffff83000120 d var_b
ffffffff83000128 d var_c
ffffffff83000130 d var_d
ffffffff83000138 d var_e
ffffffff83000140 d var_f
ffffffff83000148 d var_g
ffffffff83000150 d var_h
ffffffff83000158 d var_i
ffffffff83000160 d var_j
ffffffff83000168 d var_k
ffffffff83000170 d var_l
ffffffff83000178 d var_m
ffffffff83000180 D __start_once
";

/// This test binary's scratch directory.
fn scratch() -> PathBuf {
    util::temp_dir("ksymwatch-bad-input")
}

fn fixture(name: &str, text: &str) -> PathBuf {
    let p = scratch().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// [`FIXTURE`] written as `name`: its path, for `--kallsyms`.
fn kallsyms(name: &str) -> String {
    fixture(name, FIXTURE).to_str().unwrap().to_string()
}

/// A FIFO nobody opens.
fn fifo(name: &str) -> PathBuf {
    let p = scratch().join(name);
    let _ = std::fs::remove_file(&p);
    util::mkfifo(&p);
    p
}

/// [`rejects`] (exit 2) of `args` run on [`FIXTURE`], written as `name`, for kallsyms.
fn rejects_on_fixture(name: &str, args: &[&str], needles: &[&str]) -> String {
    let k = kallsyms(name);
    rejects(&[args, &["--kallsyms", &k]].concat(), 2, needles)
}

#[test]
fn unknown_symbol_suggests_close_names() {
    rejects_on_fixture(
        "k1",
        &["write", "jiffes"],
        &["unknown symbol `jiffes`", "did you mean jiffies"],
    );
}

#[test]
fn missing_data_symbol_without_kallsyms_all_names_the_fix() {
    // The running kernel's kallsyms has no data symbols.
    rejects(
        &["write", "jiffies"],
        2,
        &["CONFIG_KALLSYMS_ALL", "--vmlinux", "--system-map"],
    );
}

#[test]
fn ambiguous_symbol_lists_candidates_and_how_to_choose() {
    rejects_on_fixture(
        "k2",
        &["write", "dup_static"],
        &[
            "ambiguous",
            "dup_static@0=0xffffffff81000100",
            "dup_static@1=0xffffffff81000200",
            "0xADDR",
        ],
    );
    rejects_on_fixture(
        "k2",
        &["write", "dup_static@2"],
        &["only 2 symbols named `dup_static`"],
    );
}

#[test]
fn bad_ranges() {
    rejects(&["write", "0x10001/8"], 2, &["not naturally aligned", "/1"]);
    rejects(
        &["write", "0x10004"],
        2,
        &["not naturally aligned", "0x10004/4"],
    );
    rejects(&["write", "0x10000/3"], 2, &["1, 2, 4 or 8"]);
    rejects(&["write", "0x10000/16"], 2, &["1, 2, 4 or 8"]);
    rejects(&["write", "0x0"], 2, &["address 0"]);
    rejects(
        &["write", "0x0000900000000000"],
        2,
        &["not a canonical x86-64 address"],
    );
    // The page below the kernel-space boundary: canonical, mapped by no process, a kernel address to
    // the kernel (refused as one where such breakpoints are, with advice to watch a user address).
    for target in ["0x7ffffffff000", "0x7ffffffffff8", "0x7fffffffeffc/8"] {
        rejects(
            &["write", target],
            2,
            &["guard page at the top of user space", "0x7fffffffefff"],
        );
    }
    rejects(&["write", "jiffies+"], 2, &["bad target", "offset"]);
    rejects_on_fixture(
        "k3",
        &["write", "tiny+4"],
        &["past the end of `tiny`", "size 0x4"],
    );
}

#[test]
fn target_numbers_are_quoted_as_typed() {
    for (target, says) in [
        ("x/-8", "length `-8` cannot be negative"),
        ("x/+8", "length `+8` takes no sign"),
        ("x@-1", "symbol index `-1` cannot be negative"),
        ("x+-1", "offset `-1` cannot be negative"),
        ("x+", "`+` must be followed by an offset"),
        (
            "0xffffffffffffffffff",
            "address `0xffffffffffffffffff` overflows 64 bits",
        ),
    ] {
        let line = rejects(
            &["write", target],
            2,
            &[&format!("bad target `{target}`: {says}")],
        );
        assert!(!line.contains("``"), "an empty token is quoted: {line}");
        // `resolve` parses the same grammar with the same words.
        rejects(&["resolve", target], 2, &[says]);
    }
}

#[test]
fn bad_kallsyms_files() {
    let empty = fixture("empty", "");
    rejects(
        &["write", "jiffies", "--kallsyms", empty.to_str().unwrap()],
        2,
        &["holds no symbols"],
    );
    let garbage = fixture("garbage", "this is not kallsyms\n");
    rejects(
        &["write", "jiffies", "--kallsyms", garbage.to_str().unwrap()],
        2,
        &["garbage:1:"],
    );
    let zeroed = fixture(
        "zeroed",
        "0000000000000000 T _text\n0000000000000000 D jiffies\n",
    );
    rejects(
        &["write", "jiffies", "--kallsyms", zeroed.to_str().unwrap()],
        2,
        &["every address as 0", "kptr_restrict"],
    );
    rejects(
        &["write", "jiffies", "--kallsyms", "/nonexistent/kallsyms"],
        2,
        &["cannot read /nonexistent/kallsyms"],
    );
}

#[test]
fn bad_options() {
    let refusals: [(&[&str], &[&str]); 14] = [
        (
            &["write", "0x10000", "--duration", "0"],
            &["greater than zero"],
        ),
        (
            &["write", "0x10000", "--duration", "soon"],
            &["not a duration"],
        ),
        (&["write", "0x10000", "--count", "0"], &["--count"]),
        (&["write", "0x10000", "--cpus", "0-"], &["not a CPU list"]),
        (
            &["write", "0x10000", "--cpus", "4095"],
            &["cpu 4095 does not exist"],
        ),
        (
            &["write", "0x10000", "--buffer-pages", "3"],
            &["power of two"],
        ),
        (
            &[
                "write", "0x10000", "0x10008", "0x10010", "0x10018", "0x10020",
            ],
            &["at most 4"],
        ),
        (&["write"], &["<TARGET>"]),
        (&["frobnicate"], &["unrecognized subcommand"]),
        (
            &["write", "0x10000", "--json", "--format", "otlp-json"],
            &["--json is --format json, and --format otlp-json was given too; give one of them"],
        ),
        (
            &["write", "0x10000", "--format", "yaml"],
            &["invalid value 'yaml'", "otlp-json"],
        ),
        (
            &["write", "0x10000", "--folded", "--format", "otlp-json"],
            &["--folded writes stdout, and so does --format otlp-json; use --folded=FILE"],
        ),
        (
            &["write", "0x10000", "--perfetto", "-"],
            &[
                "--perfetto writes a file",
                "`-` is not stdout",
                "--perfetto trace.pftrace",
            ],
        ),
        (
            &["write", "0x10000", "--flamegraph", "-"],
            &[
                "--flamegraph writes a file",
                "`-` is not stdout",
                "--flamegraph flame.svg",
            ],
        ),
    ];
    for (args, needles) in refusals {
        rejects(args, 2, needles);
    }
    for prio in ["0", "100", "high"] {
        rejects(
            &["write", "0x10000", "--realtime", prio],
            2,
            &["--realtime", "from 1 to 99 or `off`"],
        );
    }
}

live_test!(offline_cpu_in_the_list_is_refused, {
    if !util::can_hotplug_cpu1() {
        return;
    }
    let _guard = util::OnlineGuard(1);
    util::set_online(1, false);
    rejects(
        &["write", "0x10000", "--cpus", "0-1"],
        2,
        &["cpu 1 is offline", "echo 1 >"],
    );
});

#[test]
fn unprivileged_user_gets_exit_4_with_the_paranoid_level() {
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap();
    if paranoid.trim().parse::<i32>().unwrap() < 0 {
        util::skip("perf_event_paranoid is -1: unprivileged system-wide events are allowed here");
        return;
    }
    let Some((code, _, err)) = util::run_as_nobody(&["write", "0x10000"]) else {
        return;
    };
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("root or CAP_PERFMON")
            && err.contains(&format!("perf_event_paranoid is {}", paranoid.trim())),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

live_test!(text_symbol_watched_for_writes_warns_and_still_runs, {
    // The warning comes from resolving the target: a dry run makes the whole plan and arms nothing.
    let (code, out, err) = run(&["write", "vfs_read", "--dry-run"]);
    assert_eq!(code, util::kernel_dry_run_code(), "{err}");
    assert!(
        err.contains("warning: `vfs_read` is a text symbol"),
        "{err}"
    );
    assert!(out.contains("# dry run: nothing armed"), "{out}");
    if util::kernel_part_skipped("arming the text symbol") {
        return;
    }
    let (code, out, err) = run(&["write", "vfs_read", "--duration", "200ms"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("warning: `vfs_read` is a text symbol"),
        "{err}"
    );
    assert!(out.contains("# armed"), "{out}");
});

/// `/dev/full`, open for writing: every write fails with ENOSPC.
fn dev_full() -> std::fs::File {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap()
}

/// Runs ksymwatch with stdout on a full disk (`>/dev/full`) and checks it says so and exits 1, as any
/// lost output does.
fn fails_on_a_full_stdout(args: &[&str]) {
    let out = std::process::Command::new(util::BIN)
        .args(args)
        .stdout(dev_full())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(
        err.contains("writing output") && err.contains("No space left"),
        "{args:?}: {err}"
    );
}

live_test!(output_that_cannot_be_written_is_a_runtime_error, {
    let w = util::Writer::spinning(0);
    fails_on_a_full_stdout(&["write", &w.target(), "--duration", "2s"]);
});

/// `resolve`'s answer lost to a full disk is an error too, not a silent exit 0.
#[test]
fn resolve_on_a_full_stdout_is_a_runtime_error() {
    fails_on_a_full_stdout(&["resolve", "vfs_read"]);
}

/// Runs ksymwatch with stderr on a full disk (`2>/dev/full`) and stdout discarded; returns the exit code.
fn exit_with_full_stderr(args: &[&str]) -> i32 {
    let status = std::process::Command::new(util::BIN)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(dev_full())
        .status()
        .unwrap();
    // 101 is Rust's panic exit: `eprintln!` panics when stderr cannot be written.
    status.code().unwrap_or(-1)
}

#[test]
fn stderr_that_cannot_be_written_does_not_change_the_exit_code() {
    let k = &kallsyms("k-full");
    // A clean run that writes nothing to stderr, then ones whose error line is lost.
    assert_eq!(
        exit_with_full_stderr(&["resolve", "tiny", "--kallsyms", k]),
        0
    );
    assert_eq!(exit_with_full_stderr(&["write", "x/-8"]), 2);
    assert_eq!(
        exit_with_full_stderr(&["resolve", "jiffes", "--kallsyms", k]),
        2
    );
    // clap's usage errors are printed by us, through the same non-panicking path.
    assert_eq!(exit_with_full_stderr(&["frobnicate"]), 2);
    assert_eq!(exit_with_full_stderr(&["write"]), 2);
    assert_eq!(exit_with_full_stderr(&["write", "0x10000", "--bogus"]), 2);
}

live_test!(
    stderr_that_cannot_be_written_does_not_change_a_watch_exit_code,
    {
        let w = util::Writer::spinning(0);
        let target = w.target();
        // The summary line (and, with --quiet, the `armed` note) go to stderr; losing them is not an error.
        for extra in [&[][..], &["--json"], &["--quiet"]] {
            let mut args = vec!["write", &target, "--duration", "300ms"];
            args.extend(extra);
            assert_eq!(exit_with_full_stderr(&args), 0, "{args:?}");
        }
        // A warning on the way (a text symbol watched for writes), then a plan printed and a clean stop.
        assert_eq!(
            exit_with_full_stderr(&["write", "vfs_read", "--dry-run"]),
            util::kernel_dry_run_code()
        );
        // A note on the way (a --comm longer than the kernel keeps), then a clean stop of a live watch.
        assert_eq!(
            exit_with_full_stderr(&[
                "write",
                &target,
                "--comm",
                "a-very-long-task-name",
                "--duration",
                "200ms"
            ]),
            0
        );
        // A run that fails to arm keeps its own code: the holder takes what is left of cpu0 (it stops at the
        // first refusal, so cpu0 is full even if something outside the live lock holds a register too).
        let holder = util::Holder::start(0, 4);
        assert_eq!(
            exit_with_full_stderr(&["write", "0x10000", "--duration", "300ms"]),
            3
        );
        drop(holder);
        assert_eq!(
            exit_with_full_stderr(&["check"]),
            util::check_code_when_all_free()
        );
    }
);

live_test!(check_on_a_full_stdout_is_a_runtime_error_not_a_panic, {
    fails_on_a_full_stdout(&["check"]);
});

#[test]
fn special_files_as_symbol_inputs_are_refused_at_once() {
    for dev in ["/dev/zero", "/dev/urandom"] {
        rejects(
            &["write", "jiffies", "--kallsyms", dev],
            2,
            &[
                &format!("--kallsyms {dev}: not a regular file (a character device)"),
                "give a kallsyms text file",
            ],
        );
    }
    rejects(
        &["write", "jiffies", "--system-map", "/dev/zero"],
        2,
        &[
            "--system-map /dev/zero: not a regular file (a character device)",
            "give a System.map text file",
        ],
    );
    // A FIFO with no writer: nothing would ever arrive, and a blocking open would never return.
    let k = fifo("kallsyms-fifo");
    let k = k.to_str().unwrap();
    rejects(
        &["write", "jiffies", "--kallsyms", k],
        2,
        &[&format!("--kallsyms {k}: not a regular file (a FIFO)")],
    );
    let v = fifo("vmlinux-fifo");
    let v = v.to_str().unwrap();
    rejects(
        &["write", "jiffies", "--vmlinux", v],
        2,
        &[&format!("--vmlinux {v}: not a regular file (a FIFO)")],
    );
    // Beside a good System.map, kallsyms is read only to compare with; a FIFO there is still refused.
    let map = fixture(
        "map",
        "ffffffff81000000 T _text\nffffffff83000104 D jiffies\n",
    );
    rejects(
        &[
            "write",
            "jiffies",
            "--system-map",
            map.to_str().unwrap(),
            "--kallsyms",
            k,
        ],
        2,
        &[&format!("--kallsyms {k}: not a regular file (a FIFO)")],
    );
    // `resolve` reads through the same loaders.
    rejects(
        &["resolve", "jiffies", "--kallsyms", "/dev/zero"],
        2,
        &["--kallsyms /dev/zero: not a regular file (a character device)"],
    );
}

#[test]
fn a_directory_is_not_a_vmlinux() {
    for cmd in ["write", "resolve"] {
        rejects(
            &[cmd, "jiffies", "--vmlinux", "/tmp"],
            2,
            &[
                "--vmlinux /tmp: not a regular file (a directory)",
                "name the vmlinux ELF file itself",
                "/tmp/vmlinux",
            ],
        );
    }
}

#[test]
fn output_fifo_without_a_reader_is_refused_at_once() {
    let f = fifo("out-fifo");
    let f = f.to_str().unwrap();
    rejects(
        &[
            "write",
            "0x10000",
            "--duration",
            "1s",
            &format!("--folded={f}"),
        ],
        2,
        &[
            &format!("--folded {f}: a FIFO with no reader"),
            "start its reader first",
        ],
    );
    rejects(
        &["write", "0x10000", "--duration", "1s", "--flamegraph", f],
        2,
        &[&format!("--flamegraph {f}: a FIFO with no reader")],
    );
}

#[test]
fn outputs_that_are_no_files_are_refused() {
    rejects(
        &[
            "write",
            "0x10000",
            "--duration",
            "1s",
            "--flamegraph",
            "/tmp",
        ],
        2,
        &["--flamegraph /tmp: not a file to write (a directory)"],
    );
    rejects(
        &["write", "0x10000", "--duration", "1s", "--perfetto", "/tmp"],
        2,
        &["--perfetto /tmp: not a file to write (a directory)"],
    );
    // A block device would be overwritten: refused without being opened (if this machine has one).
    let block = std::fs::read_dir("/dev").ok().and_then(|d| {
        d.flatten().map(|e| e.path()).find(|p| {
            use std::os::unix::fs::FileTypeExt;
            std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_block_device())
        })
    });
    if let Some(b) = block {
        let b = b.to_str().unwrap();
        rejects(
            &[
                "write",
                "0x10000",
                "--duration",
                "1s",
                &format!("--folded={b}"),
            ],
            2,
            &[&format!(
                "--folded {b}: not a file to write (a block device)"
            )],
        );
    }
}

/// A directory like /tmp (mode 1777, root's) of the test's own, and `path` in it for the test to plant
/// something at; removed on drop.
struct Planted {
    dir: PathBuf,
    path: PathBuf,
}

impl Planted {
    fn new(tag: &str) -> Planted {
        let dir =
            std::env::temp_dir().join(format!("ksymwatch-sticky-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let path = dir.join("out");
        Planted { dir, path }
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        util::skip("planting a file owned by another user needs root");
    }
    root
}

#[test]
fn a_symlink_planted_in_a_sticky_directory_is_not_followed() {
    if !running_as_root() {
        return;
    }
    let victim = fixture("victim", "untouched\n");
    let planted = Planted::new("link");
    std::os::unix::fs::symlink(&victim, &planted.path).unwrap();
    util::give_to_nobody(&planted.path);
    let p = planted.path.to_str().unwrap();
    for (flag, args) in [
        ("--folded", vec![format!("--folded={p}")]),
        (
            "--flamegraph",
            vec!["--flamegraph".to_string(), p.to_string()],
        ),
    ] {
        let mut argv = vec!["write", "0x10000", "--duration", "1s"];
        argv.extend(args.iter().map(String::as_str));
        rejects(
            &argv,
            2,
            &[
                &format!("{flag} {p}: refusing to follow a symbolic link owned by uid 65534"),
                "sticky world-writable directory",
                "protected_symlinks",
            ],
        );
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "untouched\n",
            "{flag}: the symlink's target must not be written"
        );
    }
    // A symlink one level up is followed no more than the last one.
    let deeper = format!("--folded={p}/x");
    std::fs::remove_file(&planted.path).unwrap();
    std::os::unix::fs::symlink(scratch(), &planted.path).unwrap();
    util::give_to_nobody(&planted.path);
    rejects(
        &["write", "0x10000", "--duration", "1s", &deeper],
        2,
        &["refusing to follow a symbolic link owned by uid 65534"],
    );
    assert!(!scratch().join("x").exists());
}

#[test]
fn a_file_planted_in_a_sticky_directory_is_not_written() {
    if !running_as_root() {
        return;
    }
    let planted = Planted::new("file");
    std::fs::write(&planted.path, "theirs\n").unwrap();
    util::give_to_nobody(&planted.path);
    let p = planted.path.to_str().unwrap();
    rejects(
        &[
            "write",
            "0x10000",
            "--duration",
            "1s",
            &format!("--folded={p}"),
        ],
        2,
        &[
            &format!("--folded {p}: refusing to write to a regular file owned by uid 65534"),
            "protected_regular",
        ],
    );
    assert_eq!(std::fs::read_to_string(&planted.path).unwrap(), "theirs\n");
}

// Watched one breakpoint per thread (`--per-thread`), a process with more threads than the descriptor
// limit leaves room for (one per thread, CPU and target) is refused before a single event is opened, with
// the ways out named; watched the default way (one breakpoint per CPU) it fits whatever its threads.
live_test!(
    a_process_too_big_for_the_descriptor_limit_is_refused_up_front,
    {
        if !util::require("prlimit") {
            return;
        }
        let h = util::Writer::threads(&["count", "100"]);
        let pid = h.pid.to_string();
        // `write -p PID target_var` and `extra`, with room for 128 descriptors.
        let with_128_fds = |extra: &[&str]| {
            std::process::Command::new("prlimit")
                .args([
                    "--nofile=128:128",
                    util::BIN,
                    "write",
                    "-p",
                    &pid,
                    "target_var",
                ])
                .args(extra)
                .output()
                .expect("run prlimit")
        };
        let out = with_128_fds(&["--per-thread"]);
        let per_cpu = with_128_fds(&["--duration", "200ms"]);
        h.finish();
        assert_eq!(
            per_cpu.status.code(),
            Some(0),
            "one breakpoint per CPU needs no descriptor per thread: {}",
            String::from_utf8_lossy(&per_cpu.stderr)
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{err}");
        // One per thread and CPU, and each thread's guard event.
        let need = 101 * (util::online_cpus().len() + 1);
        assert!(
            err.contains("watching 101 threads on ")
                && err.contains(&format!("takes {need} file descriptors")),
            "{err}"
        );
        assert!(
            err.contains("limit of 128") && err.contains("-- CMD"),
            "{err}"
        );
        assert!(!String::from_utf8_lossy(&out.stdout).contains("# armed"));
    }
);

/// `--control FIFO` hands the watch to whoever can write the FIFO: one of another user, one writable by
/// group or others, or a path that is a symlink (or not a FIFO at all) is refused before anything is armed,
/// whatever its form; a FIFO of ours, mode 0600, is taken.
#[test]
fn a_control_fifo_someone_else_can_write_is_refused_before_arming() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        util::skip("giving a FIFO to another user needs root");
        return;
    }
    let theirs = fifo("ctl-theirs");
    util::give_to_nobody(&theirs);
    let p = theirs.to_str().unwrap();
    rejects(
        &["write", "0x1000", "--control", p],
        2,
        &["--control", "belongs to uid 65534", "new path"],
    );
    for mode in [0o666, 0o620, 0o602] {
        let open = fifo("ctl-open");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(mode)).unwrap();
        rejects(
            &["write", "0x1000", "--control", open.to_str().unwrap()],
            2,
            &["--control", "writable by others", "chmod go-w"],
        );
    }
    let target = fifo("ctl-mine");
    let link = scratch().join("ctl-link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&target, &link).unwrap();
    rejects(
        &["write", "0x1000", "--control", link.to_str().unwrap()],
        2,
        &["--control", "not a FIFO"],
    );
    let plain = fixture("ctl-plain", "off\n");
    rejects(
        &["write", "0x1000", "--control", plain.to_str().unwrap()],
        2,
        &["--control", "not a FIFO"],
    );
}

/// A bare trailing `--` is a missing command, not a system-wide watch.
#[test]
fn an_empty_command_after_dashes_is_refused() {
    rejects(
        &["write", "0x1000", "--"],
        2,
        &["`--` must be followed by a command"],
    );
}

/// An argument that is not UTF-8 is named (its place, its bytes, the option it follows), where clap says
/// only that one of them is not; a launched command's own arguments are passed on as they are.
#[test]
fn an_argument_that_is_not_utf8_is_named() {
    use std::os::unix::ffi::OsStrExt;
    let out = std::process::Command::new(util::BIN)
        .args(["write", "--comm"])
        .arg(std::ffi::OsStr::from_bytes(b"\xffab"))
        .arg("0x1000")
        .output()
        .expect("ksymwatch runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("ksymwatch: error: argument 3 (`\\xffab`, after `--comm`) is not UTF-8"),
        "{err}"
    );
}

/// Launch mode resolves `LIB:SYM` before the command runs any code of its own (at its program's entry
/// point, where ld.so has mapped every library it links): an unknown symbol of a linked library, a library
/// the program does not link (one it would dlopen later) or no such library at all is exit 2, and the
/// command never ran (`touch` never made its file).
#[test]
fn a_launch_target_in_a_library_is_resolved_before_the_command_runs() {
    let dir = scratch();
    for (i, (target, needle)) in [
        (
            "libc:ksw_no_such_symbol",
            "unknown symbol `ksw_no_such_symbol`",
        ),
        ("libm:signgam", "not loaded when the command starts"),
        (
            "ksw_no_such_lib:environ",
            "not loaded when the command starts",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let marker = dir.join(format!("ran-{i}"));
        let _ = std::fs::remove_file(&marker);
        rejects(
            &[
                "write",
                target,
                "--",
                "/usr/bin/touch",
                marker.to_str().unwrap(),
            ],
            2,
            &[needle],
        );
        assert!(!marker.exists(), "{target}: the command ran");
    }
}

/// `(s)value < 200` on a 1-byte target once became `< -56`: a constant past the signed range of a signed
/// comparison is exit 2 naming the range, for `value` and `old`, on 1-, 2- and 4-byte watches.
#[test]
fn a_signed_condition_constant_out_of_range_is_refused() {
    for (target, cond, range) in [
        ("0x1000/1", "(s)value < 200", "(-128 to 127)"),
        ("0x1000/2", "(s)old >= 40000", "(-32768 to 32767)"),
        (
            "0x1000/4",
            "value == 1 || (s)value > 3000000000",
            "(-2147483648 to 2147483647)",
        ),
    ] {
        rejects(
            &["write", target, "--if", cond],
            2,
            &["does not fit a signed", range, "drop `(s)`"],
        );
    }
}

/// A System.map (or a full kallsyms) lists per-CPU variables at their offsets in the per-CPU area, which
/// on x86-64 is linked at 0: `percpu_thing` at 0x31804 is not an address. Without BTF knowing the variable
/// (these names are made up, so it does not), it is refused with exit 2, per-CPU named, in every form
/// (`+OFF`, `/LEN`, `resolve`) and so is any other symbol below the kernel half; never armed at 0x31804.
/// (Variables BTF knows are watched at each CPU's copy: the live test in live_typed.)
#[test]
fn a_per_cpu_variable_or_an_absolute_symbol_is_not_armed_at_its_offset() {
    let map = fixture(
        "percpu.map",
        "0000000000000000 D __per_cpu_start\n\
         0000000000000004 D fake_cpu_number\n\
         0000000000031804 D percpu_thing\n\
         0000000000040000 D __per_cpu_end\n\
         0000000000100000 A some_absolute\n\
         ffffffff81000000 T _text\n\
         ffffffff83000000 D jiffies\n",
    );
    let m = map.to_str().unwrap();
    for t in [
        "percpu_thing",
        "percpu_thing+8",
        "percpu_thing/4",
        "fake_cpu_number",
    ] {
        for verb in ["write", "rw"] {
            rejects(
                &[verb, t, "--system-map", m, "--force"],
                2,
                &[
                    "is a per-CPU variable",
                    "offset in the per-CPU area",
                    "0xADDR",
                ],
            );
        }
        if !t.contains('/') {
            rejects(
                &["resolve", t, "--system-map", m],
                2,
                &["is a per-CPU variable"],
            );
        }
    }
    // A member path: BTF knows runqueues' type; `resolve` says a watch covers each CPU's copy, and which
    // cast watches one.
    if std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        rejects(
            &["resolve", "runqueues.nr_running", "--system-map", m],
            2,
            &[
                "is a per-CPU variable",
                "watches each CPU's copy",
                "'(struct rq)0xADDR.nr_running'",
            ],
        );
    }
    rejects(
        &["write", "some_absolute", "--system-map", m, "--force"],
        2,
        &["not a kernel address"],
    );
    // The same offsets in a kallsyms-format file (CONFIG_KALLSYMS_ALL lists them so).
    let k = fixture(
        "percpu.kallsyms",
        "0000000000000000 D __per_cpu_start\n0000000000031804 d percpu_thing\n0000000000040000 D __per_cpu_end\n\
         ffffffff81000000 T _text\nffffffff83000000 D jiffies\n",
    );
    rejects(
        &["write", "percpu_thing", "--kallsyms", k.to_str().unwrap()],
        2,
        &["is a per-CPU variable"],
    );
    // Where BPF may not load (CAP_PERFMON without CAP_BPF), the copies cannot be placed: exit 4, saying why
    // and how to watch one copy by hand.
    if std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        if let Some((code, _, err)) = util::run_as_nobody_with(
            &["perfmon"],
            &["write", "runqueues.nr_running", "--dry-run"],
        ) {
            assert_eq!(code, 4, "{err}");
            assert_mentions(
                &err,
                &[
                    "is a per-CPU variable",
                    "per-CPU bases cannot be had",
                    "CAP_BPF",
                    "'(struct rq)0xADDR.nr_running'",
                ],
            );
            assert_eq!(err.lines().count(), 1, "{err}");
        }
    }
    // `--percpu-cpu` picks a kernel per-CPU variable's copy: a process watch has none.
    rejects(
        &["write", "x", "-p", "1", "--percpu-cpu", "0"],
        2,
        &["--percpu-cpu 0", "drop --percpu-cpu"],
    );
}

/// Typed targets whose object cannot be where the cast puts it, or that name more than a watchpoint covers,
/// or a type BTF has twice: each exit 2 with what is wrong and the way out, never armed narrowed or at the
/// first of two types. Variants of each: write, rw and resolve where they apply.
#[test]
fn typed_targets_that_cannot_be_watched_as_written_are_refused() {
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        util::skip("no /sys/kernel/btf/vmlinux");
        return;
    }
    let cases: &[(&str, &[&str])] = &[
        // A misaligned object: its aligned members land misaligned.
        (
            "(struct task_struct)0xffff888100000001.pid",
            &["not 4-byte aligned", "check the address"],
        ),
        (
            "(struct task_struct)0xffff888100000002.se.vruntime",
            &["not 8-byte aligned"],
        ),
        // Past the end of the address space, or not canonical.
        ("(struct task_struct)0xffffffffffffff00.pid", &["overflows"]),
        ("(struct task_struct)0xfffffffffffffff0", &[]),
        (
            "(struct task_struct)0x0000900000000000.pid",
            &["not a canonical"],
        ),
        (
            "(struct task_struct)0x8000000000000000.pid",
            &["not a canonical"],
        ),
        // A whole struct, or a member that is one: say so rather than watch its first 8 bytes.
        (
            "(struct task_struct)0xffff888100000000",
            &["3264 bytes", "at most 8", "/LEN"],
        ),
        (
            "(struct task_struct)0xffff888100000000.se",
            &["(struct sched_entity)", "at most 8"],
        ),
        (
            "(struct task_struct)0xffff888100000000.comm",
            &["at most 8"],
        ),
        // Two BTF types named irq_info: listed, and picked by id.
        (
            "(struct irq_info)0xffff888100000000.irq",
            &["different types named `struct irq_info`", "#ID"],
        ),
        (
            "(irq_info)0xffff888100000000.irq",
            &["different types named"],
        ),
        (
            "(struct irq_info#1)0xffff888100000000.irq",
            &["did you mean struct irq_info#"],
        ),
        // Casts that are not one type name.
        (
            "(struct)0xffff888100000000.pid",
            &["names no type after `struct`"],
        ),
        (
            "(union)0xffff888100000000.pid",
            &["names no type after `union`"],
        ),
        (
            "(struct a b)0xffff888100000000.pid",
            &["is not a type name"],
        ),
        (
            "(struct irq_info#)0xffff888100000000.irq",
            &["must be followed by a BTF type id"],
        ),
    ];
    for (target, needles) in cases {
        for verb in ["write", "rw"] {
            let (code, out, err) =
                util::run_within(&[verb, target], std::time::Duration::from_secs(20));
            assert_eq!(code, 2, "{verb} {target}: {err}");
            assert!(!out.contains("# armed"), "{verb} {target}: {out}");
            assert_eq!(err.lines().count(), 1, "{verb} {target}: one line: {err}");
            for n in *needles {
                assert!(err.contains(n), "{verb} {target}: `{n}` missing: {err}");
            }
        }
    }
    // Accepted forms: a qualifier, C's integer names, a BTF id, a whole object cut by an explicit /LEN.
    for target in [
        "(const struct task_struct)0xffff888100000000.pid",
        "(volatile struct task_struct)0xffff888100000000.pid",
        "(unsigned long)0xffff888100000000",
        "(long long int)0xffff888100000000",
    ] {
        let (code, out, err) = run(&["resolve", target]);
        assert_eq!(code, 0, "{target}: {err}");
        assert!(out.contains("runtime addr:"), "{target}: {out}");
    }
    let (code, out, err) = run(&["resolve", "(struct irq_info#44756)0xffff888100000000.irq"]);
    if code == 0 {
        assert!(out.contains("struct irq_info#44756"), "{out}");
    } else {
        // Another kernel's ids differ: the message lists this one's.
        assert!(err.contains("did you mean struct irq_info#"), "{err}");
    }
}

/// `--btf` must name a raw BTF file: a directory is refused at once (it was read file by file), and an ELF
/// file (a vmlinux, any binary) is told the objcopy command that extracts its `.BTF`.
#[test]
fn btf_that_is_a_directory_or_an_elf_file_is_refused_with_the_way_out() {
    let dir = scratch();
    let d = dir.to_str().unwrap();
    for verb in ["write", "resolve"] {
        rejects(
            &[
                verb,
                "(struct task_struct)0xffff888100000000.pid",
                "--btf",
                d,
            ],
            2,
            &["a directory", "name the raw BTF file itself"],
        );
        rejects(
            &[
                verb,
                "(struct task_struct)0xffff888100000000.pid",
                "--btf",
                util::BIN,
            ],
            2,
            &[
                "an ELF file, not raw BTF",
                "objcopy -O binary --only-section=.BTF",
            ],
        );
    }
}

/// An `--if` too long for one in-kernel program (its jumps would span more than a BPF jump reaches) is exit
/// 2 with the count and the way out, not an assembler failure with exit 1.
#[test]
fn a_condition_too_long_for_one_program_is_refused_with_its_size() {
    let cond = vec!["value==1"; 12_000].join("||");
    rejects(
        &["write", "0x1000", "--if", &cond],
        2,
        &["--if has 12000 comparisons", "use fewer terms"],
    );
}

/// A huge input is not echoed back whole: a 100 KB target, type name or kallsyms path makes a short error
/// line that still starts with what went wrong and ends with the advice.
#[test]
fn a_huge_input_is_cut_in_the_error_line() {
    let long = "a".repeat(100_000);
    for args in [
        vec!["write", long.as_str()],
        vec!["resolve", long.as_str()],
        vec!["write", "0x1000", "--kallsyms", long.as_str()],
    ] {
        let (code, _out, err) = util::run_within(&args, std::time::Duration::from_secs(20));
        assert_eq!(code, 2, "{}", &err[..err.len().min(300)]);
        assert!(err.len() < 2_200, "{} bytes: {}", err.len(), &err[..300]);
        assert!(err.contains(" bytes]…"), "{err}");
    }
    let cast = format!("(struct {long})0xffff888100000000.pid");
    let (code, _out, err) = util::run_within(&["write", &cast], std::time::Duration::from_secs(20));
    assert_eq!(code, 2);
    assert!(err.len() < 2_200, "{} bytes", err.len());
}

/// A binary file (an ELF, random bytes) as a symbol text file is named as such, with the files that would
/// do; it once said only `stream did not contain valid UTF-8`.
#[test]
fn a_binary_file_as_kallsyms_or_system_map_is_named_as_binary() {
    let random: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let bin = scratch().join("random.bin");
    std::fs::write(&bin, random).unwrap();
    for file in [util::BIN, bin.to_str().unwrap()] {
        for flag in ["--kallsyms", "--system-map"] {
            rejects(
                &["write", "jiffies", flag, file],
                2,
                &[
                    "is not a text symbol file: it holds binary data",
                    "/proc/kallsyms",
                ],
            );
        }
    }
}

/// A misaligned raw range names its length in words a reader can say: never "a 8-byte" (the article
/// depends on how the number is read), for every length that can be misaligned.
#[test]
fn a_misaligned_range_says_its_length_without_a_wrong_article() {
    for len in [2u64, 4, 8] {
        let t = format!("0xffff888100000001/{len}");
        let err = util::rejects(
            &["write", &t],
            2,
            &[&format!("watches {len} bytes only at a multiple of {len}")],
        );
        assert!(!err.contains("a 8-byte"), "{err}");
    }
}

/// `--last` and `--dump-on` make sense only together, with a buffer of at least one hit and a stream to
/// print it in; a trigger is a condition, `signal` or a tracepoint the kernel has.
#[test]
fn flight_recorder_options_are_checked_before_anything_is_armed() {
    let t = "0xffffffff83000000";
    rejects(
        &["write", t, "--dump-on", "signal"],
        2,
        &["--dump-on", "add --last N"],
    );
    rejects(
        &["write", t, "--last", "5"],
        2,
        &["--last N", "add --dump-on TRIGGER"],
    );
    rejects(
        &["write", t, "--last", "0", "--dump-on", "signal"],
        2,
        &["--last 0", "1 or more"],
    );
    rejects(
        &["write", t, "--last", "5", "--dump-on", "signal", "--quiet"],
        2,
        &["--quiet", "drop --quiet"],
    );
    rejects(
        &["write", t, "--last", "5", "--dump-on", "signal", "--folded"],
        2,
        &["--folded", "--folded=FILE"],
    );
    rejects(
        &[
            "write",
            t,
            "--last",
            "5",
            "--dump-on",
            "tracepoint:nope:gone",
        ],
        2,
        &["no tracepoint nope:gone"],
    );
    rejects(
        &["write", t, "--last", "5", "--dump-on", "value =="],
        2,
        &["--dump-on 'value =='", "column", "`signal`"],
    );
}

/// `--on` is checked before anything is armed: the source's form, its function and tracepoint, the `$obj`
/// target and its cast, one target, `-- CMD`, `--control`, and `--rotate` without `--on`; each exit 2.
#[test]
fn objects_on_is_checked_before_anything_is_armed() {
    let pipe = "(struct pipe_inode_info)$obj.head";
    for (args, want) in [
        (vec!["--on", "vmalloc:f", pipe], "kmalloc:FUNC"),
        (
            vec!["--on", "kmalloc:", pipe],
            "FUNC is not a function name",
        ),
        (
            vec!["--on", "kmalloc:alloc_pipe_info", "pipe_inode_info.head"],
            "write `$obj`",
        ),
        (
            vec!["--on", "kmalloc:alloc_pipe_info", "$obj.head"],
            "needs its type",
        ),
        (
            vec!["--on", "kmalloc:alloc_pipe_info", pipe, "jiffies"],
            "one TARGET",
        ),
        (vec!["--rotate", "jiffies"], "add --on SOURCE"),
        (
            vec!["--on", "kmalloc:alloc_pipe_info", pipe, "--control", "-"],
            "drop --control",
        ),
        (
            vec!["--on", "kmalloc:alloc_pipe_info", pipe, "--", "true"],
            "give -p PID",
        ),
    ] {
        let mut argv = vec!["write"];
        argv.extend(args);
        rejects(&argv, 2, &[want]);
    }
    // What needs the kernel's symbols and BTF (and no tracefs): a function that is not there, a
    // tracepoint that is not there, an argument or field it does not have or that is not a pointer, a field
    // the type does not have.
    if util::btf_tracepoint("kmalloc").is_some()
        && util::btf_tracepoint("sched_process_fork").is_some()
    {
        rejects(
            &["write", "--on", "kmalloc:no_such_function_here", pipe],
            2,
            &["not a function of the running kernel"],
        );
        rejects(
            &["write", "--on", "tracepoint:sched:no_such_event:arg0", pipe],
            2,
            &[
                "no tracepoint sched:no_such_event",
                "btf_trace_no_such_event",
            ],
        );
        rejects(
            &[
                "write",
                "--on",
                "tracepoint:sched:sched_proces_fork:arg1",
                pipe,
            ],
            2,
            &["nearest: sched_process_fork"],
        );
        let task = "(struct task_struct)$obj.flags";
        rejects(
            &[
                "write",
                "--on",
                "tracepoint:sched:sched_process_fork:child_pid",
                task,
            ],
            2,
            &[
                "`child_pid`",
                "not a pointer",
                "its pointer arguments: parent, child",
            ],
        );
        rejects(
            &[
                "write",
                "--on",
                "tracepoint:sched:sched_process_fork:arg2",
                task,
            ],
            2,
            &["has 2 arguments", "`struct task_struct *child`"],
        );
        rejects(
            &[
                "write",
                "--on",
                "kmalloc:alloc_pipe_info",
                "(struct pipe_inode_info)$obj.nohead",
            ],
            2,
            &["no field `nohead`"],
        );
        if util::btf_tracepoint("inet_sock_set_state").is_some_and(|t| t.record.is_some()) {
            let sock = "(struct sock)$obj.sk_mark";
            rejects(
                &[
                    "write",
                    "--on",
                    "tracepoint:sock:inet_sock_set_state:oldstate",
                    sock,
                ],
                2,
                &[
                    "`oldstate`",
                    "is `const int oldstate`, not a pointer",
                    "arguments: sk",
                ],
            );
            rejects(
                &[
                    "write",
                    "--on",
                    "tracepoint:sock:inet_sock_set_state:nope",
                    sock,
                ],
                2,
                &["no field `nope`", "pointer fields: skaddr"],
            );
        }
    }
}

/// Issue 38 item 13: `-p 1` as root said "run as root (CAP_SYS_PTRACE)". A refused memory map now says
/// what refused it, by who asked: root with CAP_SYS_PTRACE (here a security module, Landlock, keeps the
/// sandbox's init from being traced), root without CAP_SYS_PTRACE, and another user.
#[test]
fn a_refused_memory_map_says_what_refused_it() {
    let args = ["write", "-p", "1", "main", "--dry-run"];
    let ptrace_cap = util::has_cap(19);
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if std::fs::File::open("/proc/1/maps").is_ok() {
        util::skip("this process may read /proc/1/maps: nothing refuses it here");
    } else if root && ptrace_cap {
        let line = rejects(
            &args,
            4,
            &[
                "cannot read /proc/1/maps",
                "although it has CAP_SYS_PTRACE as root",
                "a security module forbids it",
                "0xADDR",
            ],
        );
        assert!(!line.contains("run as its user or as root"), "{line}");
    } else {
        util::skip("not root with CAP_SYS_PTRACE");
    }
    if !root || !std::path::Path::new("/usr/bin/setpriv").exists() {
        util::skip("dropping a capability or the user needs root and setpriv");
        return;
    }
    let no_ptrace = std::process::Command::new("setpriv")
        .args([
            "--bounding-set=-sys_ptrace",
            "--inh-caps=-sys_ptrace",
            util::BIN,
        ])
        .args(args)
        .output()
        .expect("run setpriv");
    let err = String::from_utf8_lossy(&no_ptrace.stderr);
    assert_eq!(no_ptrace.status.code(), Some(4), "{err}");
    assert!(
        err.contains("ksymwatch runs as root without CAP_SYS_PTRACE"),
        "{err}"
    );
    let (code, _, err) = util::run_as_nobody(&args).expect("root with setpriv");
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("needs the right to trace it: run as its user or as root (CAP_SYS_PTRACE)"),
        "{err}"
    );
}

// Issue 38 item 13: an output file that cannot be written (`/dev/full`) is named in the error, with
// its option: "writing output" alone did not say which of the outputs failed.
live_test!(a_full_output_file_is_named_with_its_option, {
    let mut w = util::Writer::start(&["spin", "0"]);
    w.send("go");
    let target = format!("0x{:x}/8", w.addr);
    for flag in [
        &["--perfetto", "/dev/full"][..],
        &["--folded=/dev/full"],
        &["--flamegraph", "/dev/full"],
        &["--output", "/dev/full"],
    ] {
        let mut args = vec!["write", &target, "--duration", "300ms", "--no-status"];
        args.extend_from_slice(flag);
        let (code, _, err) = util::run_within(&args, std::time::Duration::from_secs(20));
        let named = flag.join(" ").replace('=', " ");
        assert_eq!(code, 1, "{flag:?}: {err}");
        assert!(
            err.contains(&format!("writing output: {named}: No space left on device")),
            "{flag:?}: {err}"
        );
    }
});

/// Issue 38 item 6: an error quoting a name with control characters (typed here; a symbol or path from a
/// file, or a comm, elsewhere) is still one line, its control characters escaped.
#[test]
fn an_error_quoting_a_hostile_name_is_one_line() {
    let k = fixture("k-hostile", FIXTURE);
    let line = rejects(
        &[
            "resolve",
            "no\nsuch\u{1b}[2J",
            "--kallsyms",
            k.to_str().unwrap(),
        ],
        2,
        &["no\\nsuch\\x1b[2J"],
    );
    assert!(!line.contains('\u{1b}'), "{line:?}");
}
