//! Arming on a fake kernel that refuses what each test tells it to: all or nothing across CPUs,
//! watches and threads, enabling again after each pause, threads that keep coming, `--on` kept to
//! the free slots, and dry runs.

use super::*;
use crate::perf::event::REPEAT_PAUSES;
use crate::perf::privilege::Privilege;
use crate::perf::refusal::Kind;
use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::rc::Rc;

use crate::model::watch::Access;

/// What the fake kernel did, shared with its rings (a ring that is dropped is closed).
#[derive(Default)]
struct Log {
    open: usize,
    enabled: usize,
    disabled: usize,
    /// The pauses taken, in order.
    paused: Vec<Duration>,
}

/// A ring of the fake kernel: its CPU, watch and threads; dropping it closes it.
struct FakeRing {
    cpu: u32,
    watch: usize,
    tids: Vec<u32>,
    log: Rc<RefCell<Log>>,
}

impl Drop for FakeRing {
    fn drop(&mut self) {
        self.log.borrow_mut().open -= 1;
    }
}

/// A kernel that refuses what a test tells it to: an open on `fail_cpu` (with `errno`), an enable on
/// `fail_enable`, a thread in `gone` (ESRCH); `readings` are the successive thread lists (each tid
/// `owner`'s, if set; all of any pid's otherwise); `replaced` the pids that stop naming their planned
/// process after so many checks; `free` the slots every CPU has free (or the errno of the first probe),
/// `free_registers` what it counts after a refusal (and `open_at_facts` how many rings were open then).
struct Fake {
    log: Rc<RefCell<Log>>,
    fail_cpu: Option<(u32, i32)>,
    fail_enable: Option<u32>,
    /// Enables that succeed before `fail_enable` is refused (a repeat's refusal).
    enables_before_failing: usize,
    gone: Vec<u32>,
    full: Vec<u32>,
    readings: Vec<Vec<u32>>,
    owner: Option<fn(u32) -> u32>,
    replaced: Vec<(u32, usize)>,
    /// How many times each pid was checked ([`Kernel::names_planned`]).
    checks: HashMap<u32, usize>,
    free: Result<usize, i32>,
    free_registers: Option<u32>,
    open_at_facts: Option<usize>,
    creds: Privilege,
    /// The address a refused open names (the real one names its ring's breakpoint).
    bp: Option<(u64, u8)>,
}

impl Fake {
    fn new() -> Fake {
        Fake {
            log: Rc::default(),
            fail_cpu: None,
            fail_enable: None,
            enables_before_failing: 0,
            gone: Vec::new(),
            full: Vec::new(),
            readings: Vec::new(),
            owner: None,
            replaced: Vec::new(),
            checks: HashMap::new(),
            free: Ok(4),
            free_registers: None,
            open_at_facts: None,
            creds: Privilege::current(),
            bp: None,
        }
    }

    /// A kernel whose thread list of process 10 gains a thread at every reading, the last one too.
    fn never_settling() -> Fake {
        Fake {
            readings: (0..=MAX_THREAD_READINGS as u32)
                .map(|n| (10..=10 + n).collect())
                .collect(),
            ..Fake::new()
        }
    }

    fn open_now(&self) -> usize {
        self.log.borrow().open
    }
}

fn refused(cpu: u32, bind: Bind, stage: Stage, errno: i32) -> OpenError {
    OpenError {
        cpu,
        tid: match bind {
            Bind::Cpu => None,
            Bind::Task(t) => Some(t),
        },
        stage,
        err: io::Error::from_raw_os_error(errno),
        bp: None,
    }
}

impl Kernel for Fake {
    type Ring = FakeRing;

    fn open_ring(&mut self, spec: &RingSpec, bind: Bind) -> Result<FakeRing, OpenError> {
        match (self.fail_cpu, bind) {
            (Some((cpu, errno)), _) if cpu == spec.cpu => {
                return Err(OpenError {
                    bp: self.bp,
                    ..refused(cpu, bind, Stage::Open, errno)
                })
            }
            (_, Bind::Task(t)) if self.gone.contains(&t) => {
                return Err(refused(spec.cpu, bind, Stage::Open, libc::ESRCH))
            }
            (_, Bind::Task(t)) if self.full.contains(&t) => {
                return Err(refused(spec.cpu, bind, Stage::Open, libc::ENOSPC))
            }
            _ => {}
        }
        self.log.borrow_mut().open += 1;
        Ok(FakeRing {
            cpu: spec.cpu,
            watch: spec.watch,
            tids: match bind {
                Bind::Cpu => Vec::new(),
                Bind::Task(t) => vec![t],
            },
            log: self.log.clone(),
        })
    }

