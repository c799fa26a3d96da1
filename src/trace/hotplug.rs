//! Following CPU hotplug, so a CPU that comes online after arming is covered (a watch that only
//! holds the CPUs online at its start silently misses every later one) and one that goes away gives up its
//! dead event.
//!
//! The kernel announces `online@/devices/system/cpu/cpuN` and `offline@...` on the NETLINK_KOBJECT_UEVENT
//! socket (no udev needed). Netlink may drop messages (ENOBUFS), and sysfs `online` files never signal poll,
//! so every message, and a slow timer, triggers a reconcile against `/sys/devices/system/cpu/online`. The
//! same socket tells of kernel modules being removed, which `crate::trace::unload` acts on.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::cpulist;
use crate::error::Error;
use crate::perf::event::{OpenError, Stage};
use crate::perf::sys;
use crate::report::{StopReason, StreamEvent};
use crate::trace::context::Rings;
use crate::trace::unload;

/// A CPU state change as a uevent reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuChange {
    Online(u32),
    Offline(u32),
}

/// Parses one uevent datagram (`action@devpath\0KEY=VALUE\0...`); `None` for anything that is not a CPU
/// going online or offline (cpuid add/remove, other subsystems, udev's own `libudev` messages).
pub fn parse_uevent(msg: &[u8]) -> Option<CpuChange> {
    let mut parts = msg.split(|&b| b == 0).filter(|p| !p.is_empty());
    let head = std::str::from_utf8(parts.next()?).ok()?;
    let (action, devpath) = head.split_once('@')?;
    let mut subsystem = None;
    for kv in parts {
        if let Some(v) = kv.strip_prefix(b"SUBSYSTEM=") {
            subsystem = std::str::from_utf8(v).ok();
        }
    }
    if subsystem != Some("cpu") {
        return None;
    }
    let cpu: u32 = devpath
        .strip_prefix("/devices/system/cpu/cpu")?
        .parse()
        .ok()?;
    match action {
        "online" => Some(CpuChange::Online(cpu)),
        "offline" => Some(CpuChange::Offline(cpu)),
        _ => None,
    }
}

/// What the event loop must do to match reality.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    /// Close these CPUs' events (drain first).
    pub offline: Vec<u32>,
    /// Open fresh events on these.
    pub online: Vec<u32>,
    /// When the uevent that triggered this was read (CLOCK_MONOTONIC ns), so the mark can say how long arming
    /// took; `None` for a timer reconcile.
    pub uevent_ns: Option<u64>,
    /// Kernel modules the uevents said were removed (`crate::trace::unload`), in the order they went.
    pub modules_removed: Vec<String>,
}

/// Pure reconcile: `armed` is what we hold, `online` what sysfs says, `bounced` CPUs reported offline since
/// the last reconcile (their events are dead even if the CPU is back), `follow` the CPUs we may arm.
pub fn plan(
    armed: &BTreeSet<u32>,
    online: &BTreeSet<u32>,
    bounced: &BTreeSet<u32>,
    follow: Option<&BTreeSet<u32>>,
) -> Changes {
    let offline: Vec<u32> = armed
        .iter()
        .copied()
        .filter(|c| !online.contains(c) || bounced.contains(c))
        .collect();
    let online: Vec<u32> = online
        .iter()
        .copied()
        .filter(|c| follow.is_none_or(|f| f.contains(c)))
        .filter(|c| !armed.contains(c) || offline.contains(c))
        .collect();
    Changes {
        offline,
        online,
        ..Changes::default()
    }
}

pub struct Hotplug {
    socket: Option<OwnedFd>,
    follow: Option<BTreeSet<u32>>,
    online_path: PathBuf,
    last_reconcile: Instant,
    interval: Duration,
    /// `--strict-hotplug`: a CPU that comes online and cannot be armed ends the session.
    pub strict: bool,
    buf: Vec<u8>,
}

