//! `ksymwatch check`: the table and the JSON agree with the machine, and the exit code says whether a
//! watch can work.

use crate::util;

use std::process::Command;

fn check_json() -> (i32, serde_json::Value) {
    let (code, out, err) = util::run(&["check", "--json"]);
    let v: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    (code, v)
}

#[test]
fn reports_this_machine_and_free_registers() {
    let Some(_lock) = util::live() else { return };
    let (code, v) = check_json();
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["can_watch"], true);
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
    assert_eq!(code, 0);
    assert!(
        out.starts_with("ksymwatch check: a watch can work here\n"),
        "{out}"
    );
    assert!(out.contains("debug registers  cpu0 4 free"), "{out}");
}

#[test]
fn sees_registers_taken_by_someone_else() {
    let Some(_lock) = util::live() else { return };
    let cpus = util::online_cpus();
    let busy = *cpus.last().unwrap();
    let holder = util::Holder::start(busy, 3);
    let (code, v) = check_json();
    drop(holder);
    assert_eq!(code, 0);
    let r = v["debug_registers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cpu"] == busy)
        .unwrap()
        .clone();
    assert_eq!(r["free"], 1, "{v}");
}

#[test]
fn unprivileged_check_exits_4_with_the_reason() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !std::path::Path::new("/usr/bin/setpriv").exists() {
        util::skip("needs root and setpriv to drop privileges");
        return;
    }
    let out = Command::new("setpriv")
        .args([
            "--reuid",
            "nobody",
            "--regid",
            "nogroup",
            "--clear-groups",
            "--inh-caps=-all",
            util::BIN,
            "check",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["can_watch"], false);
    assert!(v["reason"].as_str().unwrap().contains("CAP_PERFMON"), "{v}");
}