    fn add_thread(
        &mut self,
        ring: &mut FakeRing,
        spec: &RingSpec,
        tid: u32,
    ) -> Result<(), OpenError> {
        if self.gone.contains(&tid) {
            return Err(refused(spec.cpu, Bind::Task(tid), Stage::Open, libc::ESRCH));
        }
        if self.full.contains(&tid) {
            return Err(refused(
                spec.cpu,
                Bind::Task(tid),
                Stage::Open,
                libc::ENOSPC,
            ));
        }
        ring.tids.push(tid);
        Ok(())
    }

    fn enable_ring(&mut self, ring: &FakeRing) -> Result<(), OpenError> {
        let refusing = self.log.borrow().enabled >= self.enables_before_failing;
        if refusing && self.fail_enable == Some(ring.cpu) {
            return Err(refused(ring.cpu, Bind::Cpu, Stage::Enable, libc::EBUSY));
        }
        self.log.borrow_mut().enabled += 1;
        Ok(())
    }

    fn disable_ring(&mut self, _: &FakeRing) {
        self.log.borrow_mut().disabled += 1;
    }

    fn pause(&mut self, how_long: Duration) {
        self.log.borrow_mut().paused.push(how_long);
    }

    fn threads(&mut self, pids: &[u32]) -> Vec<u32> {
        let mut now = match self.readings.len() {
            0 => Vec::new(),
            1 => self.readings[0].clone(),
            _ => self.readings.remove(0),
        };
        if let Some(owner) = self.owner {
            now.retain(|&t| pids.contains(&owner(t)));
        }
        now
    }

    fn names_planned(&mut self, pid: u32) -> bool {
        let checks = self.checks.entry(pid).or_default();
        *checks += 1;
        !self
            .replaced
            .iter()
            .any(|&(p, after)| p == pid && *checks > after)
    }

    fn free_slots(
        &mut self,
        _: &Watch,
        cpus: &BTreeSet<u32>,
        most: usize,
    ) -> Result<usize, OpenError> {
        let first = cpus.first().copied().unwrap_or(0);
        self.free
            .map(|free| free.min(most))
            .map_err(|errno| refused(first, Bind::Cpu, Stage::Open, errno))
    }

    fn facts(&mut self, _: &OpenError) -> Facts {
        self.open_at_facts = Some(self.open_now());
        Facts {
            creds: self.creds,
            free_registers: self.free_registers,
        }
    }
}

fn watches(n: usize) -> Vec<Watch> {
    (0..n)
        .map(|i| Watch {
            label: format!("w{i}"),
            addr: 0x1000 + 8 * i as u64,
            len: 8,
            access: Access::Write,
            module: None,
            per_cpu: None,
        })
        .collect()
}

fn set(n: usize, cpus: &[u32], targets: Targets) -> Prepared {
    let cpus: BTreeSet<u32> = cpus.iter().copied().collect();
    Prepared::new(&watches(n), &cpus, targets, &EventConfig::bare(1))
}

#[test]
fn every_cpu_and_watch_is_opened_then_enabled() {
    let mut k = Fake::new();
    let armed = arm_set(&set(2, &[0, 1, 2], Targets::Cpus), &mut k).expect("armed");
    let placed: Vec<(u32, usize)> = armed.events.iter().map(|r| (r.cpu, r.watch)).collect();
    assert_eq!(placed, [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]);
    assert!(armed.went_offline.is_empty());
    assert_eq!((k.open_now(), k.log.borrow().enabled), (6, 6));
}

