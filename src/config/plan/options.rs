//! The plan's first stage: the request's options checked against each other, and the choices they make:
//! who the watch covers, how hits reach the tracer, which writers it sees, whether values are read. Who
//! the watch covers and how its hits come are decided first, once (`decide`, before the rest is checked:
//! the command line starts the work that overlaps the planning from them), and `-p`'s processes are read
//! and whether BPF loads is asked there, at most once per plan. `check` then reads the request whole,
//! and through the host, in this order: the privileges, the `-p` processes (said and refused as
//! `decide` found them), the cgroups, and the CPUs, raising the refusals of what BPF and the decided
//! delivery cannot do in their turn. No symbol or type is read here (`--dump-on`'s
//! tracepoints are found with the kernel's types, in the kernel stage).

use std::cell::OnceCell;
use std::io;
use std::path::PathBuf;

use crate::config::flight::{DumpOn, Flight, Trigger};
use crate::config::objects;
use crate::config::request::{SymbolRequest, WatchRequest};
use crate::error::{Context, Error, Result};
use crate::model::condition::{self, Condition};
use crate::model::filter::{Filter, Watched};
use crate::model::target::{self, Target};
use crate::model::watch::Access;
use crate::model::Limits;
use crate::perf::privilege::Privilege;

use super::cpus::{self, Cpus};
use super::host::Host;
use super::outputs::{self, Outputs, Stream};
use super::{
    is_stdin, Binding, Command, Delivery, Hits, Running, Scope, Started, Values, Writers,
    MAX_WATCHES,
};

/// `--on` as requested: the source and the `$obj` target, with who may allocate.
pub(super) struct OnRequest {
    pub source: objects::Source,
    pub text: String,
    pub rotate: bool,
    /// `-p`: only objects these processes allocate (checked processes).
    pub pids: Vec<u32>,
    /// `--comm`: only objects tasks so named allocate.
    pub comms: Vec<String>,
    /// `--free`: the calls that end a user-space source's objects.
    pub frees: Vec<objects::UserProbe>,
}

/// A request's options, checked, with the choices they make.
pub(super) struct Options {
    pub access: Access,
    pub scope: Scope,
    /// When each `-p` process started: which process its pid names ([`Started`]).
    pub started: Vec<Started>,
    pub delivery: Delivery,
    pub writers: Writers,
    pub filter: Filter,
    /// A process watch's threads, when `--tid`/`--comm` must match one.
    pub watched: Option<Watched>,
    pub values: Values,
    pub flight: Option<Flight>,
    /// The targets, parsed (none with `--on`, whose `$obj` target is resolved per object).
    pub targets: Vec<Target>,
    pub on: Option<OnRequest>,
    pub cpus: Cpus,
    pub percpu_cpu: Option<u32>,
    pub symbols: SymbolRequest,
    pub outputs: Outputs,
    pub running: Running,
    /// `--control`'s source.
    pub control: Option<PathBuf>,
    /// `--if`'s text, for the messages that quote it.
    pub condition_text: Option<String>,
    /// `--dump-on`'s values, each with its text, for the conditions' width checks.
    pub dump_on: Vec<DumpOn>,
}

/// The plan's first phase: who the watch covers ([`Scope`], `-p`'s processes read once from the host)
/// and how its hits come ([`Delivery`]), decided once from the request and whether BPF loads, before the
/// rest of the request is checked. The command line starts the work that overlaps the planning from it
/// (its prefetch), then hands it to [`super::plan()`], which decides neither again.
pub struct Decided {
    scope: Scope,
    /// `-p`'s processes with their starts (the watched ones, or with a kernel `--on` source the
    /// allocating ones), or the refusal of the first that names none; and what was said of them on the
    /// way (a thread standing for its process). The plan says both in its turn.
    processes: Result<Vec<Started>>,
    process_notes: Vec<String>,
    delivery: Delivery,
    /// Whether BPF loads, as the host answered (asked once per plan): the values and `--cgroup` checks
    /// raise its refusal in their turn.
    bpf: io::Result<()>,
    /// The hit program would run on every thread's events (a per-thread watch reading values) where it
    /// cannot tell which event fired: refused in its turn, as the program's load would refuse it.
    no_firing_event: bool,
}

impl Decided {
    /// Who the watch covers: `-p`'s processes each once, a thread standing for its process (as given
    /// where one names no process, which the plan refuses in its turn).
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    pub fn delivery(&self) -> Delivery {
        self.delivery
    }
}