impl Hotplug {
    /// Opens the uevent socket. If that fails the periodic reconcile still follows CPUs, only more slowly;
    /// the returned warning says so.
    pub fn new(follow: Option<BTreeSet<u32>>, strict: bool) -> (Hotplug, Option<String>) {
        let (socket, warning) = match sys::uevent_socket() {
            Ok(s) => (Some(s), None),
            Err(e) => (
                None,
                Some(format!("cannot listen for CPU hotplug uevents ({e}); checking /sys/devices/system/cpu/online every second instead")),
            ),
        };
        let hp = Hotplug {
            socket,
            follow,
            online_path: PathBuf::from(cpulist::ONLINE),
            last_reconcile: Instant::now(),
            interval: Duration::from_secs(1),
            strict,
            buf: vec![0; 8192],
        };
        (hp, warning)
    }

    /// A listener without a socket reading the online list at `online_path` (a test's file).
    #[cfg(test)]
    fn reading(online_path: &std::path::Path, follow: Option<BTreeSet<u32>>) -> Hotplug {
        Hotplug {
            socket: None,
            follow,
            online_path: online_path.to_path_buf(),
            last_reconcile: Instant::now(),
            interval: Duration::from_secs(3600),
            strict: false,
            buf: Vec::new(),
        }
    }

    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.socket.as_ref().map(|s| s.as_fd())
    }

    /// Reads every queued uevent and reconciles.
    pub fn on_readable(&mut self, armed: &BTreeSet<u32>) -> Changes {
        let mut bounced = BTreeSet::new();
        let mut seen = None;
        let mut modules_removed = Vec::new();
        if let Some(sock) = &self.socket {
            loop {
                match sys::recv(sock.as_fd(), &mut self.buf) {
                    Ok(Some(n)) => {
                        // Any uevent starts the clock: a CPU's cpuid `add` comes just before its `online`, and
                        // the reconcile it triggers may already see the CPU in sysfs and arm it.
                        seen.get_or_insert_with(sys::monotonic_ns);
                        let msg = &self.buf[..n];
                        if let Some(CpuChange::Offline(cpu)) = parse_uevent(msg) {
                            bounced.insert(cpu);
                        } else if let Some(m) = unload::parse_removal(msg) {
                            modules_removed.push(m.to_string());
                        }
                    }
                    Ok(None) => break,
                    // ENOBUFS: messages were dropped; the reconcile below recovers the state.
                    Err(_) => break,
                }
            }
        }
        let mut changes = self.reconcile_with(armed, &bounced);
        changes.uevent_ns = seen;
        changes.modules_removed = modules_removed;
        changes
    }

    pub fn reconcile_due(&self) -> bool {
        self.last_reconcile.elapsed() >= self.interval
    }

    pub fn reconcile(&mut self, armed: &BTreeSet<u32>) -> Changes {
        self.reconcile_with(armed, &BTreeSet::new())
    }

    fn reconcile_with(&mut self, armed: &BTreeSet<u32>, bounced: &BTreeSet<u32>) -> Changes {
        self.last_reconcile = Instant::now();
        match cpulist::read(&self.online_path) {
            Ok(online) => plan(armed, &online, bounced, self.follow.as_ref()),
            // Without the online list, only act on what the uevents said.
            Err(_) => Changes {
                offline: bounced.intersection(armed).copied().collect(),
                ..Changes::default()
            },
        }
    }
}

/// Whether this process can listen to hotplug uevents at all (`check` reports it).
pub fn uevents_work() -> bool {
    sys::uevent_socket().is_ok()
}

/// The CPUs that came online and are not armed: since when each has gone unwatched (for the summary's
/// unwatched time) and which were already marked unarmable in the stream (marked once, retried on every
/// reconcile).
#[derive(Debug, Default)]
pub struct Unwatched {
    /// Online but not armable (debug registers taken); already reported.
    unarmable: BTreeSet<u32>,
    /// Not armed yet, with the time each was first seen online.
    since: BTreeMap<u32, u64>,
}