#[test]
fn a_refused_cpu_closes_every_ring_opened_before_it() {
    let mut k = Fake {
        fail_cpu: Some((1, libc::EBUSY)),
        ..Fake::new()
    };
    let err = arm_set(&set(2, &[0, 1, 2], Targets::Cpus), &mut k).err();
    let Some(Failure::Open(e)) = err else {
        panic!("a refusal: {err:?}")
    };
    assert_eq!((e.cpu, e.stage), (1, Stage::Open));
    assert_eq!(k.open_now(), 0, "cpu 0's rings closed");
    assert_eq!(k.log.borrow().enabled, 0, "nothing was enabled");
    let text = Failure::Open(e)
        .explain(&watches(2), |e| k.facts(e))
        .to_string();
    assert!(text.contains("cpu 1: breakpoint PMU busy"), "{text}");
    assert!(text.contains("nothing was armed"), "{text}");
}

#[test]
fn a_cpu_gone_offline_is_left_out_unless_every_one_is() {
    let mut k = Fake {
        fail_cpu: Some((1, libc::ENODEV)),
        ..Fake::new()
    };
    let armed = arm_set(&set(1, &[0, 1], Targets::Cpus), &mut k).expect("armed");
    assert_eq!(armed.went_offline, [1]);
    assert_eq!(armed.events.len(), 1);
    drop(armed);
    let mut k = Fake {
        fail_cpu: Some((1, libc::ENODEV)),
        ..Fake::new()
    };
    let err = arm_set(&set(1, &[1], Targets::Cpus), &mut k).err();
    let Some(f @ Failure::AllOffline(_)) = err else {
        panic!("every CPU offline: {err:?}")
    };
    let refusal = f.explain(&watches(1), |e| k.facts(e));
    assert_eq!(refusal.kind, Kind::CpuOffline);
    assert!(
        refusal
            .to_string()
            .contains("no CPU could be armed: every requested CPU (1) went offline"),
        "{refusal}"
    );
}

#[test]
fn an_enable_that_fails_disables_and_closes_everything() {
    let mut k = Fake {
        fail_enable: Some(1),
        ..Fake::new()
    };
    let err = arm_set(&set(2, &[0, 1], Targets::Cpus), &mut k).err();
    assert!(
        matches!(&err, Some(Failure::Open(e)) if e.stage == Stage::Enable && e.cpu == 1),
        "{err:?}"
    );
    assert_eq!(k.log.borrow().enabled, 2, "cpu 0's two rings were enabled");
    assert_eq!(k.log.borrow().disabled, 4, "then every ring disabled");
    assert_eq!(k.open_now(), 0, "and closed");
}

#[test]
fn a_launched_command_is_one_inherited_event_per_cpu_and_watch() {
    let mut k = Fake::new();
    let armed = arm_set(&set(2, &[0, 1], Targets::Task(42)), &mut k).expect("armed");
    assert_eq!(armed.events.len(), 4);
    assert!(armed.events.iter().all(|r| r.tids == [42]));
    // Stopped at its exec, it creates no thread while being enabled: one enable each.
    assert_eq!(k.log.borrow().enabled, 4);
    assert!(k.log.borrow().paused.is_empty());
}

/// A process watch's rings are enabled once, then again after each pause: a thread created as an
/// enable passed its creator's copy can keep a copy that is off. CPU-wide rings are enabled once.
#[test]
fn a_process_watch_is_enabled_again_after_each_pause() {
    let mut k = Fake {
        readings: vec![vec![10, 11]],
        ..Fake::new()
    };
    let armed = arm_set(&set(1, &[0, 1], Targets::Threads(vec![10])), &mut k).expect("armed");
    assert_eq!(armed.events.len(), 2);
    let log = k.log.borrow();
    // The thread list's settling readings, then the enables' repeats.
    assert_eq!(log.paused, [REPEAT_PAUSES, REPEAT_PAUSES].concat());
    assert_eq!(log.enabled, 2 * (1 + REPEAT_PAUSES.len()));
    drop(log);
    let mut k = Fake::new();
    arm_set(&set(1, &[0, 1], Targets::Cpus), &mut k).expect("armed");
    assert_eq!(
        (k.log.borrow().enabled, k.log.borrow().paused.len()),
        (2, 0)
    );
}

