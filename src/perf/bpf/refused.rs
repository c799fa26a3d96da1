//! Why the kernel refused to load a BPF program with EPERM or EACCES, and what would let it, worded from
//! the capabilities this process holds: a pure function of the errno, the [`Privilege`] (the ones a
//! refused breakpoint is worded from too, [`crate::perf::denial`]) and kernel.unprivileged_bpf_disabled,
//! so every combination is tested without a kernel. [`super::why_unavailable`] gathers the facts (as
//! `perf::privilege` reads them) and uses the wording.
//!
//! What the kernel checks before it loads a perf-event program (kernel/bpf/syscall.c `bpf_prog_load`,
//! since Linux 5.8): `bpf_capable()`, CAP_BPF or CAP_SYS_ADMIN, and `perfmon_capable()`, CAP_PERFMON or
//! CAP_SYS_ADMIN, each counted only in the initial user namespace (`capable()`). No setting of
//! kernel.unprivileged_bpf_disabled lets a process without them load this kind of program (the setting
//! opens only socket filters). So root refused is root whose capabilities were taken (capsh, a
//! container's or a service's capability set), and the advice names what is missing, not "run as root";
//! a process that holds them all was refused by a security policy (a seccomp filter, a security module),
//! which no privilege lifts.

use std::io;

use crate::perf::privilege::Privilege;

/// The capabilities a perf-event program needs that a process with `creds` lacks, by name: CAP_BPF and
/// CAP_PERFMON, each unless CAP_SYS_ADMIN stands in for it; the ones it holds in a user namespace of its
/// own count as lacking.
pub fn missing(creds: &Privilege) -> Vec<&'static str> {
    let mut missing = Vec::new();
    if !creds.bpf() {
        missing.push("CAP_BPF");
    }
    if !creds.perfmon() {
        missing.push("CAP_PERFMON");
    }
    missing
}

/// The reason a program did not load (`err`), and the way out, as one clause for the callers' messages
/// (`--value and --if read the value in the kernel with BPF, but {this}`). `setting` is
/// kernel.unprivileged_bpf_disabled as read (or `unknown`).
pub fn wording(err: &io::Error, creds: &Privilege, setting: &str) -> String {
    match err.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => refused(err, creds, setting),
        Some(libc::ENOSYS) => {
            "this kernel has no bpf() system call (CONFIG_BPF_SYSCALL is off)".to_string()
        }
        _ => format!("this kernel would not load a BPF perf-event program ({err})"),
    }
}