impl Unwatched {
    /// `cpu` went offline at `now`: nothing runs on it, so a window it spent unarmed ends. Returns that
    /// window's length.
    pub fn offline(&mut self, cpu: u32, now: u64) -> Option<u64> {
        let since = self.since.remove(&cpu)?;
        Some(now.saturating_sub(since))
    }

    /// `cpu`, first seen online at `seen`, was armed at `now`: returns how long it went unwatched, from
    /// when it was first seen unarmed if it was.
    pub fn armed(&mut self, cpu: u32, seen: u64, now: u64) -> u64 {
        self.unarmable.remove(&cpu);
        let since = self.since.remove(&cpu).unwrap_or(seen);
        now.saturating_sub(since)
    }

    /// `cpu`, seen online at `seen`, could not be armed: unwatched from its first sighting until armed or
    /// the end. Returns whether to mark it in the stream: the first time, or every time when `strict`
    /// (the mark then ends the run).
    pub fn failed(&mut self, cpu: u32, seen: u64, strict: bool) -> bool {
        self.since.entry(cpu).or_insert(seen);
        strict || self.unarmable.insert(cpu)
    }

    /// The run ends at `now`: each CPU never armed since it came online was unwatched to the end.
    pub fn end(&mut self, now: u64) -> impl Iterator<Item = (u32, u64)> {
        std::mem::take(&mut self.since)
            .into_iter()
            .map(move |(cpu, since)| (cpu, now.saturating_sub(since)))
    }
}

/// What following CPUs asks of the session: its armed CPUs, closing and opening a CPU's events (and,
/// from `Rings`, printing what a closed CPU no longer holds back, and words for a refusal).
pub trait Arming: Rings {
    /// Whether `cpu` has events.
    fn cpu_armed(&self, cpu: u32) -> bool;
    /// Reads `cpu`'s rings empty into the merge and closes its events; `false` when it had none.
    fn close_cpu(&mut self, cpu: u32) -> bool;
    /// Opens and enables `cpu`'s events (all or none), their rings joining the merge; opened disabled
    /// while the watch is off.
    fn open_cpu(&mut self, cpu: u32) -> Result<(), OpenError>;
    /// Whether the watch is on (not `--control off`): a CPU's fresh events are enabled.
    fn watching(&self) -> bool;
    /// `t` on a clock that stands still while the watch is switched off: the unwatched time is counted
    /// on it, since time the user switched off is not a CPU missed.
    fn watched_time(&self, t: u64) -> u64;
}

/// The session's side of CPU hotplug: brings the armed set in line with the [`Changes`] the uevents and
/// the reconcile report, marks each change in the stream, and keeps the time each CPU went unwatched.
#[derive(Debug, Default)]
pub struct Follow {
    unwatched: Unwatched,
    /// `--strict-hotplug`: a CPU that comes online and cannot be armed ends the session.
    strict: bool,
    /// The `--strict-hotplug` failure, returned once the summary is out (exit 3).
    fatal: Option<Error>,
    /// Unwatched time by CPU so far (for the summary).
    unwatched_ns: BTreeMap<u32, u64>,
}

impl Follow {
    pub fn new(strict: bool) -> Follow {
        Follow {
            strict,
            ..Follow::default()
        }
    }

    /// Drains and closes the events of CPUs that went away, opens fresh ones on CPUs that came (a dead
    /// CPU-bound event never revives, see kernel-facts).
    pub fn apply(&mut self, changes: &Changes, ctx: &mut impl Arming) -> Option<StopReason> {
        for &cpu in &changes.offline {
            if let Some(stop) = self.offline(cpu, ctx) {
                return Some(stop);
            }
        }
        for &cpu in &changes.online {
            if let Some(stop) = self.online(cpu, changes.uevent_ns, ctx) {
                return Some(stop);
            }
        }
        None
    }