/// Who the watch covers and how its hits come, for [`super::plan()`] and for the work the command line
/// starts before it. A scope `-p` and `-- CMD` cannot make is the request's first refusal, as it always
/// was; `-p`'s processes are read from `host` here, once, their refusal and notes kept for the plan's
/// turn; whether BPF loads is asked of `host` here, the one time a plan asks it, and whether the hit
/// program can tell which event fired only of a per-thread watch where BPF loads.
pub fn decide(r: &WatchRequest, host: &dyn Host) -> Result<Decided> {
    let scope = scope(r)?;
    let mut process_notes = Vec::new();
    let processes = processes_of(host, &r.pids, &mut process_notes);
    let scope = match (scope, &processes) {
        (Scope::Processes(_), Ok(started)) => {
            Scope::Processes(started.iter().map(|s| s.pid).collect())
        }
        (scope, _) => scope,
    };
    let bpf = host.bpf();
    let firing = OnceCell::new();
    let firing_event = || *firing.get_or_init(|| host.firing_event());
    let delivery = delivery(r, &scope, || bpf.is_ok(), firing_event);
    // Reading values, the per-thread path takes the program without the delivery asking whether it can
    // tell which event fired: asked here (once), a kernel where it cannot is refused in `check`'s turn.
    let no_firing_event = delivery.hits == Hits::Program && r.per_event() && !firing_event();
    Ok(Decided {
        scope,
        processes,
        process_notes,
        delivery,
        bpf,
        no_firing_event,
    })
}

/// The request checked against itself first (nothing read), then against the machine: the privileges,
/// the `-p` processes, what BPF and the `decided` delivery cannot do, the cgroups, and the CPUs. What it
/// has to say on the way goes to `notes`.
pub(super) fn check(
    r: WatchRequest,
    decided: Decided,
    host: &mut dyn Host,
    notes: &mut Vec<String>,
) -> Result<Options> {
    let Decided {
        scope,
        processes,
        mut process_notes,
        delivery,
        bpf: bpf_answer,
        no_firing_event,
    } = decided;
    let bpf = || &bpf_answer;
    buffer_pages(r.buffer_pages)?;
    let realtime = realtime(&r.realtime)?;
    let (outputs, mut filter) = outputs::check(&r.output, notes)?;
    // With --on, --comm chooses the allocating tasks (`objects`), not the hits.
    let comms = match r.on {
        Some(_) => std::mem::take(&mut filter.comms),
        None => Vec::new(),
    };
    let condition = parse_condition(r.condition.as_deref())?;
    let flight = flight(&r, outputs.stream())?;
    let mut on = on(&r, &scope, comms)?;
    // A `$obj` target is resolved per object (`objects`), not as a target of its own.
    let targets = match on {
        Some(_) => Vec::new(),
        None => r
            .targets
            .iter()
            .map(|t| target::parse(t).bad_input())
            .collect::<Result<Vec<_>>>()?,
    };
    combinations(&r, &scope, &targets)?;
    // The request against the machine, each part read once, in order. Which path the hits take was
    // decided first, from whether BPF loads (every watch can use a program); the values and `--cgroup`
    // checks raise its refusal in their turn from the same answer. What the privileges have to say (a
    // note, or a system-wide watch refused) is said in its turn below, after the checks that come
    // before it.
    let privileges = privileges(&scope, host.privilege());
    // `-p` names the watched processes, or with `--on` the allocating ones: read once, by `decide`
    // (the scope holds them), said and refused here.
    notes.append(&mut process_notes);
    let started = processes?;
    let pids: Vec<u32> = started.iter().map(|s| s.pid).collect();
    // Running processes' threads, now, when `--tid`/`--comm` must match one (`Filter::unmatched`). Not
    // system-wide, where tasks come and go by the thousand and a `--comm` usually names one to come, nor
    // for a launched command, which has run nothing yet: its threads and their names are all to come.
    let watched = match (&scope, filter.names_tasks()) {
        (Scope::Processes(_), true) => Some(Watched {
            threads: host.named_threads(&pids),
            pids: pids.clone(),
        }),
        _ => None,
    };
    // A hit trigger is evaluated on the value the kernel read at the trap.
    let values = match condition {
        Some(c) => Values::If(c),
        None if r.reads_values() => Values::Read,
        None => Values::Unread,
    };
    // Before any symbol is loaded or anything armed: without BPF, --value cannot work at all.
    let tracepoints = flight
        .as_ref()
        .is_some_and(|f| f.tracepoints().next().is_some());
    if values.read() || tracepoints {
        if let Err(e) = bpf() {
            // Named for what asked for it: `--dump-on` alone is not `--value`.
            let trigger = r.dump_on.iter().find(|d| d.trigger != Trigger::Signal);
            return Err(match trigger {
                Some(d) if !r.value && r.condition.is_none() => {
                    super::no_bpf_for_dump_on(&d.text, e)
                }
                _ => super::no_bpf(e),
            });
        }
    }
    // As the program's load would refuse it, before anything is started or armed: a per-thread watch
    // reading values on a kernel whose program cannot tell which event fired.
    if no_firing_event {
        return Err(super::no_firing_event());
    }
    // `--cgroup`: each found in the cgroup v2 hierarchy, and the hits from the program that tests them
    // (the delivery's choice; BPF's answer says why not).
    filter.cgroups =
        super::cgroup::check(&r.output.cgroups, delivery.hits, bpf, |a| host.cgroup(a))?;
    // After BPF: a --value that cannot load its program is told so before the breakpoints' privilege.
    if let Some(note) = privileges.note {
        notes.push(note);
    }
    if let Some(refused) = privileges.refused {
        return Err(Error::not_permitted(refused));
    }
    let writers = privileges.writers;
    if let Some(on) = &mut on {
        on.pids = pids;
    }
    let cpus = cpus::select(r.cpus.as_deref(), &*host)?;
    Ok(Options {
        access: r.access,
        scope,
        started,
        delivery,
        writers,
        filter,
        watched,
        values,
        flight,
        targets,
        on,
        cpus,
        percpu_cpu: r.percpu_cpu,
        outputs,
        running: Running {
            limits: Limits {
                duration: r.duration,
                count: r.count,
            },
            realtime,
            strict_hotplug: r.strict_hotplug,
            buffer_pages: r.buffer_pages,
            lines: r.symbols.lines,
        },
        control: r.control,
        symbols: r.symbols,
        condition_text: r.condition,
        dump_on: r.dump_on,
    })
}

