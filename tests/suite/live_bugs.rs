//! Bugs found in landed code, each pinned by the run that showed it: root whose capabilities were dropped
//! told to run as root, `-p` of a zombie, a `--dump-on` before the first hit, `--folded` on stdout with
//! `-o FILE` whose reader went away. Subjects are user-space helpers' memory (this kind of machine refuses
//! kernel-address breakpoints); a kernel address appears only where the refusal is the subject.

use std::process::Command;

use crate::util::{self, BIN};

/// Whether capsh (libcap2-bin) runs here, and this test runs as root (the case is root with a capability
/// dropped); skipped, saying which, otherwise.
fn root_with_capsh() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        util::skip("not root: the case is root whose capabilities were dropped");
        return false;
    }
    let ok = Command::new("capsh")
        .arg("--print")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        util::skip("capsh is not installed (package libcap2-bin)");
    }
    ok
}

/// Runs ksymwatch with `args` as root with the capabilities `drop` dropped (capsh, e.g. `cap_sys_admin`).
fn dropped(drop: &str, args: &[&str]) -> (i32, String, String) {
    util::run_fed(
        Command::new("capsh")
            .args([
                &format!("--drop={drop}"),
                "--",
                "-c",
                "exec \"$0\" \"$@\"",
                BIN,
            ])
            .args(args),
        "",
    )
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