    /// `cpu` went offline: whatever it wrote before it left is still in its ring, printed before the mark;
    /// its counters freeze where they were.
    fn offline(&mut self, cpu: u32, ctx: &mut impl Arming) -> Option<StopReason> {
        if let Some(ns) = self.unwatched.offline(cpu, ctx.watched_time(ctx.now())) {
            *self.unwatched_ns.entry(cpu).or_default() += ns;
        }
        if !ctx.close_cpu(cpu) {
            return None;
        }
        if let Some(stop) = ctx.release_ready() {
            return Some(stop);
        }
        let now = ctx.now();
        ctx.emit(&StreamEvent::CpuOffline { cpu }, now)
    }

    /// `cpu` came online (its uevent at `uevent_ns`, if one told): armed, or marked as not armed.
    fn online(
        &mut self,
        cpu: u32,
        uevent_ns: Option<u64>,
        ctx: &mut impl Arming,
    ) -> Option<StopReason> {
        if ctx.cpu_armed(cpu) {
            return None;
        }
        let open_start = ctx.now();
        let seen = uevent_ns.unwrap_or(open_start);
        let seen_watched = ctx.watched_time(seen);
        let event = match ctx.open_cpu(cpu) {
            Ok(()) => {
                let now = ctx.now();
                let window = self
                    .unwatched
                    .armed(cpu, seen_watched, ctx.watched_time(now));
                *self.unwatched_ns.entry(cpu).or_default() += window;
                StreamEvent::CpuOnline {
                    cpu,
                    after_uevent_ns: uevent_ns.map(|t| now.saturating_sub(t)),
                    open_ns: now.saturating_sub(open_start),
                    enabled: ctx.watching(),
                }
            }
            // ENODEV: it went away again before we got to it; the next uevent or reconcile sorts it out.
            Err(e) if e.stage == Stage::Open && e.err.raw_os_error() == Some(libc::ENODEV) => {
                return None
            }
            Err(e) => self.arm_failed(cpu, seen_watched, &e, ctx)?,
        };
        let now = ctx.now();
        if let Some(stop) = ctx.emit(&event, now) {
            return Some(stop);
        }
        // The `NOT armed` mark is out; the session ends like a signal ends it (summary, then exit 3).
        self.fatal.as_ref().map(|_| StopReason::StrictHotplug(cpu))
    }

    /// A CPU came online (first seen at `seen`, on the watched clock) and could not be armed: unwatched from
    /// then on, marked once in the stream (and on stderr) and retried on every reconcile; `None` when it
    /// was already marked.
    /// With --strict-hotplug the mark is also the end: the failure is kept for [`Follow::take_fatal`].
    fn arm_failed(
        &mut self,
        cpu: u32,
        seen: u64,
        e: &OpenError,
        ctx: &impl Arming,
    ) -> Option<StreamEvent> {
        if !self.unwatched.failed(cpu, seen, self.strict) {
            return None;
        }
        let (reason, kind) = ctx.explain(e);
        if self.strict {
            self.fatal = Some(Error::arm(format!("--strict-hotplug: {reason}")));
        }
        Some(StreamEvent::CpuArmFailed { cpu, reason, kind })
    }

    /// The `--strict-hotplug` failure that ended the run, if one did.
    pub fn take_fatal(&mut self) -> Option<Error> {
        self.fatal.take()
    }

    /// The run ends at `now` (on [`Arming::watched_time`]'s clock): the time each CPU went unwatched, those
    /// never armed since they came online unwatched to the end.
    pub fn end(&mut self, now: u64) -> BTreeMap<u32, u64> {
        let mut out = std::mem::take(&mut self.unwatched_ns);
        for (cpu, ns) in self.unwatched.end(now) {
            *out.entry(cpu).or_default() += ns;
        }
        // Spans spent wholly switched off: nothing was missed there.
        out.retain(|_, &mut ns| ns > 0);
        out
    }
}