/// A thread list that still grows at the last reading leaves the watch unsettled; one that stops
/// growing does not.
#[test]
fn a_thread_list_that_never_stops_growing_is_unsettled() {
    let mut k = Fake::never_settling();
    let armed = arm_set(&set(1, &[0], Targets::Threads(vec![10])), &mut k).expect("armed");
    assert!(armed.unsettled);
    assert_eq!(armed.events[0].tids.len(), MAX_THREAD_READINGS);
    assert!(UNSETTLED.contains(&format!(" {MAX_THREAD_READINGS} readings")));
    let mut k = Fake {
        readings: vec![vec![10], vec![10, 11]],
        ..Fake::new()
    };
    let armed = arm_set(&set(1, &[0], Targets::Threads(vec![10])), &mut k).expect("armed");
    assert!(!armed.unsettled);
    let armed = arm_set(&set(1, &[0], Targets::Cpus), &mut Fake::new()).expect("armed");
    assert!(!armed.unsettled);
}

/// A repeat that is refused rolls the whole transaction back as a first enable's refusal does.
#[test]
fn a_refused_repeat_disables_and_closes_everything() {
    let mut k = Fake {
        readings: vec![vec![10]],
        fail_enable: Some(1),
        // The first pass (two rings) succeeds.
        enables_before_failing: 2,
        ..Fake::new()
    };
    let err = arm_set(&set(1, &[0, 1], Targets::Threads(vec![10])), &mut k).err();
    assert!(
        matches!(&err, Some(Failure::Open(e)) if e.stage == Stage::Enable && e.cpu == 1),
        "{err:?}"
    );
    assert_eq!(k.log.borrow().paused.len(), REPEAT_PAUSES.len() + 1);
    assert_eq!(k.log.borrow().disabled, 2, "every ring disabled");
    assert_eq!(k.open_now(), 0, "and closed");
}

/// The thread list is read until a reading brings no new thread; every thread joins the one ring of
/// each CPU and watch, and a thread that exits while being armed is skipped.
#[test]
fn threads_join_one_ring_per_cpu_and_watch_until_none_is_new() {
    let mut k = Fake {
        readings: vec![vec![10, 11], vec![10, 11, 12, 13]],
        gone: vec![11],
        ..Fake::new()
    };
    let armed = arm_set(&set(2, &[0, 1], Targets::Threads(vec![10])), &mut k).expect("armed");
    let rings: Vec<(u32, usize, Vec<u32>)> = armed
        .events
        .iter()
        .map(|r| (r.cpu, r.watch, r.tids.clone()))
        .collect();
    let tids = vec![10, 12, 13];
    assert_eq!(
        rings,
        [
            (0, 0, tids.clone()),
            (0, 1, tids.clone()),
            (1, 0, tids.clone()),
            (1, 1, tids)
        ]
    );
    assert!(armed.went_offline.is_empty());
}

/// A reading that finds no new thread is read again after each pause: a thread still being created
/// at it (listed only once created, with the copies its creator had then) is armed when it shows.
#[test]
fn a_thread_that_shows_after_a_quiet_reading_is_armed() {
    let mut k = Fake {
        readings: vec![
            vec![10],
            vec![10],
            vec![10, 11],
            vec![10, 11],
            vec![10, 11],
            vec![10, 11, 12],
        ],
        ..Fake::new()
    };
    let armed = arm_set(&set(1, &[0, 1], Targets::Threads(vec![10])), &mut k).expect("armed");
    assert!(!armed.unsettled);
    assert!(armed.events.iter().all(|r| r.tids == [10, 11, 12]));
    let settling = &k.log.borrow().paused[..5];
    let [p1, p5] = REPEAT_PAUSES;
    assert_eq!(settling, [p1, p1, p5, p1, p5]);
}

/// A thread first seen after the first reading with no debug register left holds copies of the
/// armed threads' events: it is armed as it is. One of the first reading's is refused (its registers
/// are someone else's).
#[test]
fn a_thread_made_while_arming_with_no_register_left_is_covered_by_its_copies() {
    let mut k = Fake {
        readings: vec![vec![10], vec![10, 12, 13]],
        full: vec![12],
        ..Fake::new()
    };
    let armed = arm_set(&set(1, &[0, 1], Targets::Threads(vec![10])), &mut k).expect("armed");
    assert!(armed.events.iter().all(|r| r.tids == [10, 13]));
    let mut k = Fake {
        readings: vec![vec![10, 12]],
        full: vec![12],
        ..Fake::new()
    };
    let err = arm_set(&set(1, &[0, 1], Targets::Threads(vec![10])), &mut k).err();
    let Some(Failure::Open(e)) = err else {
        panic!("refused: {err:?}")
    };
    assert_eq!(
        (e.tid, e.err.raw_os_error()),
        (Some(12), Some(libc::ENOSPC))
    );
    assert_eq!(k.open_now(), 0, "rolled back");
}