/// The options that cannot go together, given the watch's `scope` and its parsed `targets`.
fn combinations(r: &WatchRequest, scope: &Scope, targets: &[Target]) -> Result<()> {
    let system = scope.system_wide();
    if r.remove_on_exec && system {
        return Err(Error::usage(
            "--remove-on-exec is for a process watch (-p PID or -- CMD): a system-wide watch is not tied to a program",
        ));
    }
    if let (Some(cpu), false) = (r.percpu_cpu, system) {
        return Err(Error::usage(format!(
            "--percpu-cpu {cpu} chooses the copy of a kernel per-CPU variable a system-wide watch \
             watches, and -p/-- watch a process's own memory; drop --percpu-cpu or -p/--"
        )));
    }
    if r.control.is_some() && targets.len() > 1 {
        return Err(Error::usage(format!(
            "--control moves one watch, but {} targets were given; give one TARGET",
            targets.len()
        )));
    }
    if is_stdin(r.control.as_deref()) && matches!(scope, Scope::Launched(_)) {
        return Err(Error::usage(
            "--control - reads stdin, which `-- CMD` leaves to the command; give a FIFO path instead",
        ));
    }
    if targets.len() > MAX_WATCHES {
        return Err(Error::usage(format!(
            "{} targets given, but a CPU has only {MAX_WATCHES} debug registers; watch at most {MAX_WATCHES} at once",
            targets.len()
        )));
    }
    if r.per_thread && system {
        return Err(Error::usage(
            "--per-thread is for a process watch (-p PID or -- CMD): a system-wide watch has no threads to arm",
        ));
    }
    Ok(())
}

/// `--buffer-pages`: a power of two, at most 65536.
fn buffer_pages(pages: Option<usize>) -> Result<()> {
    match pages {
        Some(pages) if !pages.is_power_of_two() || pages > 1 << 16 => Err(Error::usage(format!(
            "--buffer-pages {pages} must be a power of two up to 65536 (e.g. 64, 128, 256)"
        ))),
        _ => Ok(()),
    }
}

/// Who the watch covers, from `-p` and `-- CMD` (with a kernel `--on` source, `-p` chooses the allocating
/// processes of a system-wide watch instead): decided once, by `decide`. `-p`'s pids are as given:
/// `decide` puts the processes they name in their place.
fn scope(r: &WatchRequest) -> Result<Scope> {
    // A user-space source's objects are in the watched process: -p is its scope, as without --on.
    match (r.watched_pids().is_empty(), &r.command) {
        (true, None) => Ok(Scope::System),
        (true, Some(argv)) if argv.is_empty() => Err(Error::usage(
            "`--` must be followed by a command to run (`-- CMD ARGS`); leave `--` out for a \
             system-wide watch",
        )),
        (true, Some(argv)) => Ok(Scope::Launched(Command {
            argv: argv.clone(),
            child: None,
            pid: 0,
        })),
        (false, Some(argv)) if !argv.is_empty() => Err(Error::usage(
            "-p watches a running process and `-- CMD` starts one: give one of them",
        )),
        (false, _) => Ok(Scope::Processes(r.watched_pids().to_vec())),
    }
}

