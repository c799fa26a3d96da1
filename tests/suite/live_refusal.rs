//! A breakpoint on a kernel address refused by the kernel is named for what it is, wherever it is armed:
//! the kernel's own policy (some kernels refuse them even with CAP_SYS_ADMIN) or a missing CAP_SYS_ADMIN,
//! never perf's advice to grant CAP_PERFMON. Each test holds on both kinds of machine: what the root run
//! should do is asked of the kernel first (a disabled breakpoint opened and closed, [`util::kernel_refusal`]),
//! and the runs without CAP_SYS_ADMIN (`capsh --drop=cap_sys_admin`) must be refused everywhere, while
//! CAP_PERFMON keeps user-space watches working.

use crate::util::{self, helper};

/// What the kernel-breakpoint rule says where this kernel refuses them to root.
const REFUSED: &str = "this kernel refuses hardware breakpoints on kernel addresses (a kernel or \
                       hypervisor policy such as lockdown, not a missing privilege";
/// What it says without CAP_SYS_ADMIN.
const NEEDS_ADMIN: &str = "kernel addresses need CAP_SYS_ADMIN (CAP_PERFMON is not enough)";

/// The README's first target, `__start_init_stack+0x3e00`, from kallsyms (kernel addresses move between
/// machines).
fn init_stack() -> u64 {
    util::kallsyms_addr("__start_init_stack").expect("__start_init_stack in kallsyms") + 0x3e00
}

/// Runs ksymwatch with `args` as root without CAP_SYS_ADMIN (capsh drops it from the bounding set and every
/// set; CAP_PERFMON, CAP_BPF and the rest stay), `stdin` written to its standard input.
fn without_cap_sys_admin(args: &[&str], stdin: &str) -> (i32, String, String) {
    util::run_dropping("cap_sys_admin", args, stdin)
}

/// A refused run's JSON stream: exactly one `error` record, whose `reason` is stderr's error line;
/// returns its `kind` and `exit_code`.
fn error_record(out: &str, err: &str) -> (String, i64) {
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "one record: {out}");
    let v: serde_json::Value =
        serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["type"], "error", "{v}");
    let reason = v["reason"].as_str().unwrap_or_default();
    assert_eq!(err, format!("ksymwatch: error: {reason}\n"), "{v}");
    (
        v["kind"].as_str().unwrap_or_default().to_string(),
        v["exit_code"].as_i64().unwrap_or(-1),
    )
}

// The README's first command as root: refused with the kernel's policy named, and what still works, where
// the kernel refuses kernel breakpoints; armed, with hits, where it does not.
live_test!(
    a_kernel_address_is_refused_as_the_kernel_refuses_it_or_armed,
    {
        if !util::has_cap_sys_admin() {
            return util::skip(
            "this test process has no CAP_SYS_ADMIN: the kernel refuses kernel addresses for that, which \
             without_cap_sys_admin_kernel_addresses_need_it_and_user_space_works covers",
        );
        }
        let addr = init_stack();
        let target = format!("0x{addr:x}");
        let refused = util::kernel_refusal(addr);
        let (code, out, err) = util::run(&["write", &target, "--duration", "1s"]);
        match refused {
            Some(why) => {
                assert!(why.contains(REFUSED), "the probe's own wording: {why}");
                assert_eq!(code, 4, "{err}");
                assert_eq!(err.lines().count(), 1, "{err}");
                assert!(
                    err.starts_with("ksymwatch: error: cpu ") && err.contains(REFUSED),
                    "{err}"
                );
                assert!(
                err.contains("user-space watches still work (`-p PID`, `-- CMD`, or a process's address system-wide), e.g. `ksymwatch write ")
                    && err.trim_end().ends_with("; nothing was armed"),
                "{err}"
            );
                assert!(!err.contains("grant CAP_PERFMON"), "{err}");
                assert!(out.is_empty(), "nothing printed on stdout: {out}");
                // A JSON stream is one `error` record saying which refusal, as the stderr line does.
                let (code, out, err) = util::run(&["write", &target, "--duration", "1s", "--json"]);
                assert_eq!(code, 4, "{err}");
                assert_eq!(
                    error_record(&out, &err),
                    ("kernel_breakpoints_refused".into(), 4)
                );
            }
            None => {
                assert_eq!(code, 0, "the kernel takes kernel breakpoints here: {err}");
                assert!(out.contains("# armed "), "{out}");
            }
        }
    }
);

// Without CAP_SYS_ADMIN a kernel address is refused on every machine, saying that CAP_SYS_ADMIN is what
// it needs; a user-space watch of a process still works there (CAP_PERFMON), kernel writers included.
live_test!(
    without_cap_sys_admin_kernel_addresses_need_it_and_user_space_works,
    {
        if !util::capsh() {
            return;
        }
        let target = format!("0x{:x}", init_stack());
        let (code, out, err) = without_cap_sys_admin(&["write", &target, "--duration", "1s"], "");
        assert_eq!(code, 4, "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(NEEDS_ADMIN) && err.contains("which this process does not have"),
            "{err}"
        );
        assert!(
            !err.contains("grant CAP_PERFMON") && !err.contains(REFUSED),
            "{err}"
        );
        assert!(out.is_empty(), "{out}");
        let (code, out, err) =
            without_cap_sys_admin(&["write", &target, "--duration", "1s", "--json"], "");
        assert_eq!(code, 4, "{err}");
        assert_eq!(error_record(&out, &err), ("needs_cap_sys_admin".into(), 4));
        // The same process's user-space watch: a helper's global, filled by the kernel's read() from
        // /dev/zero, in launch mode.
        let writer = helper("writer");
        let (code, out, err) = without_cap_sys_admin(
            &util::launching(
                &["write", "target_var", "--json"],
                &writer,
                &["read", "10", "0"],
            ),
            "go\n",
        );
        assert_eq!(code, 0, "{err}");
        let records = util::stream_records(&out);
        let kernel_hits = records
            .iter()
            .filter(|r| r["type"] == "hit" && r["in_kernel"] == true)
            .count();
        assert!(
            kernel_hits >= 10,
            "every read() is a kernel write into the global: {out}\n{err}"
        );
    }
);