/// Processes that have all exited before arming arm nothing, and that is no failure (the run ends as it
/// begins): found at the first reading, with no pause for a thread list that cannot grow any more, and
/// nothing left open.
#[test]
fn processes_that_all_exited_arm_nothing_and_fail_nothing() {
    let mut k = Fake::new();
    let armed = arm_set(&set(1, &[0], Targets::Threads(vec![10])), &mut k).expect("no failure");
    assert!(armed.events.is_empty() && !armed.unsettled);
    assert!(k.log.borrow().paused.is_empty());
    assert_eq!(k.open_now(), 0);
    // Every thread gone as its event is opened: the same.
    let mut k = Fake {
        readings: vec![vec![10, 11]],
        gone: vec![10, 11],
        ..Fake::new()
    };
    let armed = arm_set(&set(1, &[0, 1], Targets::Threads(vec![10])), &mut k).expect("no failure");
    assert!(armed.events.is_empty());
    assert_eq!(k.open_now(), 0);
}

/// A reading that lists no thread at all (every process gone after its threads were armed, or before a
/// CPU that came online was) settles the list at once: no pause. One that lists threads, none of them
/// new, still waits for threads being created.
#[test]
fn an_empty_thread_list_settles_without_a_pause() {
    let mut k = Fake {
        readings: vec![vec![10, 11], vec![]],
        ..Fake::new()
    };
    let threads = set(1, &[0, 1], Targets::Threads(vec![10]));
    let armed = arm_set(&threads, &mut k).expect("armed");
    assert!(!armed.unsettled);
    assert!(armed.events.iter().all(|r| r.tids == [10, 11]));
    // The enables' repeats only.
    assert_eq!(k.log.borrow().paused, REPEAT_PAUSES);
    let mut k = Fake::new();
    let (rings, settled) = open_cpu(&threads, 1, &mut k).expect("opened");
    assert!(rings.is_empty() && settled);
    assert!(k.log.borrow().paused.is_empty());
    let mut k = Fake {
        readings: vec![vec![10]],
        ..Fake::new()
    };
    open_cpu(&threads, 1, &mut k).expect("opened");
    assert_eq!(k.log.borrow().paused, REPEAT_PAUSES);
}

/// Processes 10 and 20, each with a second thread (a tid is its process's up to the next ten).
fn two_processes(replaced: Vec<(u32, usize)>) -> Fake {
    Fake {
        readings: vec![vec![10, 11, 20, 21]],
        owner: Some(|tid| tid / 10 * 10),
        replaced,
        ..Fake::new()
    }
}

/// `-p 10 -p 20` where 10 exited before arming and a new process took its pid: the newcomer's threads
/// are not armed (the hit program would count their stores), only 20's, and 10 is checked no more. If
/// every pid is another process's, nothing is armed, as when every process exited, with no pause.
#[test]
fn a_pid_reused_before_arming_has_none_of_its_threads_armed() {
    let threads = set(1, &[0, 1], Targets::Threads(vec![10, 20]));
    let mut k = two_processes(vec![(10, 0)]);
    let armed = arm_set(&threads, &mut k).expect("armed");
    assert!(armed.events.iter().all(|r| r.tids == [20, 21]));
    assert_eq!(k.checks[&10], 1);
    let mut k = two_processes(vec![(10, 0), (20, 0)]);
    let armed = arm_set(&threads, &mut k).expect("no failure");
    assert!(armed.events.is_empty());
    assert_eq!(k.open_now(), 0);
    assert!(k.log.borrow().paused.is_empty());
}

