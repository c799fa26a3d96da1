//! `ksymwatch check`: the table and the JSON agree with the machine, and the exit code says whether a
//! watch can work.

use crate::util;

/// Why this kernel refuses this process a breakpoint on a kernel address (kallsyms' `_text`, where check
/// probes), or `None` when it takes one.
fn kernel_refusal() -> Option<String> {
    util::kernel_refusal(util::kallsyms_addr("_text").expect("_text in kallsyms"))
}

/// The exit code check gives where nothing holds a register.
fn expected_code() -> i32 {
    util::check_code_when_all_free()
}

fn check_json() -> (i32, serde_json::Value) {
    let (code, out, err) = util::run(&["check", "--json"]);
    let v: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    (code, v)
}

live_test!(reports_this_machine_and_free_registers, {
    let refused = kernel_refusal();
    let (code, v) = check_json();
    assert_eq!(code, expected_code(), "{v}");
    assert_eq!(v["can_watch"], refused.is_none());
    assert_eq!(v["breakpoint_pmu"], true);
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(v["kernel"], release.trim());
    let regs = v["debug_registers"].as_array().unwrap();
    assert_eq!(regs.len(), util::online_cpus().len());
    for r in regs {
        assert_eq!(
            r["free"], 4,
            "nothing else holds a register under the live lock: {r}"
        );
    }
    // This kernel's kallsyms has no data symbols (CONFIG_KALLSYMS_ALL off), which check must say.
    let has_data = std::fs::read_to_string("/proc/kallsyms")
        .unwrap()
        .lines()
        .any(|l| l.contains(" D jiffies"));
    assert_eq!(v["kallsyms_data_symbols"], has_data);
    let (code, out, _) = util::run(&["check"]);
    assert_eq!(code, expected_code());
    // Both kinds of address were probed; the user one opens on any machine root can watch on.
    assert_eq!(v["user_breakpoints"], true, "{v}");
    assert!(v["user_breakpoints_kind"].is_null(), "{v}");
    assert!(
        out.contains(
            "user addresses   yes (a disabled breakpoint at an address in ksymwatch's own memory opened on \
             cpu 0)"
        ),
        "{out}"
    );
    match &refused {
        Some(why) => {
            assert_eq!(v["kernel_breakpoints"], false, "{v}");
            assert_eq!(v["user_space_only"], true, "{v}");
            let kind = if util::has_cap_sys_admin() {
                "kernel_breakpoints_refused"
            } else {
                "needs_cap_sys_admin"
            };
            assert_eq!(v["kernel_breakpoints_kind"], kind, "{v}");
            assert_eq!(
                v["kernel_breakpoints_error"].as_str(),
                Some(why.as_str()),
                "{v}"
            );
            assert_eq!(v["reason"].as_str(), Some(why.as_str()), "{v}");
            assert!(
                out.starts_with(&format!(
                    "ksymwatch check: user-space watches only: {why}\n"
                )),
                "{out}"
            );
            assert!(
                out.contains(&format!("  kernel addresses refused: {why}\n")),
                "{out}"
            );
        }
        None => {
            assert_eq!(v["kernel_breakpoints"], true, "{v}");
            assert_eq!(v["user_space_only"], false, "{v}");
            assert!(v["kernel_breakpoints_error"].is_null(), "{v}");
            assert!(
                out.starts_with("ksymwatch check: a watch can work here\n"),
                "{out}"
            );
            assert!(
                out.contains("  kernel addresses yes (a disabled breakpoint at _text 0x"),
                "{out}"
            );
        }
    }
    assert!(out.contains("debug registers  cpu0 4 free"), "{out}");
    // Root here can load BPF (bpftrace runs), so --value works and check says so.
    assert_eq!(v["bpf"], true, "{v}");
    assert_eq!(v["bpf_error"], serde_json::Value::Null);
    assert!(
        out.contains("bpf (--value)    a perf-event program loads"),
        "{out}"
    );
    // The kernel's BTF, when it has one, is what typed targets read.
    let btf = std::path::Path::new("/sys/kernel/btf/vmlinux").exists();
    assert_eq!(v["btf"].is_string(), btf, "{v}");
    assert_eq!(v["btf_error"].is_null(), btf, "{v}");
    if btf {
        assert!(
            out.contains("btf              /sys/kernel/btf/vmlinux (typed targets"),
            "{out}"
        );
        // With BPF and BTF, every online CPU's per-CPU base, each its own kernel address.
        let bases = v["percpu_bases"].as_array().expect("percpu_bases");
        assert_eq!(bases.len(), util::online_cpus().len(), "{v}");
        assert!(v["percpu_error"].is_null(), "{v}");
        assert!(
            bases
                .iter()
                .all(|b| b["base"].as_str().is_some_and(|a| a.starts_with("0xffff"))),
            "{v}"
        );
        assert!(out.contains("per-CPU bases    cpu0 0xffff"), "{out}");
    }
});