/// What the privileges make of the watch, and what is to be said of them once the checks before them have
/// passed.
struct Privileges {
    writers: Writers,
    /// This user may not see the kernel: the watch sees user-space writers only (a note of the plan).
    note: Option<String>,
    /// A system-wide watch this process may not open (exit 4).
    refused: Option<String>,
}

/// Which writers the events see; what is to be said when this user may not see the kernel, or may not
/// watch the whole system.
fn privileges(scope: &Scope, privilege: Privilege) -> Privileges {
    // Without root or CAP_PERFMON, perf_event_paranoid 2 (the default) still lets a user watch their own
    // process, from user space only: its events exclude the kernel, and the kernel's symbols (hidden from
    // this user) are not needed.
    let system = scope.system_wide();
    let user_only = !system && !privilege.kernel_allowed();
    Privileges {
        writers: match user_only {
            true => Writers::UserSpaceOnly,
            false => Writers::All,
        },
        note: user_only.then(|| privilege.user_space_only_note()),
        refused: match system {
            true => privilege.system_wide().err(),
            false => None,
        },
    }
}

/// Which path the hits take and which events carry them: decided once, by `decide`, from the request, its
/// `scope`, whether BPF loads (`bpf`) and whether a hit program can tell which event fired
/// (`firing_event`, asked only of a per-thread watch reading no value where BPF loads), for the plan and
/// for the prefetch that starts before it (on the hit path it reads no task's name).
///
/// Where BPF loads, every watch's hits are kept and emitted by its hit program (the hit path), which
/// reads a process's value at the trap. Without `--per-thread` or `--remove-on-exec` (which the kernel
/// applies per event) that is one breakpoint per CPU whose program chooses the process in the kernel: a
/// dropped trap costs the writer little, and the cost depends on CPUs and targets, never on threads.
/// With them, every thread's events run the program. Without BPF hits are perf samples, a process watch
/// one breakpoint per thread; so are a per-thread watch's reading no value on a kernel whose program
/// cannot tell which event fired (its samples' decoder drops a store's second report instead; a watch
/// reading values there takes the program, and the plan refuses it in its turn, as the program's load
/// would). (`--value` and `--if` without BPF are refused by the plan, in its order.)
pub(super) fn delivery(
    r: &WatchRequest,
    scope: &Scope,
    bpf: impl FnOnce() -> bool,
    firing_event: impl FnOnce() -> bool,
) -> Delivery {
    let per_event = r.per_event();
    let program = bpf() && (!per_event || r.reads_values() || firing_event());
    let events = match (per_event || !program) && !scope.system_wide() {
        true => Binding::Scope {
            remove_on_exec: r.remove_on_exec,
        },
        false => Binding::Cpus,
    };
    let hits = match program {
        true => Hits::Program,
        false => Hits::Samples,
    };
    Delivery { hits, events }
}

/// `--on` and `--rotate` against the rest of the command line; `comms` (kernel-length), and the `-p`
/// processes once they are checked, choose the allocating tasks.
fn on(r: &WatchRequest, scope: &Scope, comms: Vec<String>) -> Result<Option<OnRequest>> {
    let Some(on) = &r.on else {
        if !r.free.is_empty() {
            return Err(Error::usage(
                "--free names the call that ends a user-space object; add --on uretprobe:PATH:FUNC or \
                 uprobe:PATH:FUNC:argN, or drop --free",
            ));
        }
        if r.rotate {
            return Err(Error::usage(
                "--rotate chooses what happens to objects armed from --on when every register is busy; \
                 add --on SOURCE, or drop --rotate",
            ));
        }
        return Ok(None);
    };
    let source = on.clone();
    let frees = r.free.clone();
    if let Some(probe) = source.user() {
        if scope.system_wide() {
            return Err(Error::usage(format!(
                "--on {probe}: a user-space source needs the process whose objects to watch: give -p PID, \
                 or start it with -- CMD"
            )));
        }
    } else if !frees.is_empty() {
        return Err(Error::usage(
            "--free names a user-space function; a kernel source's frees are kfree and kmem_cache_free already",
        ));
    } else if !scope.system_wide() {
        return Err(Error::usage(
            "--on watches kernel objects system-wide and `-- CMD` starts a process to watch; to take only \
             the objects a process allocates, start it first and give -p PID",
        ));
    }
    if r.targets.len() != 1 {
        return Err(Error::usage(format!(
            "--on takes one TARGET, a field of each object ('(struct TYPE)$obj.FIELD'); {} were given",
            r.targets.len()
        )));
    }
    if r.control.is_some() {
        return Err(Error::usage(
            "--on moves its breakpoints to each new object itself; drop --control",
        ));
    }
    Ok(Some(OnRequest {
        source,
        text: r.targets.first().cloned().unwrap_or_default(),
        rotate: r.rotate,
        pids: Vec::new(),
        comms,
        frees,
    }))
}