/// A pid checked before its thread list is read and found another's after: the list read may be the
/// newcomer's, and none of it is armed.
#[test]
fn a_pid_reused_while_its_threads_are_read_has_that_reading_dropped() {
    let mut k = two_processes(vec![(10, 1)]);
    let armed = arm_set(&set(1, &[0, 1], Targets::Threads(vec![10, 20])), &mut k).expect("armed");
    assert!(armed.events.iter().all(|r| r.tids == [20, 21]));
    assert_eq!(k.checks[&10], 2);
}

/// A CPU that comes online during the run is armed on a pid's threads only while the pid names its
/// planned process (`open_cpu_in`, given the plan's start times): `-p 10 -p 20` where 10 exited and a
/// new process took its pid has only 20's threads armed there; with both pids another's, none, and no
/// pause.
#[test]
fn a_cpu_that_comes_online_arms_none_of_a_reused_pids_threads() {
    let threads = set(1, &[1], Targets::Threads(vec![10, 20]));
    let mut k = two_processes(vec![(10, 0)]);
    let (rings, _) = open_cpu(&threads, 1, &mut k).expect("opened");
    assert_eq!(rings.len(), 1);
    assert_eq!((rings[0].cpu, &rings[0].tids[..]), (1, &[20, 21][..]));
    let mut k = two_processes(vec![(10, 0), (20, 0)]);
    let (rings, settled) = open_cpu(&threads, 1, &mut k).expect("opened");
    assert!(rings.is_empty() && settled);
    assert!(k.log.borrow().paused.is_empty());
}

/// A pid names its planned process while its start time is the one planned; another start time, or no
/// process at all, is another process or none. A start that cannot be read otherwise, or a pid with no
/// start planned, says nothing against it.
#[test]
fn a_pid_names_the_planned_process_while_its_start_time_is_the_same() {
    let starts = [(10, 500)];
    let planned = |start_time| Planned {
        starts: &starts,
        start_time,
    };
    assert!(planned(|_| Ok(500)).names(10));
    assert!(!planned(|_| Ok(900)).names(10));
    assert!(!planned(|_| Err(io::Error::from_raw_os_error(libc::ENOENT))).names(10));
    assert!(!planned(|_| Err(io::Error::from_raw_os_error(libc::ESRCH))).names(10));
    assert!(planned(|_| Err(io::Error::from_raw_os_error(libc::EACCES))).names(10));
    assert!(planned(|_| Ok(900)).names(20));
    assert!(Planned::NONE.names(10));
}

fn cpus(cpus: &[u32]) -> BTreeSet<u32> {
    cpus.iter().copied().collect()
}

/// `--on` keeps its watches to the slots free on every CPU, and arms those alone.
#[test]
fn on_keeps_its_watches_to_the_free_slots() {
    let mut k = Fake {
        free: Ok(2),
        ..Fake::new()
    };
    let mut ws = watches(3);
    let cfg = EventConfig::bare(1);
    let armed = arm_with(
        &mut k,
        &mut ws,
        &cpus(&[0, 1]),
        Targets::Cpus,
        &cfg,
        Fit::FreeRegisters,
    )
    .expect("armed");
    assert_eq!(ws.len(), 2);
    let placed: Vec<(u32, usize)> = armed.events.iter().map(|r| (r.cpu, r.watch)).collect();
    assert_eq!(placed, [(0, 0), (0, 1), (1, 0), (1, 1)]);
    // Without `--on` every watch is armed, however few slots are free.
    let mut ws = watches(3);
    let armed =
        arm_with(&mut k, &mut ws, &cpus(&[0]), Targets::Cpus, &cfg, Fit::All).expect("armed");
    assert_eq!((ws.len(), armed.events.len()), (3, 3));
}