// `--on`'s object slots are kernel addresses too: refused the same way (exit 4), never blamed on the
// debug registers being in use.
live_test!(on_objects_are_refused_with_the_same_words, {
    if !util::has_cap_sys_admin() {
        return util::skip(
            "this test process has no CAP_SYS_ADMIN: the kernel refuses kernel addresses for that, which \
             without_cap_sys_admin_kernel_addresses_need_it_and_user_space_works covers",
        );
    }
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        util::skip("no kernel BTF: `--on` needs its types");
        return;
    }
    let args = [
        "write",
        "--on",
        "kmalloc:alloc_pipe_info",
        "(struct pipe_inode_info)$obj.head",
        "--duration",
        "1s",
    ];
    let refused = util::kernel_refusal(init_stack());
    let (code, _, err) = util::run(&args);
    match refused {
        Some(_) => {
            assert_eq!(code, 4, "{err}");
            assert!(err.contains(REFUSED), "{err}");
            assert!(!err.contains("in use"), "{err}");
        }
        None => assert_eq!(code, 0, "{err}"),
    }
    if !util::capsh() {
        return;
    }
    let (code, _, err) = without_cap_sys_admin(&args, "");
    assert_eq!(code, 4, "{err}");
    assert!(err.contains(NEEDS_ADMIN), "{err}");
    assert!(!err.contains("in use"), "{err}");
});

// A `--control` move to a kernel address is refused in the same words, and the JSON record says which
// refusal it was in `kind`; the watch stays where it was. Without CAP_SYS_ADMIN on every machine; as
// root where the kernel refuses kernel breakpoints (elsewhere the move is made).
live_test!(a_control_move_to_a_kernel_address_says_why_in_kind, {
    if !util::has_cap_sys_admin() {
        return util::skip(
            "this test process has no CAP_SYS_ADMIN: the kernel refuses kernel addresses for that, which \
             without_cap_sys_admin_kernel_addresses_need_it_and_user_space_works covers",
        );
    }
    static SPOT: u64 = 0;
    let start = format!("0x{:x}", &SPOT as *const u64 as u64);
    let to = format!("watch 0x{:x}\n", init_stack());
    let args = util::controlled_from_stdin(&["write", start.as_str()]);
    let refused = util::kernel_refusal(init_stack());
    let (code, stdout, err) = util::run_fed(&args, &to);
    assert_eq!(code, 0, "{err}");
    let recs = util::ndjson(&stdout);
    let find = |ty: &str| recs.iter().find(|r| r["type"] == ty);
    match refused {
        Some(_) => {
            let r = find("control_refused").unwrap_or_else(|| panic!("no refusal: {stdout}"));
            assert_eq!(r["kind"], "kernel_breakpoints_refused", "{r}");
            let reason = r["reason"].as_str().unwrap_or_default();
            assert!(
                reason.starts_with("the new breakpoint: ") && reason.contains(REFUSED),
                "{reason}"
            );
            assert!(r["watching"].as_str().unwrap_or_default().contains(&start));
        }
        None => assert!(find("watch").is_some(), "the move is made here: {stdout}"),
    }
    if !util::capsh() {
        return;
    }
    let (code, stdout, err) = without_cap_sys_admin(&args, &to);
    assert_eq!(code, 0, "{err}");
    let recs = util::ndjson(&stdout);
    let r = util::record(&recs, "control_refused");
    assert_eq!(r["kind"], "needs_cap_sys_admin", "{r}");
    assert!(
        r["reason"]
            .as_str()
            .unwrap_or_default()
            .contains(NEEDS_ADMIN),
        "{r}"
    );
    assert!(
        err.contains("control `watch 0x") && err.contains(NEEDS_ADMIN),
        "the stderr line says it too: {err}"
    );
});

// `check` without CAP_SYS_ADMIN, on any machine: kernel addresses refused for want of it, user addresses
// fine, so the answer is partial ("user-space watches only", exit 4).
live_test!(check_without_cap_sys_admin_is_user_space_only, {
    if !util::capsh() {
        return;
    }
    let (code, out, err) = without_cap_sys_admin(&["check", "--json"], "");
    let v: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["cap_sys_admin"], false, "{v}");
    assert_eq!(v["kernel_breakpoints"], false, "{v}");
    assert_eq!(v["kernel_breakpoints_kind"], "needs_cap_sys_admin", "{v}");
    assert_eq!(v["user_breakpoints"], true, "{v}");
    assert_eq!(v["user_space_only"], true, "{v}");
    assert_eq!(v["can_watch"], false, "{v}");
    let (code, out, err) = without_cap_sys_admin(&["check"], "");
    assert_eq!(code, 4, "{err}");
    let heading = out.lines().next().unwrap_or_default();
    assert!(
        heading.starts_with("ksymwatch check: user-space watches only: cpu ")
            && heading.contains(NEEDS_ADMIN),
        "{out}"
    );
    assert!(out.contains("\n  kernel addresses refused: cpu "), "{out}");
    assert!(out.contains("\n  user addresses   yes ("), "{out}");
    assert_eq!(
        err,
        format!(
            "ksymwatch: error: {}\n",
            v["reason"].as_str().unwrap_or_default()
        )
    );
});
