//! Ending the watches on a kernel module's memory when the module is unloaded: its memory is freed and
//! reused, so a breakpoint left there would report stores into whatever the kernel puts there next.
//!
//! The kernel announces `remove@/module/NAME` (`SUBSYSTEM=module`) on the NETLINK_KOBJECT_UEVENT socket the
//! session already reads for CPU hotplug ([`crate::trace::hotplug`]); it is sent while the module is torn
//! down, after its exit function ran and before its memory is freed. The session reads it a little later
//! (the loop's next wake), so a store into the freed memory in between can still be reported, attributed to
//! the module's target. Netlink may drop messages (ENOBUFS), so the slow reconcile also looks for each
//! watched module's `/sys/module/NAME/initstate`, which a loadable module has while it is loaded
//! ([`gone`]); modules that had none when the session started (built-in ones, kallsyms' pseudo-modules
//! such as `[bpf]` or `[__builtin__ftrace]`) are never taken for unloaded.
//!
//! The sender of a uevent is not checked: only a process with CAP_NET_ADMIN may send to the kernel's uevent
//! group, and it could as well end the watch by signal. That is what lets a test stand in for `rmmod`.
//!
//! This machine's kernel is built without module support, so no module is ever unloaded here: the uevent
//! parse and the session's decision ([`plan`]) are tested on bytes and made-up watches, and a live test
//! (`tests/suite/live_module.rs`) sends the uevent itself over a made-up module's kallsyms; the kernel's own
//! side of an unload is not tested.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::model::scope::Scope;
use crate::model::watch::Watch;
use crate::report::{StopReason, StreamEvent};
use crate::trace::context::Rings;

/// Where loaded modules show up in sysfs.
pub const SYS_MODULE: &str = "/sys/module";

/// The module a uevent datagram (`action@devpath\0KEY=VALUE\0...`) says was removed; `None` for anything
/// else (a module being added, other subsystems, udev's own `libudev` messages).
pub fn parse_removal(msg: &[u8]) -> Option<&str> {
    let mut parts = msg.split(|&b| b == 0).filter(|p| !p.is_empty());
    let head = std::str::from_utf8(parts.next()?).ok()?;
    let (action, devpath) = head.split_once('@')?;
    let subsystem = parts.find_map(|kv| kv.strip_prefix(b"SUBSYSTEM="))?;
    if action != "remove" || subsystem != b"module" {
        return None;
    }
    let name = devpath.strip_prefix("/module/")?;
    (!name.is_empty() && !name.contains('/')).then_some(name)
}

/// What the session does when a module goes: disarm `targets` (indices of the watches in it), and end the
/// run when `last` (no armed watch is left).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unload {
    pub targets: Vec<usize>,
    pub last: bool,
}

/// The watches `module` takes with it, among those still `armed` (by index); `None` when it holds none
/// of them (a module nobody watched, or one already handled).
pub fn plan(watches: &[Watch], armed: impl Fn(usize) -> bool, module: &str) -> Option<Unload> {
    let targets: Vec<usize> = watches
        .iter()
        .enumerate()
        .filter(|(i, w)| armed(*i) && w.module.as_deref() == Some(module))
        .map(|(i, _)| i)
        .collect();
    if targets.is_empty() {
        return None;
    }
    let last = (0..watches.len()).all(|i| targets.contains(&i) || !armed(i));
    Some(Unload { targets, last })
}

/// The modules of `watches` that are loadable and loaded now (they have `initstate` under `sys_module`):
/// the ones [`gone`] may later find unloaded.
pub fn loaded(watches: &[Watch], sys_module: &Path) -> Vec<Arc<str>> {
    let mut out: Vec<Arc<str>> = Vec::new();
    for m in watches.iter().filter_map(|w| w.module.as_ref()) {
        if !out.contains(m) && sys_module.join(&**m).join("initstate").exists() {
            out.push(m.clone());
        }
    }
    out
}

/// Whether a module [`loaded`] found has since been unloaded.
pub fn gone(module: &str, sys_module: &Path) -> bool {
    !sys_module.join(module).join("initstate").exists()
}

/// What ending a module's watches asks of the session: which watches are still armed, and closing one
/// for good (the watches themselves, and printing what the rings hold, from [`Rings`]).
pub trait Unloading: Rings {
    /// Whether target `index` still has events.
    fn watch_armed(&self, index: usize) -> bool;
    /// Reads target `index`'s rings empty into the merge and closes its events for good.
    fn close_watch(&mut self, index: usize);
}

/// The session's side of module unloads: the loadable modules holding targets, followed in sysfs, and
/// what a removal does to the watches on them.
#[derive(Debug)]
pub struct Modules {
    /// Loaded when the session started, and not seen going since: the reconcile checks sysfs for them in
    /// case their removal uevent was dropped.
    loaded: Vec<Arc<str>>,
    /// Where loaded modules show up ([`SYS_MODULE`]; a test's directory).
    sys_module: PathBuf,
}