/// `--on` with no slot free is refused, and a probe the kernel refuses outright is refused as arming
/// its first watch would be; nothing is opened either way.
#[test]
fn on_without_a_free_slot_or_with_a_refused_probe_arms_nothing() {
    let cfg = EventConfig::bare(1);
    let mut k = Fake {
        free: Ok(0),
        ..Fake::new()
    };
    // Two watches with --on's fit on CPU 0: refused, nothing left open.
    let refused = |k: &mut Fake| {
        arm_with(
            k,
            &mut watches(2),
            &cpus(&[0]),
            Targets::Cpus,
            &cfg,
            Fit::FreeRegisters,
        )
        .err()
        .expect("refused")
    };
    let r = refused(&mut k);
    assert_eq!(r.kind, Kind::NoFreeDebugRegister);
    assert!(
        r.to_string()
            .contains("--on needs a free debug register on every CPU"),
        "{r}"
    );
    let mut k = Fake {
        free: Err(libc::EINVAL),
        ..Fake::new()
    };
    let r = refused(&mut k);
    assert_eq!(r.kind, Kind::InvalidBreakpoint);
    let text = r.to_string();
    assert!(text.contains("at 0x1000/8 (EINVAL)"), "{text}");
    assert!(text.contains("nothing was armed"), "{text}");
    assert_eq!(k.open_now(), 0);
}

/// The refusal of arming every one of `watches` CPU-wide on `on` (bare events).
fn refused_on_cpus(k: &mut Fake, mut watches: Vec<Watch>, on: &[u32]) -> Refusal {
    let cfg = EventConfig::bare(1);
    arm_with(k, &mut watches, &cpus(on), Targets::Cpus, &cfg, Fit::All)
        .err()
        .expect("refused")
}

/// A refusal for want of a debug register is worded with the registers free once everything opened
/// was closed again.
#[test]
fn a_full_cpu_is_counted_after_the_rollback() {
    let mut k = Fake {
        fail_cpu: Some((1, libc::ENOSPC)),
        free_registers: Some(1),
        ..Fake::new()
    };
    let r = refused_on_cpus(&mut k, watches(2), &[0, 1]);
    assert_eq!(
        k.open_at_facts,
        Some(0),
        "counted after cpu 0's rings were closed"
    );
    assert_eq!(r.kind, Kind::NoFreeDebugRegister);
    let text = r.to_string();
    assert!(
        text.contains("cpu 1 has 1 free debug register, 2 needed"),
        "{text}"
    );
    assert!(text.contains("nothing was armed"), "{text}");
}

/// A CPU that comes online is opened alone, disabled, with the same rings.
#[test]
fn one_cpu_is_opened_alone_and_left_disabled() {
    let mut k = Fake::new();
    let (rings, settled) = open_cpu(&set(2, &[0, 1], Targets::Cpus), 1, &mut k).expect("opened");
    assert_eq!(
        rings.iter().map(|r| (r.cpu, r.watch)).collect::<Vec<_>>(),
        [(1, 0), (1, 1)]
    );
    assert!(settled, "a CPU-wide set has no thread list");
    assert_eq!(k.log.borrow().enabled, 0);
}

/// A process watch's CPU that comes online says whether its thread list settled, as the arming does.
#[test]
fn one_cpu_of_a_process_watch_says_whether_its_threads_settled() {
    let mut k = Fake::never_settling();
    let (_, settled) =
        open_cpu(&set(1, &[1], Targets::Threads(vec![10])), 1, &mut k).expect("opened");
    assert!(!settled);
    let mut k = Fake {
        readings: vec![vec![10, 11]],
        ..Fake::new()
    };
    let (rings, settled) =
        open_cpu(&set(1, &[1], Targets::Threads(vec![10])), 1, &mut k).expect("opened");
    assert!(settled);
    assert_eq!(rings[0].tids, [10, 11]);
}

#[test]
fn the_scope_decides_the_targets_off_the_hit_path() {
    let samples = Binding::Scope {
        remove_on_exec: false,
    };
    assert_eq!(targets(&Scope::System, samples), Targets::Cpus);
    assert_eq!(targets(&Scope::Launched(7), samples), Targets::Task(7));
    assert_eq!(
        targets(&Scope::Processes(vec![7, 8]), samples),
        Targets::Threads(vec![7, 8])
    );
}

/// A live process counts its threads (this one has the test's and the one spawned here at least; other
/// tests' threads come and go, so no exact number), and a process that is gone counts nothing.
#[test]
fn thread_count_is_the_kernels_and_a_gone_process_counts_zero() {
    let me = std::process::id();
    let stop = std::sync::Arc::new(std::sync::Barrier::new(2));
    let other = std::thread::spawn({
        let stop = stop.clone();
        move || {
            stop.wait();
        }
    });
    assert!(thread_count(&[me]) >= 2);
    stop.wait();
    other.join().expect("thread");
    assert_eq!(thread_count(&[u32::MAX - 1]), 0);
}