fn refused(err: &io::Error, creds: &Privilege, setting: &str) -> String {
    let missing = missing(creds);
    let refused = format!("loading a BPF program was refused ({err})");
    if missing.is_empty() {
        return format!(
            "{refused} although this process has {}, which is all the kernel's own checks ask for: a \
             security policy refuses bpf() here (a seccomp filter, as in a container's default profile, or \
             a security module such as SELinux), not a missing privilege; the policy must allow it",
            if creds.cap_sys_admin {
                "CAP_SYS_ADMIN"
            } else {
                "CAP_BPF and CAP_PERFMON"
            }
        );
    }
    let lacks = missing.join(" and ");
    if !creds.initial_user_ns {
        return format!(
            "{refused}: this process's capabilities are those of a user namespace of its own (a \
             container), and the kernel counts CAP_BPF and CAP_PERFMON for BPF only in the initial one; run \
             it on the host with {lacks}"
        );
    }
    if creds.host_root() {
        return format!(
            "{refused}: this process runs as root but without {lacks} in its effective capabilities (taken \
             by capsh, a container's or a service's capability set), and a perf-event program needs CAP_BPF \
             and CAP_PERFMON (or CAP_SYS_ADMIN for both); run it with {lacks} kept"
        );
    }
    format!(
        "{refused}: a perf-event program needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), and this \
         process lacks {lacks}; run as root, or grant {lacks} (kernel.unprivileged_bpf_disabled is \
         {setting}: no setting of it allows this kind of program without them)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPERM: i32 = libc::EPERM;

    fn creds(root: bool, bpf: bool, perfmon: bool, admin: bool, initial: bool) -> Privilege {
        Privilege {
            euid: if root { 0 } else { 1000 },
            cap_bpf: bpf,
            cap_perfmon: perfmon,
            cap_sys_admin: admin,
            initial_user_ns: initial,
            paranoid: Some(2),
        }
    }

    fn worded(c: &Privilege) -> String {
        wording(&io::Error::from_raw_os_error(EPERM), c, "2")
    }

    /// The wording for `c`, checked to say each of `parts`.
    fn worded_with(c: &Privilege, parts: &[&str]) -> String {
        let w = worded(c);
        for part in parts {
            assert!(w.contains(part), "{part:?} missing from: {w}");
        }
        w
    }

    /// Root with capabilities dropped is told what was dropped, never to run as root; `capsh
    /// --drop=cap_bpf,cap_sys_admin` and `--drop=cap_perfmon,cap_sys_admin` are the live cases here.
    #[test]
    fn root_without_its_capabilities_is_told_which() {
        let no_bpf = worded_with(
            &creds(true, false, true, false, true),
            &["runs as root but without CAP_BPF in its effective capabilities"],
        );
        assert!(no_bpf.ends_with("run it with CAP_BPF kept"), "{no_bpf}");
        let no_perfmon = worded_with(
            &creds(true, true, false, false, true),
            &["without CAP_PERFMON in"],
        );
        assert!(!no_perfmon.contains("without CAP_BPF"), "{no_perfmon}");
        let neither = worded_with(
            &creds(true, false, false, false, true),
            &["without CAP_BPF and CAP_PERFMON in"],
        );
        for w in [&no_bpf, &no_perfmon, &neither] {
            assert!(!w.contains("run as root"), "{w}");
            assert!(w.starts_with("loading a BPF program was refused (Operation not permitted"));
        }
    }

    /// An unprivileged user is told to run as root or grant what is missing, with the setting named (it
    /// does not help, and the message says so).
    #[test]
    fn a_user_is_told_to_run_as_root_or_grant_what_is_missing() {
        worded_with(
            &creds(false, false, false, false, true),
            &[
                "run as root, or grant CAP_BPF and CAP_PERFMON",
                "kernel.unprivileged_bpf_disabled is 2",
            ],
        );
        worded_with(
            &creds(false, false, true, false, true),
            &["lacks CAP_BPF;", "grant CAP_BPF ("],
        );
    }

    /// Capabilities held only in a child user namespace count for nothing, and the message says why.
    #[test]
    fn capabilities_in_a_user_namespace_of_its_own_are_named() {
        let container = worded_with(
            &creds(true, true, true, true, false),
            &[
                "a user namespace of its own",
                "on the host with CAP_BPF and CAP_PERFMON",
            ],
        );
        assert!(!container.contains("run as root"), "{container}");
        // Root in a container with no capability at all is sent to the host too, not told to run as root.
        let bare = worded_with(
            &creds(true, false, false, false, false),
            &["on the host with CAP_BPF and CAP_PERFMON"],
        );
        assert!(!bare.contains("run as root"), "{bare}");
    }

    /// Holding what the kernel asks for, a refusal is a policy's, not a missing privilege.
    #[test]
    fn a_refusal_with_every_capability_is_a_policys() {
        for c in [
            creds(true, true, true, true, true),
            creds(true, false, false, true, true),
            creds(false, true, true, false, true),
        ] {
            let w = worded(&c);
            assert!(
                w.contains("not a missing privilege")
                    && !w.contains("grant")
                    && !w.contains("run as root"),
                "{c:?}: {w}"
            );
        }
    }

    /// CAP_SYS_ADMIN stands in for both; otherwise each is needed, counted only in the initial namespace.
    #[test]
    fn missing_follows_the_kernels_rule() {
        assert!(missing(&creds(true, false, false, true, true)).is_empty());
        assert_eq!(
            missing(&creds(true, true, false, false, true)),
            ["CAP_PERFMON"]
        );
        assert_eq!(missing(&creds(true, false, true, false, true)), ["CAP_BPF"]);
        assert_eq!(
            missing(&creds(true, true, true, true, false)),
            ["CAP_BPF", "CAP_PERFMON"]
        );
    }

    #[test]
    fn other_errors_are_the_kernels() {
        let c = creds(true, true, true, true, true);
        assert!(
            wording(&io::Error::from_raw_os_error(libc::ENOSYS), &c, "2")
                .contains("CONFIG_BPF_SYSCALL")
        );
        assert!(
            wording(&io::Error::from_raw_os_error(libc::EINVAL), &c, "2")
                .starts_with("this kernel would not load a BPF perf-event program")
        );
    }
}
