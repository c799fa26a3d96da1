//! `--dry-run`: the plan is made (options, symbols, processes, CPUs, the hits' path) and printed, and
//! nothing is armed; a launched command is killed before it ran any code of its own; a plan that cannot be
//! made fails exactly as the run would.

use crate::util;

#[test]
fn a_dry_run_prints_the_plan_and_arms_nothing() {
    let (code, out, err) = util::run(&[
        "write",
        "--dry-run",
        "0x7000/8",
        "-p",
        &std::process::id().to_string(),
    ]);
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
    let dir = std::env::temp_dir().join(format!("ksw-dry-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
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