fn kernel_watch(addr: u64, len: u8) -> Watch {
    Watch {
        label: "__start_init_stack+0x3e01".into(),
        addr,
        len,
        access: Access::Write,
        module: None,
        per_cpu: None,
    }
}

/// A kernel that refuses every open of `w` on CPU 0 with `errno`, as root.
fn refusing(errno: i32, w: &Watch) -> Fake {
    Fake {
        fail_cpu: Some((0, errno)),
        creds: Privilege::ROOT,
        bp: Some((w.addr, w.len)),
        ..Fake::new()
    }
}

/// A dry run's refusal of a 1-byte kernel watch is the run's: the same events opened (disabled,
/// closed, never enabled), worded, coded and kinded as arming's, naming the watch's own address.
#[test]
fn a_refused_dry_run_reads_as_the_runs_refusal() {
    let w = kernel_watch(0xffff_ffff_82e0_3e01, 1);
    assert_eq!(AddressKind::of(w.addr, w.len), AddressKind::Kernel);
    let cfg = EventConfig::bare(1);
    let mut k = refusing(libc::EPERM, &w);
    let dry = dry_run_with(
        &mut k,
        std::slice::from_ref(&w),
        &cpus(&[0, 1]),
        Targets::Cpus,
        &cfg,
    )
    .expect("a refusal");
    assert_eq!((k.open_now(), k.log.borrow().enabled), (0, 0));
    let real = refused_on_cpus(&mut refusing(libc::EPERM, &w), vec![w], &[0, 1]);
    assert_eq!(dry, real);
    assert_eq!(dry.code, crate::error::ExitCode::NotPermitted);
    assert_eq!(dry.kind.as_str(), "kernel_breakpoints_refused");
    assert!(dry.what.contains("0xffffffff82e03e01 got"), "{}", dry.what);
}

/// Only what the run would be told whenever it ran ends a dry run: the debug registers in use now, a
/// CPU going offline, a busy PMU or the descriptors do not; user addresses are not asked at all.
#[test]
fn only_a_lasting_refusal_ends_a_dry_run() {
    let w = [kernel_watch(0xffff_ffff_82e0_3e00, 8)];
    let cfg = EventConfig::bare(1);
    let dry = |errno| {
        let mut k = refusing(errno, &w[0]);
        dry_run_with(&mut k, &w, &cpus(&[0]), Targets::Cpus, &cfg)
    };
    for errno in [libc::EPERM, libc::EACCES, libc::EINVAL, libc::ENOENT] {
        assert!(dry(errno).is_some(), "{errno}");
    }
    for errno in [libc::ENOSPC, libc::ENODEV, libc::EBUSY, libc::EMFILE] {
        assert!(dry(errno).is_none(), "{errno}");
    }
    let mut k = refusing(libc::EPERM, &w[0]);
    assert!(dry_run_with(&mut k, &watches(2), &cpus(&[0]), Targets::Cpus, &cfg).is_none());
}

/// A per-thread dry run is refused as the per-thread arming is: by the thread it opened for.
#[test]
fn a_per_thread_dry_run_is_refused_by_its_thread() {
    let w = [kernel_watch(0xffff_ffff_82e0_3e00, 8)];
    let cfg = EventConfig::bare(1);
    let me = std::process::id();
    let mut k = Fake {
        readings: vec![vec![me]],
        ..refusing(libc::EPERM, &w[0])
    };
    let dry =
        dry_run_with(&mut k, &w, &cpus(&[0]), Targets::Threads(vec![me]), &cfg).expect("a refusal");
    assert!(dry.what.starts_with(&format!("tid {me} (")), "{}", dry.what);
}

/// A CPU armed unsettled is named in the end-of-run warning, which says what went unwatched where.
#[test]
fn the_unsettled_cpu_warning_names_its_cpu() {
    let w = unsettled_on(3);
    assert!(w.starts_with("cpu3 came online"), "{w}");
    assert!(w.contains("not yet armed on cpu3"), "{w}");
    assert!(w.contains("100 readings"), "{w}");
}
