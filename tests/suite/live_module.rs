//! A watch on a kernel module's memory ends when the module is unloaded.
//!
//! This machine's kernel is built without module support: no module can be loaded or unloaded here, so the
//! test stands in for both. A made-up kallsyms (`--kallsyms`) puts a module `ksymwatch_fake` over a busy
//! word: a spinning helper's global, which it stores to every ~200 us (the subject is the unload, not a
//! kernel address, so the tests run where the kernel refuses breakpoints on kernel addresses too; a
//! system-wide watch of a user address sees the helper's stores). The test sends what the kernel sends for
//! `rmmod ksymwatch_fake` (`remove@/module/ksymwatch_fake`, `SUBSYSTEM=module`) to the kernel's uevent
//! multicast group, as root may. Everything from the uevent on is real (the session's socket, the disarm,
//! the mark, the summary, the exit code); the kernel's side of an unload (that it sends this uevent, before
//! it frees the module's memory) is not tested here.

use crate::util;

use std::path::PathBuf;
use std::time::Duration;
use util::{parse_hits, Tracer, Writer};

const MODULE: &str = "ksymwatch_fake";

/// A kallsyms whose `ksymwatch_fake` module holds `fake_stack` (0x4000 bytes), whose word at 0x3e00 is
/// `busy`.
fn fake_kallsyms(busy: u64) -> PathBuf {
    fake_kallsyms_of("kallsyms", busy, &[("fake_stack", 0), ("fake_end", 0x4000)])
}

/// A kallsyms `file` whose `ksymwatch_fake` module has `symbols` at these offsets into a made-up 0x4000
/// bytes whose word at 0x3e00 is `busy`.
fn fake_kallsyms_of(file: &str, busy: u64, symbols: &[(&str, u64)]) -> PathBuf {
    let real = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let addr = |name: &str| {
        real.lines()
            .find(|l| l.split_whitespace().nth(2) == Some(name))
            .and_then(|l| u64::from_str_radix(l.split_whitespace().next()?, 16).ok())
            .unwrap_or_else(|| panic!("{name} not in /proc/kallsyms"))
    };
    let (text, stack) = (addr("_text"), busy - 0x3e00);
    let dir = util::temp_dir("ksymwatch-live-module");
    let k = dir.join(file);
    let mut lines = format!("{text:016x} T _text\n");
    for (name, off) in symbols {
        lines.push_str(&format!("{:016x} d {name}\t[{MODULE}]\n", stack + off));
    }
    std::fs::write(&k, lines).unwrap();
    k
}

/// Sends `parts` (NUL-separated) as a kernel uevent; `false` when this process may not.
fn send_uevent(parts: &[&str]) -> bool {
    let mut msg = Vec::new();
    for p in parts {
        msg.extend_from_slice(p.as_bytes());
        msg.push(0);
    }
    // SAFETY: plain socket call; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_KOBJECT_UEVENT,
        )
    };
    if fd < 0 {
        return false;
    }
    // SAFETY: sockaddr_nl is plain data.
    let mut to: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    to.nl_family = libc::AF_NETLINK as u16;
    // Group 1: the kernel's uevents, what ksymwatch listens to.
    to.nl_groups = 1;
    // SAFETY: `msg` and `to` are valid for the lengths given; `fd` is ours and closed right after.
    let sent = unsafe {
        let n = libc::sendto(
            fd,
            msg.as_ptr().cast(),
            msg.len(),
            0,
            (&to as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        );
        libc::close(fd);
        n
    };
    sent == msg.len() as isize
}

fn removal(module: &str) -> bool {
    let devpath = format!("/module/{module}");
    send_uevent(&[
        &format!("remove@{devpath}"),
        "ACTION=remove",
        &format!("DEVPATH={devpath}"),
        "SUBSYSTEM=module",
        "SEQNUM=1",
    ])
}

/// The module's variable, stood in for by a helper storing on CPU 0: the helper, a kallsyms that puts the
/// fake module's `fake_stack+0x3e00` at the helper's global, and that target.
fn module_target() -> (Writer, PathBuf, String) {
    let writer = Writer::spinning(0);
    let k = fake_kallsyms(writer.addr);
    (writer, k, format!("{MODULE}:fake_stack+0x3e00"))
}

/// Reads `t`'s stream until a hit has been printed.
fn until_a_hit(t: &mut Tracer) -> String {
    t.read_until(|l| !l.starts_with('#') && !l.trim().is_empty())
}