/// `--last N` and its `--dump-on` triggers, checked against each other and the outputs: together or not
/// at all, a buffer of at least one hit, and a stream to print it in.
fn flight(r: &WatchRequest, stream: &Stream) -> Result<Option<Flight>> {
    let last =
        match (r.last, r.dump_on.is_empty()) {
            (None, true) => return Ok(None),
            (None, false) => {
                return Err(Error::usage(
                    "--dump-on prints the hits --last N keeps; add --last N (e.g. --last 100)",
                ))
            }
            (Some(_), true) => return Err(Error::usage(
                "--last N prints only when a trigger fires; add --dump-on TRIGGER (a condition, \
                 `signal` or tracepoint:GROUP:NAME)",
            )),
            (Some(0), false) => {
                return Err(Error::usage(
                    "--last 0 keeps no hit to print; give N of 1 or more",
                ))
            }
            (Some(n), false) => n,
        };
    // The stream the outputs stage chose prints no hit: `--last` would have nowhere to print them.
    let off = match stream {
        Stream::Hits { .. } => None,
        Stream::Quiet { .. } => Some("--quiet"),
        Stream::FoldedOnStdout => Some("--folded"),
    };
    if let Some(flag) = off {
        return Err(Error::usage(format!(
            "--last prints its hits in the stream, which {flag} turns off; drop {flag} (or use \
             --folded=FILE)"
        )));
    }
    Ok(Some(Flight {
        last,
        triggers: r.dump_on.iter().map(|d| d.trigger.clone()).collect(),
    }))
}

/// The `--if` condition, parsed; a bad one is a usage error that points at the column.
fn parse_condition(text: Option<&str>) -> Result<Option<Condition>> {
    text.map(|t| condition::parse(t).map_err(|e| Error::usage(format!("--if '{t}': {e}"))))
        .transpose()
}

/// `--realtime PRIO|off`: the reader's SCHED_FIFO priority, or none.
fn realtime(text: &str) -> Result<Option<u8>> {
    if text == "off" {
        return Ok(None);
    }
    match text.parse::<u8>() {
        Ok(p @ 1..=99) => Ok(Some(p)),
        _ => Err(Error::usage(format!(
            "--realtime {text} must be a priority from 1 to 99 or `off` (e.g. --realtime 1)"
        ))),
    }
}

/// The processes `-p` names, each once, with when it started (from here on, which process the pid
/// names): a thread id that is not its process's leader stands for its process (said in `notes`), since
/// a watch covers every thread of a process.
fn processes_of(host: &dyn Host, pids: &[u32], notes: &mut Vec<String>) -> Result<Vec<Started>> {
    let mut out: Vec<Started> = Vec::new();
    for &pid in pids {
        let no_such = || {
            Error::usage(format!(
                "-p {pid}: no such process; give the pid of a running process (pgrep NAME)"
            ))
        };
        let task = (pid != 0)
            .then(|| host.task(pid))
            .flatten()
            .ok_or_else(no_such)?;
        if task.zombie {
            return Err(Error::usage(format!(
                "-p {pid}: process {pid} ({}) has exited and is not reaped (a zombie, waiting for its \
                 parent to wait() for it): there is nothing left to watch; give the pid of a running \
                 process (pgrep NAME), or start the program under the watch (`-- CMD`)",
                task.name
            )));
        }
        if task.tgid != pid {
            notes.push(format!(
                "ksymwatch: -p {pid} is a thread of process {} ({}): watching every thread of process {}",
                task.tgid, task.name, task.tgid
            ));
        }
        if out.iter().any(|s| s.pid == task.tgid) {
            continue;
        }
        // Gone since its check: as gone as a pid that names no process.
        let ticks = host.start_time(task.tgid).ok_or_else(no_such)?;
        out.push(Started {
            pid: task.tgid,
            ticks,
        });
    }
    Ok(out)
}
