//! `--dry-run`: the plan is made (options, symbols, processes, CPUs, the hits' path) and printed, and
//! nothing is armed; a launched command is killed before it ran any code of its own; a plan that cannot be
//! made fails exactly as the run would.

use crate::util;

/// `write --dry-run 0x7000/8 -p THIS-PROCESS EXTRA...`: exit code, stdout and stderr.
fn dry_run_of_this_process(extra: &[&str]) -> (i32, String, String) {
    let pid = std::process::id().to_string();
    let mut args = vec!["write", "--dry-run", "0x7000/8", "-p", &pid];
    args.extend_from_slice(extra);
    util::run(&args)
}

#[test]
fn a_dry_run_prints_the_plan_and_arms_nothing() {
    let (code, out, err) = dry_run_of_this_process(&[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("# target: 0x7000 addr=0x7000 len=8 access=W (write)"),
        "{out}"
    );
    assert!(
        out.contains(&format!("# covers: process {}", std::process::id())),
        "{out}"
    );
    assert!(out.contains("# path: "), "{out}");
    assert!(out.ends_with("# dry run: nothing armed\n"), "{out}");
    assert!(!out.contains("# armed"), "{out}");
}

#[test]
fn a_dry_run_of_a_launch_kills_the_command_unrun() {
    let dir = util::temp_dir("ksw-dry-run");
    let marker = dir.join("ran");
    let script = format!("touch {}", marker.display());
    let (code, out, err) =
        util::run(&["write", "--dry-run", "0x7000/8", "--", "sh", "-c", &script]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("# covers: the command `sh -c touch"), "{out}");
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(!marker.exists(), "the command ran");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_plan_that_cannot_be_made_fails_as_the_run_would() {
    util::rejects(
        &["write", "--dry-run", "--per-thread", "0x7000/8"],
        2,
        &["--per-thread is for a process watch"],
    );
}

/// `--last` shows in the plan with its triggers; a condition implies reading values.
#[test]
fn a_dry_run_names_the_flight_recorder_and_its_triggers() {
    let (code, out, err) = dry_run_of_this_process(&[
        "--last",
        "50",
        "--dump-on",
        "value == 500",
        "--dump-on",
        "signal",
    ]);
    if code == 4 && err.contains("BPF") {
        util::skip("a --dump-on condition needs BPF, which this user cannot load");
        return;
    }
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("# last: 50 hits kept, printed on --dump-on 'value == 0x1f4', signal\n"),
        "{out}"
    );
    assert!(out.contains("# value: read at each hit\n"), "{out}");
}