live_test!(a_module_watch_ends_at_its_unload_with_exit_0, {
    let (_writer, k, target) = module_target();
    let mut t = Tracer::start(&["write", &target, "--kallsyms", k.to_str().unwrap()]);
    let before = until_a_hit(&mut t);
    // Another module's removal leaves the watch alone.
    if !removal("some_other_module") {
        util::skip("cannot send a kernel uevent (needs CAP_NET_ADMIN)");
        return;
    }
    let more = until_a_hit(&mut t);
    assert!(!more.contains("# module"), "{more}");
    assert!(removal(MODULE));
    let (code, rest, err) = t.wait(Duration::from_secs(10));
    assert_eq!(code, 0, "stderr: {err}");
    let mark = format!("# module {MODULE} unloaded at ");
    let at = rest
        .find(&mark)
        .unwrap_or_else(|| panic!("no `{mark}` mark:\n{rest}\nstderr: {err}"));
    let line = rest[at..].lines().next().unwrap();
    assert!(
        line.ends_with(&format!(": no longer watching {target}")),
        "{line}"
    );
    assert!(
        parse_hits(&rest[at..]).is_empty(),
        "no hit after the mark:\n{rest}"
    );
    let all = format!("{before}{more}{rest}");
    assert!(!parse_hits(&all).is_empty());
    assert!(
        err.contains("stopped: watched module unloaded"),
        "the usual summary, with the reason: {err}"
    );
});

// With a target outside the module, the unload disarms the module's target only and the run goes on.
live_test!(other_targets_outlive_the_module, {
    let (_writer, k, target) = module_target();
    let mut t = Tracer::start_json(&[
        "write",
        &target,
        "0x10000/8",
        "--json",
        "--kallsyms",
        k.to_str().unwrap(),
    ]);
    t.read_until(|l| l.contains("\"type\":\"hit\""));
    if !removal(MODULE) {
        util::skip("cannot send a kernel uevent (needs CAP_NET_ADMIN)");
        return;
    }
    let marked = t.read_until(|l| l.contains("\"type\":\"module_unloaded\""));
    let mark: serde_json::Value = serde_json::from_str(marked.lines().last().unwrap()).unwrap();
    assert_eq!(mark["module"], MODULE, "{marked}");
    assert_eq!(mark["targets"], serde_json::json!([target]));
    // Still running, on the other target: a breakpoint on an unmapped user address sees no store, and
    // the session waits for a signal as usual.
    std::thread::sleep(Duration::from_millis(300));
    assert!(t.child.try_wait().unwrap().is_none(), "the run goes on");
    let (code, rest, err) = t.interrupt(Duration::from_secs(10));
    assert_eq!(code, 0, "stderr: {err}");
    assert!(
        !rest.contains("\"target\":\"ksymwatch_fake"),
        "no hit of the module's target after the mark:\n{rest}"
    );
    assert!(rest.contains("\"stop\":\"signal\""), "{rest}");
});

// A typed target on a module's variable (its base among the module's symbols, the member from BTF) is
// the module's memory too: it ends at the unload like any other.
live_test!(a_typed_watch_on_a_module_variable_ends_at_its_unload, {
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        util::skip("/sys/kernel/btf/vmlinux is missing: this kernel has no BTF");
        return;
    }
    // `fake_head`, a list_head over the helper's busy word.
    let writer = Writer::spinning(0);
    let k = fake_kallsyms_of(
        "typed-kallsyms",
        writer.addr,
        &[("fake_head", 0x3e00), ("fake_end", 0x3e10)],
    );
    let target = format!("(struct list_head){MODULE}:fake_head.next");
    let mut t = Tracer::start(&["write", &target, "--kallsyms", k.to_str().unwrap()]);
    until_a_hit(&mut t);
    if !removal(MODULE) {
        util::skip("cannot send a kernel uevent (needs CAP_NET_ADMIN)");
        return;
    }
    let (code, rest, err) = t.wait(Duration::from_secs(10));
    assert_eq!(code, 0, "stderr: {err}");
    assert!(
        rest.contains(&format!("# module {MODULE} unloaded at ")),
        "no unload mark:\n{rest}\nstderr: {err}"
    );
    assert!(err.contains("stopped: watched module unloaded"), "{err}");
});