live_test!(sees_registers_taken_by_someone_else, {
    let cpus = util::online_cpus();
    let busy = *cpus.last().unwrap();
    let holder = util::Holder::start(busy, 3);
    let (code, v) = check_json();
    drop(holder);
    assert_eq!(code, expected_code(), "{v}");
    let r = v["debug_registers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cpu"] == busy)
        .unwrap()
        .clone();
    assert_eq!(r["free"], 1, "{v}");
});

/// `check --json` and `check` while `holder` is alive, then a default `write` (every online CPU): the exit
/// codes must agree. Returns (json exit, json, text exit, text stdout, text stderr, write exit).
fn check_then_write(holder: util::Holder) -> (i32, serde_json::Value, i32, String, String, i32) {
    let (code, v) = check_json();
    let (text_code, out, err) = util::run(&["check"]);
    let (write_code, _, write_err) = util::run(&["write", "0x10000", "--duration", "300ms"]);
    drop(holder);
    assert_eq!(write_code, 3, "write while registers are held: {write_err}");
    (code, v, text_code, out, err, write_code)
}

live_test!(
    a_cpu_without_a_free_register_is_named_and_exits_3_as_write_does,
    {
        let cpus = util::online_cpus();
        // The helper takes what is left of cpu0 (it stops at the first refusal).
        let (code, v, text_code, out, err, write_code) =
            check_then_write(util::Holder::start(0, 4));
        assert_eq!(
            (code, text_code),
            (write_code, write_code),
            "{v}\n{out}{err}"
        );
        assert_eq!(v["can_watch"], false);
        assert_eq!(v["unarmable_cpus"], serde_json::json!([0]), "{v}");
        let regs = v["debug_registers"].as_array().unwrap();
        assert_eq!(regs.len(), cpus.len(), "every online CPU is listed: {v}");
        for r in regs {
            let want = if r["cpu"] == 0 { 0 } else { 4 };
            assert_eq!(r["free"], want, "{r}");
        }
        let reason = v["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("no free debug register on cpu 0 (all in use"),
            "{reason}"
        );
        if cpus.len() > 1 {
            let rest = ksymwatch::cpulist::format(&cpus[1..].iter().copied().collect());
            assert!(
                reason.ends_with(&format!("one with `--cpus {rest}` can")),
                "{reason}"
            );
        }
        assert!(
            out.starts_with(&format!(
                "ksymwatch check: a watch cannot work here: {reason}\n"
            )),
            "{out}"
        );
        assert!(out.contains("cpu0 0 free (cannot arm)"), "{out}");
        assert_eq!(err, format!("ksymwatch: error: {reason}\n"));
    }
);

live_test!(every_register_held_exits_3_not_4, {
    // Task-bound breakpoints, as a debugger sets them, take a register on every CPU.
    let holder = util::Holder::start_task(4);
    let (code, v, text_code, out, _err, _) = check_then_write(holder);
    assert_eq!((code, text_code), (3, 3), "{v}\n{out}");
    let all: Vec<u32> = util::online_cpus();
    assert_eq!(v["unarmable_cpus"], serde_json::json!(all), "{v}");
    assert!(
        v["debug_registers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["free"] == 0),
        "{v}"
    );
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .ends_with("a watch cannot be armed on any online CPU"),
        "{v}"
    );
});

#[test]
fn unprivileged_check_exits_4_with_the_reason() {
    let Some((code, out, _)) = util::run_as_nobody(&["check", "--json"]) else {
        return;
    };
    assert_eq!(code, 4);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["can_watch"], false);
    assert!(v["reason"].as_str().unwrap().contains("CAP_PERFMON"), "{v}");
    // Both probes are refused, each for its own rule: a kernel address needs CAP_SYS_ADMIN.
    assert_eq!(v["kernel_breakpoints"], false, "{v}");
    assert_eq!(v["kernel_breakpoints_kind"], "needs_cap_sys_admin", "{v}");
    assert_eq!(v["user_breakpoints"], false, "{v}");
    assert_eq!(v["user_breakpoints_kind"], "not_permitted", "{v}");
    assert_eq!(v["user_space_only"], false, "{v}");
    // kernel.unprivileged_bpf_disabled is set here: no BPF for nobody, named with the setting.
    assert_eq!(v["bpf"], false, "{v}");
    let why = v["bpf_error"].as_str().unwrap();
    assert!(why.contains("unprivileged_bpf_disabled"), "{why}");
}