/// A uevent datagram of `parts` (`action@devpath`, then `KEY=VALUE`s), each NUL-terminated as the kernel
/// sends them, for tests.
#[cfg(test)]
pub(crate) fn uevent(parts: &[&str]) -> Vec<u8> {
    let mut v = Vec::new();
    for p in parts {
        v.extend_from_slice(p.as_bytes());
        v.push(0);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::context::fake::{through_log, Log};
    use crate::trace::events::OffClock;

    use super::uevent as msg;

    #[test]
    fn parses_cpu_online_offline() {
        let off = msg(&[
            "offline@/devices/system/cpu/cpu1",
            "ACTION=offline",
            "DEVPATH=/devices/system/cpu/cpu1",
            "SUBSYSTEM=cpu",
            "MODALIAS=cpu:type:x86\n",
            "SEQNUM=4242",
        ]);
        assert_eq!(parse_uevent(&off), Some(CpuChange::Offline(1)));
        let on = msg(&[
            "online@/devices/system/cpu/cpu12",
            "ACTION=online",
            "SUBSYSTEM=cpu",
        ]);
        assert_eq!(parse_uevent(&on), Some(CpuChange::Online(12)));
    }

    #[test]
    fn ignores_cpuid_and_junk() {
        let cpuid = msg(&[
            "remove@/devices/virtual/cpuid/cpu1",
            "ACTION=remove",
            "SUBSYSTEM=cpuid",
        ]);
        assert_eq!(parse_uevent(&cpuid), None);
        assert_eq!(parse_uevent(b"libudev\0\xfe\xed"), None);
        assert_eq!(parse_uevent(b""), None);
        assert_eq!(
            parse_uevent(&msg(&["online@/devices/system/cpu/cpuX", "SUBSYSTEM=cpu"])),
            None
        );
    }

    fn set(v: &[u32]) -> BTreeSet<u32> {
        v.iter().copied().collect()
    }

    #[test]
    fn plan_covers_every_transition() {
        // cpu1 left.
        assert_eq!(
            plan(&set(&[0, 1]), &set(&[0]), &set(&[]), None),
            Changes {
                offline: vec![1],
                online: vec![],
                ..Changes::default()
            }
        );
        // cpu1 came back.
        assert_eq!(
            plan(&set(&[0]), &set(&[0, 1]), &set(&[]), None),
            Changes {
                offline: vec![],
                online: vec![1],
                ..Changes::default()
            }
        );
        // cpu1 bounced between two looks: its event is dead, replace it.
        assert_eq!(
            plan(&set(&[0, 1]), &set(&[0, 1]), &set(&[1]), None),
            Changes {
                offline: vec![1],
                online: vec![1],
                ..Changes::default()
            }
        );
        // --cpus 0: cpu1 is never armed.
        assert_eq!(
            plan(&set(&[0]), &set(&[0, 1]), &set(&[]), Some(&set(&[0]))),
            Changes::default()
        );
    }

    #[test]
    fn unwatched_time_runs_from_the_first_sighting_until_armed_offline_or_the_end() {
        let mut u = Unwatched::default();
        // Armed at once: unwatched from its uevent to the arming.
        assert_eq!(u.armed(1, 100, 150), 50);
        // Fails twice, then is armed: from the first failure's sighting, marked only once.
        assert!(u.failed(2, 1_000, false));
        assert!(!u.failed(2, 2_000, false), "already marked");
        assert_eq!(u.armed(2, 3_000, 3_500), 2_500);
        assert!(
            u.failed(2, 4_000, false),
            "armed since: a new failure is marked again"
        );
        // Goes offline unarmed: its window ends there; once.
        assert_eq!(u.offline(2, 4_600), Some(600));
        assert_eq!(u.offline(2, 4_700), None);
        assert_eq!(u.offline(3, 4_700), None, "never seen unarmed");
        // Still unarmed at the end.
        assert!(u.failed(3, 5_000, false));
        assert!(u.failed(4, 6_000, false));
        assert_eq!(u.end(7_000).collect::<Vec<_>>(), [(3, 2_000), (4, 1_000)]);
        assert_eq!(u.end(8_000).count(), 0);
    }

    #[test]
    fn strict_marks_every_failure() {
        let mut u = Unwatched::default();
        assert!(u.failed(1, 10, true));
        assert!(u.failed(1, 20, true));
        assert_eq!(u.end(30).collect::<Vec<_>>(), [(1, 20)]);
    }
    /// A session of CPUs for [`Follow`]: which are armed, which refuse arming (with an errno), and a
    /// log. Opening a CPU takes 1 µs.
    struct Cpus {
        log: Log,
        armed: BTreeSet<u32>,
        refuse: BTreeMap<u32, i32>,
        /// `--control off`.
        off: bool,
        /// The time the watch was switched off.
        clock: OffClock,
    }

    impl Cpus {
        fn new(armed: &[u32]) -> Cpus {
            Cpus {
                log: Log {
                    explain: Some(|e| {
                        let errno = e.err.raw_os_error().unwrap_or(0);
                        (format!("cpu {} refused (errno {errno})", e.cpu), "busy")
                    }),
                    ..Log::default()
                },
                armed: set(armed),
                refuse: BTreeMap::new(),
                off: false,
                clock: OffClock::default(),
            }
        }
    }

    through_log!(Cpus);

    impl Arming for Cpus {
        fn cpu_armed(&self, cpu: u32) -> bool {
            self.armed.contains(&cpu)
        }

        fn close_cpu(&mut self, cpu: u32) -> bool {
            self.log.call(format!("close {cpu}"));
            self.armed.remove(&cpu)
        }

        fn open_cpu(&mut self, cpu: u32) -> Result<(), OpenError> {
            self.log.call(format!("open {cpu}"));
            self.log.now += 1_000;
            if let Some(&errno) = self.refuse.get(&cpu) {
                return Err(OpenError {
                    cpu,
                    tid: None,
                    stage: Stage::Open,
                    err: std::io::Error::from_raw_os_error(errno),
                    bp: None,
                });
            }
            self.armed.insert(cpu);
            Ok(())
        }

        fn watching(&self) -> bool {
            !self.off
        }

        fn watched_time(&self, t: u64) -> u64 {
            self.clock.watched(t)
        }
    }

    fn online(cpus: &[u32], uevent_ns: Option<u64>) -> Changes {
        Changes {
            online: cpus.to_vec(),
            uevent_ns,
            ..Changes::default()
        }
    }

    fn offline(cpus: &[u32]) -> Changes {
        Changes {
            offline: cpus.to_vec(),
            ..Changes::default()
        }
    }

    /// A CPU that goes offline gives up its events, its last records printed before its mark; back
    /// online it is armed afresh and marked with how long that took.
    #[test]
    fn a_cpu_going_offline_is_drained_before_its_mark_and_armed_again_when_back() {
        let mut ctx = Cpus::new(&[0, 1]);
        let mut f = Follow::new(false);
        ctx.log.now = 10_000;
        assert_eq!(f.apply(&offline(&[1]), &mut ctx), None);
        assert_eq!(ctx.log.calls(), ["close 1", "release", "emit CpuOffline"]);
        assert_eq!(
            ctx.log.events,
            [(StreamEvent::CpuOffline { cpu: 1 }, 10_000)]
        );
        // Not armed: nothing to close, no mark.
        ctx.log.calls.clear();
        assert_eq!(f.apply(&offline(&[5]), &mut ctx), None);
        assert_eq!(ctx.log.calls(), ["close 5"]);
        // Back, its uevent read at 19 µs.
        ctx.log.calls.clear();
        ctx.log.now = 20_000;
        assert_eq!(f.apply(&online(&[0, 1], Some(19_000)), &mut ctx), None);
        assert_eq!(
            ctx.log.calls(),
            ["open 1", "emit CpuOnline"],
            "cpu 0 is armed"
        );
        let online = StreamEvent::CpuOnline {
            cpu: 1,
            after_uevent_ns: Some(2_000),
            open_ns: 1_000,
            enabled: true,
        };
        assert_eq!(ctx.log.events.last(), Some(&(online, 21_000)));
        assert_eq!(
            f.end(30_000),
            BTreeMap::from([(1, 2_000)]),
            "unwatched from its uevent to its arming"
        );
    }

    /// A CPU back while the watch is off (`--control off`) is armed disabled, and its mark says so.
    #[test]
    fn a_cpu_back_while_the_watch_is_off_is_marked_off() {
        let mut ctx = Cpus::new(&[0]);
        ctx.off = true;
        let mut f = Follow::new(false);
        assert_eq!(f.apply(&online(&[1], None), &mut ctx), None);
        assert!(
            matches!(
                ctx.log.events.last(),
                Some((StreamEvent::CpuOnline { enabled: false, .. }, _))
            ),
            "{:?}",
            ctx.log.events
        );
    }

    /// Time the user switched the watch off is not unwatched time: a CPU that could not be armed is
    /// unwatched from its uevent to its arming less the time the watch was off, one back while the watch
    /// is off is armed (disabled) with nothing missed, and one that cannot be armed while it is off
    /// misses nothing either until the watch is on. (The off time was added to the summary's `unwatched`
    /// and its warning that stores there were not counted.)
    #[test]
    fn time_switched_off_is_not_unwatched() {
        let (mut ctx, mut f) = refusing_cpu1(libc::EBUSY, false);
        ctx.log.now = 1_000;
        assert_eq!(f.apply(&online(&[1], Some(100)), &mut ctx), None);
        ctx.clock.off(2_000);
        ctx.clock.on(4_500);
        ctx.refuse.clear();
        ctx.log.now = 5_000;
        // Armed at 6 µs (the open takes 1 µs): 5.9 µs since the uevent, 2.5 of them off.
        assert_eq!(f.apply(&online(&[1], None), &mut ctx), None);
        ctx.off = true;
        ctx.clock.off(7_000);
        ctx.log.now = 8_000;
        assert_eq!(f.apply(&online(&[2], Some(7_500)), &mut ctx), None);
        ctx.refuse.insert(3, libc::EBUSY);
        assert_eq!(f.apply(&online(&[3], Some(7_600)), &mut ctx), None);
        assert_eq!(
            f.end(ctx.watched_time(20_000)),
            BTreeMap::from([(1, 5_900 - 2_500)])
        );
    }

    /// CPU 0 armed, CPU 1 refusing with `errno` when it comes online; `strict`: `--strict-hotplug`.
    fn refusing_cpu1(errno: i32, strict: bool) -> (Cpus, Follow) {
        let mut ctx = Cpus::new(&[0]);
        ctx.refuse.insert(1, errno);
        (ctx, Follow::new(strict))
    }

    /// A CPU that cannot be armed is marked once, retried on every look, and unwatched from its first
    /// sighting until it is armed.
    #[test]
    fn an_arm_failure_is_marked_once_and_retried_until_armed() {
        let (mut ctx, mut f) = refusing_cpu1(libc::EBUSY, false);
        ctx.log.now = 1_000;
        assert_eq!(f.apply(&online(&[1], Some(100)), &mut ctx), None);
        assert_eq!(ctx.log.calls(), ["open 1", "emit CpuArmFailed"]);
        let failed = StreamEvent::CpuArmFailed {
            cpu: 1,
            reason: format!("cpu 1 refused (errno {})", libc::EBUSY),
            kind: "busy",
        };
        assert_eq!(ctx.log.events, [(failed, 2_000)]);
        // The reconcile retries: no second mark.
        ctx.log.calls.clear();
        assert_eq!(f.apply(&online(&[1], None), &mut ctx), None);
        assert_eq!(ctx.log.calls(), ["open 1"]);
        // The debug registers came free.
        ctx.refuse.clear();
        ctx.log.calls.clear();
        ctx.log.now = 5_000;
        assert_eq!(f.apply(&online(&[1], None), &mut ctx), None);
        assert_eq!(ctx.log.calls(), ["open 1", "emit CpuOnline"]);
        assert_eq!(f.end(7_000), BTreeMap::from([(1, 6_000 - 100)]));
        assert!(f.take_fatal().is_none());
    }

    /// A CPU gone again before it was armed (ENODEV) is neither marked nor unwatched: the next uevent
    /// or reconcile tells what it is.
    #[test]
    fn a_cpu_gone_again_before_it_was_armed_is_left_to_the_next_look() {
        let (mut ctx, mut f) = refusing_cpu1(libc::ENODEV, true);
        assert_eq!(f.apply(&online(&[1], Some(0)), &mut ctx), None);
        assert_eq!(ctx.log.calls(), ["open 1"]);
        assert!(f.end(1_000_000).is_empty());
        assert!(
            f.take_fatal().is_none(),
            "not a failure, also not with --strict-hotplug"
        );
    }

    /// `--strict-hotplug`: the first CPU that cannot be armed is marked, and the run ends there with the
    /// failure kept for after the summary; the CPUs after it are not tried.
    #[test]
    fn strict_hotplug_ends_the_run_after_the_first_failures_mark() {
        let (mut ctx, mut f) = refusing_cpu1(libc::ENOSPC, true);
        let stop = f.apply(&online(&[1, 2], Some(0)), &mut ctx);
        assert_eq!(stop, Some(StopReason::StrictHotplug(1)));
        assert_eq!(ctx.log.calls(), ["open 1", "emit CpuArmFailed"]);
        let fatal = f.take_fatal().map(|e| e.to_string()).unwrap_or_default();
        assert!(fatal.contains("--strict-hotplug: cpu 1 refused"), "{fatal}");
        assert_eq!(f.end(4_000), BTreeMap::from([(1, 4_000)]));
    }

    /// A closed output ends the run at the first mark it cannot print.
    #[test]
    fn a_closed_output_ends_the_run_at_the_mark() {
        let mut ctx = Cpus::new(&[0, 1]);
        ctx.log.closed = true;
        let mut f = Follow::new(false);
        let stop = f.apply(&offline(&[0, 1]), &mut ctx);
        assert_eq!(stop, Some(StopReason::BrokenPipe));
        assert_eq!(ctx.log.calls(), ["close 0", "release", "emit CpuOffline"]);
    }
    /// The reconcile reads sysfs's online list: a CPU gone from it is closed, one back is armed, one
    /// outside `--cpus` is not; without the list nothing changes (no uevent said anything).
    #[test]
    fn a_reconcile_follows_the_online_list() {
        let path = std::env::temp_dir().join(format!("ksymwatch-online-{}", std::process::id()));
        let mut h = Hotplug::reading(&path, Some(set(&[0, 1])));
        assert!(!h.reconcile_due(), "not before its interval");
        std::fs::write(&path, "0\n").unwrap();
        assert_eq!(h.reconcile(&set(&[0, 1])), offline(&[1]));
        std::fs::write(&path, "0-3\n").unwrap();
        assert_eq!(
            h.reconcile(&set(&[0])),
            online(&[1], None),
            "2 and 3 are not followed"
        );
        std::fs::remove_file(&path).unwrap();
        assert_eq!(h.reconcile(&set(&[0])), Changes::default());
        // Nothing to read from: no socket.
        assert_eq!(h.on_readable(&set(&[0])), Changes::default());
    }
}