impl Modules {
    /// The modules of `watches` loaded now under `sys_module`. Only a system-wide watch (`scope`) can hold
    /// a module's memory: a process watch follows none.
    pub fn new(watches: &[Watch], scope: &Scope, sys_module: &Path) -> Modules {
        Modules {
            loaded: if scope.system_wide() {
                loaded(watches, sys_module)
            } else {
                Vec::new()
            },
            sys_module: sys_module.to_path_buf(),
        }
    }

    /// The followed modules gone from sysfs (their removal uevent dropped, or not read yet), for the
    /// reconcile.
    pub fn gone(&self) -> Vec<String> {
        self.loaded
            .iter()
            .filter(|m| gone(m, &self.sys_module))
            .map(|m| m.to_string())
            .collect()
    }

    /// `module` was removed: every watch on its memory is drained, closed and marked, before any hit of
    /// the other watches recorded after this moment; when no watch is left the run ends (exit 0).
    pub fn removed(&mut self, module: &str, ctx: &mut impl Unloading) -> Option<StopReason> {
        self.loaded.retain(|m| &**m != module);
        let plan = plan(ctx.watches(), |i| ctx.watch_armed(i), module)?;
        for &i in &plan.targets {
            ctx.close_watch(i);
        }
        // Everything the module's watches recorded is printed before the mark. The other rings are read
        // and released with them: a record of theirs still on its way (within the sort slack) prints after
        // the mark, as after a `--control` move.
        if let Some(stop) = ctx.flush() {
            return Some(stop);
        }
        let event = StreamEvent::ModuleUnloaded {
            module: module.to_string(),
            targets: plan
                .targets
                .iter()
                .map(|&i| ctx.watches()[i].label.clone())
                .collect(),
        };
        let now = ctx.now();
        if let Some(stop) = ctx.emit(&event, now) {
            return Some(stop);
        }
        plan.last.then_some(StopReason::ModuleUnloaded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::watch::Access;

    use crate::trace::context::fake::{through_log, Log};
    use crate::trace::hotplug::uevent as msg;

    /// What the kernel sends for `rmmod nfs` (lib/kobject_uevent.c: the header, then ACTION, DEVPATH,
    /// SUBSYSTEM, SEQNUM; a module's uevent carries no more).
    #[test]
    fn parses_a_module_removal() {
        let rm = msg(&[
            "remove@/module/nfs",
            "ACTION=remove",
            "DEVPATH=/module/nfs",
            "SUBSYSTEM=module",
            "SEQNUM=2107",
        ]);
        assert_eq!(parse_removal(&rm), Some("nfs"));
    }

    #[test]
    fn ignores_loads_other_subsystems_and_junk() {
        let add = msg(&[
            "add@/module/nfs",
            "ACTION=add",
            "DEVPATH=/module/nfs",
            "SUBSYSTEM=module",
        ]);
        assert_eq!(parse_removal(&add), None);
        let cpu = msg(&[
            "remove@/devices/virtual/cpuid/cpu1",
            "ACTION=remove",
            "SUBSYSTEM=cpuid",
        ]);
        assert_eq!(parse_removal(&cpu), None);
        // A device of some module's driver, not the module itself.
        let nested = msg(&["remove@/module/nfs/holders", "SUBSYSTEM=module"]);
        assert_eq!(parse_removal(&nested), None);
        assert_eq!(
            parse_removal(&msg(&["remove@/module/", "SUBSYSTEM=module"])),
            None
        );
        assert_eq!(
            parse_removal(&msg(&["remove@/module/nfs"])),
            None,
            "no SUBSYSTEM"
        );
        assert_eq!(parse_removal(b"libudev\0\xfe\xed"), None);
        assert_eq!(parse_removal(b""), None);
    }

    fn w(label: &str, module: Option<&str>) -> Watch {
        Watch {
            label: label.into(),
            addr: 0xffffffffc0001000,
            len: 8,
            access: Access::Write,
            module: module.map(Arc::from),
            per_cpu: None,
        }
    }

    #[test]
    fn plan_disarms_the_modules_watches_and_ends_with_the_last() {
        let watches = [
            w("a", Some("foo")),
            w("b", None),
            w("c", Some("foo")),
            w("d", Some("bar")),
        ];
        let all = |_| true;
        assert_eq!(
            plan(&watches, all, "foo"),
            Some(Unload {
                targets: vec![0, 2],
                last: false
            })
        );
        assert_eq!(plan(&watches, all, "baz"), None, "nobody watched it");
        // foo already gone; bar goes: b (vmlinux) is still armed.
        let armed = |i| i != 0 && i != 2;
        assert_eq!(
            plan(&watches, armed, "bar"),
            Some(Unload {
                targets: vec![3],
                last: false
            })
        );
        assert_eq!(plan(&watches, armed, "foo"), None, "handled once");
        // Only module watches: the last module to go ends the run.
        let only = [w("a", Some("foo")), w("d", Some("bar"))];
        assert_eq!(plan(&only, |i| i == 1, "bar").map(|u| u.last), Some(true));
        assert_eq!(plan(&only, |_| true, "foo").map(|u| u.last), Some(false));
        assert_eq!(
            plan(&only[..1], |_| true, "foo").map(|u| u.last),
            Some(true)
        );
    }

    #[test]
    fn only_modules_with_an_initstate_are_followed_in_sysfs() {
        let dir = std::env::temp_dir().join(format!("ksymwatch-unload-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("foo")).unwrap();
        std::fs::write(dir.join("foo/initstate"), "live\n").unwrap();
        // Built in: parameters but no initstate.
        std::fs::create_dir_all(dir.join("printk/parameters")).unwrap();
        let watches = [
            w("a", Some("foo")),
            w("b", Some("foo")),
            w("c", Some("printk")),
            w("d", Some("__builtin__ftrace")),
            w("e", None),
        ];
        let followed = loaded(&watches, &dir);
        assert_eq!(followed, [Arc::from("foo")]);
        assert!(!gone("foo", &dir));
        std::fs::remove_dir_all(dir.join("foo")).unwrap();
        assert!(gone("foo", &dir));
        std::fs::remove_dir_all(&dir).unwrap();
    }
    /// A session of watches for [`Modules`]: which are armed, and a log.
    struct Session {
        log: Log,
        armed: Vec<bool>,
    }

    impl Session {
        fn new(watches: Vec<Watch>) -> Session {
            Session {
                armed: vec![true; watches.len()],
                log: Log {
                    watches,
                    ..Log::default()
                },
            }
        }
    }

    through_log!(Session);

    impl Unloading for Session {
        fn watch_armed(&self, index: usize) -> bool {
            self.armed[index]
        }

        fn close_watch(&mut self, index: usize) {
            self.log
                .call(format!("close {}", self.log.watches[index].label));
            self.armed[index] = false;
        }
    }

    /// A sysfs of loadable modules `names`, in a directory of its own.
    fn sys_module(test: &str, names: &[&str]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ksymwatch-{test}-{}", std::process::id()));
        for n in names {
            std::fs::create_dir_all(dir.join(n)).unwrap();
            std::fs::write(dir.join(n).join("initstate"), "live\n").unwrap();
        }
        dir
    }

    /// A removal uevent: the module's watches are closed, what they recorded printed, then the mark names
    /// them; the other watches go on, and the same removal again changes nothing.
    #[test]
    fn a_module_unload_seen_by_uevent_closes_its_watches_before_the_mark() {
        let dir = sys_module("uevent", &["foo", "bar"]);
        let watches = vec![
            w("a", Some("foo")),
            w("b", Some("bar")),
            w("c", Some("foo")),
        ];
        let mut modules = Modules::new(&watches, &Scope::System, &dir);
        let mut ctx = Session::new(watches);
        ctx.log.now = 7_000;
        let rm = msg(&["remove@/module/foo", "ACTION=remove", "SUBSYSTEM=module"]);
        let module = parse_removal(&rm).unwrap_or_default();
        assert_eq!(
            modules.removed(module, &mut ctx),
            None,
            "bar's watch is left"
        );
        assert_eq!(
            ctx.log.calls(),
            ["close a", "close c", "flush", "emit ModuleUnloaded"]
        );
        let mark = StreamEvent::ModuleUnloaded {
            module: "foo".into(),
            targets: vec!["a".into(), "c".into()],
        };
        assert_eq!(ctx.log.events, [(mark, 7_000)]);
        ctx.log.calls.clear();
        assert_eq!(modules.removed("foo", &mut ctx), None);
        assert!(ctx.log.calls.is_empty(), "{:?}", ctx.log.calls);
        assert!(modules.gone().is_empty(), "bar is loaded");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A removal whose uevent was dropped: the reconcile finds the module gone from sysfs, and the run
    /// ends with its last watch; a module found gone is not followed any more.
    #[test]
    fn a_module_unload_missed_by_uevent_is_found_by_the_reconcile() {
        let dir = sys_module("reconcile", &["foo", "bar"]);
        let watches = vec![w("a", Some("foo")), w("b", Some("bar"))];
        let mut modules = Modules::new(&watches, &Scope::System, &dir);
        let mut ctx = Session::new(watches);
        ctx.armed[0] = false;
        std::fs::remove_dir_all(dir.join("bar")).unwrap();
        assert_eq!(modules.gone(), ["bar"]);
        let stop = modules.removed("bar", &mut ctx);
        assert_eq!(stop, Some(StopReason::ModuleUnloaded), "no watch left");
        assert_eq!(ctx.log.calls(), ["close b", "flush", "emit ModuleUnloaded"]);
        assert!(modules.gone().is_empty(), "handled once");
        // A process watch holds no module's memory: nothing is followed.
        let user = Modules::new(&[w("a", Some("foo"))], &Scope::Processes(vec![7]), &dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(user.gone().is_empty());
    }
}
