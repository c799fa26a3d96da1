//! Bugs found in landed code (second round), each pinned by the run that showed it: a `--dry-run` of a
//! kernel address that the run would be refused, `--tid`/`--comm` filters that match nothing in the
//! watched process. Subjects are user-space helpers' memory (this kind of machine refuses kernel-address
//! breakpoints); a kernel address appears only where the refusal is the subject.

use crate::util::{self, Writer};

/// `write ARGS --dry-run` and `write ARGS --duration 100ms`, run alike (`drop`: capabilities capsh drops
/// for both, none when empty): each one's (exit code, stdout, stderr).
fn dry_and_real(drop: &str, args: &[&str]) -> ((i32, String, String), (i32, String, String)) {
    let run = |extra: &[&str]| {
        let all = [args, extra].concat();
        match drop {
            "" => util::run(&all),
            _ => util::run_dropping(drop, &all, ""),
        }
    };
    (run(&["--dry-run"]), run(&["--duration", "100ms"]))
}

// A dry run of a kernel address where the kernel refuses breakpoints there (this machine, even to root)
// said `# dry run: nothing armed`, exit 0, and the run then failed with exit 4: a script validating with
// `--dry-run` was lied to. It now asks the kernel (a disabled breakpoint, closed at once) and ends with
// the run's own error line and code, its plan printed all the same; where the kernel takes them, both
// succeed. Root without CAP_SYS_ADMIN is refused everywhere: the dry run says so as the run does.
live_test!(a_dry_run_of_a_kernel_address_ends_as_the_run_would, {
    for target in ["__start_init_stack+0x3e00", "__start_init_stack+0x3e01/1"] {
        let args = ["write", target];
        let label = target.split('/').next().unwrap_or(target);
        let ((code, out, err), (run_code, _, run_err)) = dry_and_real("", &args);
        assert!(
            out.starts_with(&format!("# target: {label} addr=0xffff")),
            "{out}"
        );
        assert!(out.ends_with("# dry run: nothing armed\n"), "{out}");
        match util::kernel_breakpoints() {
            Ok(()) => {
                assert_eq!(code, 0, "{err}");
                assert!(err.is_empty(), "{err}");
                assert_eq!(run_code, 0, "{run_err}");
            }
            Err(why) => {
                util::skip(format_args!(
                    "a dry run and a run that both arm {target}: {why}"
                ));
                assert_eq!((code, run_code), (4, 4), "{err}\n{run_err}");
                assert_eq!(err, run_err);
                assert_eq!(err.lines().count(), 1, "{err}");
                // Without CAP_SYS_ADMIN (the suite under capsh) the refusal names the capability.
                let why = match util::has_cap_sys_admin() {
                    true => "this kernel refuses hardware breakpoints on kernel addresses",
                    false => "kernel addresses need CAP_SYS_ADMIN",
                };
                assert!(
                    err.contains(why) && err.ends_with("; nothing was armed\n"),
                    "{err}"
                );
            }
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !util::capsh() {
        util::skip("root whose CAP_SYS_ADMIN capsh drops: not root, or no capsh");
        return;
    }
    let args = ["write", "__start_init_stack+0x3e00"];
    let ((code, out, err), (run_code, _, run_err)) = dry_and_real("cap_sys_admin", &args);
    assert!(out.ends_with("# dry run: nothing armed\n"), "{out}");
    assert_eq!((code, run_code), (4, 4), "{err}\n{run_err}");
    assert_eq!(err, run_err);
    assert!(
        err.contains("kernel addresses need CAP_SYS_ADMIN (CAP_PERFMON is not enough)"),
        "{err}"
    );
    // A user address is the plan's to judge, as before: a dry run of a process's own memory succeeds.
    let w = Writer::start(&["read", "1", "0"]);
    let target = w.target();
    let (code, _, err) = util::run_dropping("cap_sys_admin", &["write", "--dry-run", &target], "");
    assert_eq!(code, 0, "{err}");
    w.finish();
});

// `--tid`/`--comm` that no thread of the watched process has filtered every hit without a word: the
// watch ran, printed nothing, and looked broken. A line on stderr at the start now names the condition and
// the threads there; the watch still runs (a thread may start or be renamed later). One that a thread
// meets says nothing.
live_test!(a_filter_that_matches_no_watched_thread_is_told, {
    let w = Writer::spinning(0);
    let (pid, target) = (w.pid.to_string(), w.target());
    let watch = |filter: &[&str]| {
        let args = [
            &["write", "-p", &pid, &target, "--duration", "500ms"],
            filter,
        ]
        .concat();
        util::run(&args)
    };
    let (code, out, err) = watch(&["--tid", "1"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!(
            "ksymwatch: note: no thread of process {pid} matches --tid 1 now (threads: {pid} writer); \
             every hit is filtered out until one does"
        )),
        "{err}"
    );
    assert!(util::parse_hits(&out).is_empty(), "{out}");
    let (code, out, err) = watch(&["--comm", "writr", "--comm", "wrtier"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("matches --comm writr or --comm wrtier now (threads: "),
        "{err}"
    );
    assert!(util::parse_hits(&out).is_empty(), "{out}");
    let (code, out, err) = watch(&["--comm", "writer", "--tid", &pid]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("no thread of"), "{err}");
    assert!(!util::parse_hits(&out).is_empty(), "{out}");
});
