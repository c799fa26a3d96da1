//! Planning decisions on a made-up machine: which path hits take, who a watch covers, which writers it
//! sees, per-CPU copies, launch against attach, and the refusals that are the user's to fix.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use ksymwatch_symbols::{Origin, Source};

use ksymwatch_symbols::kernel::{Delivered, Loaded};

use super::host::Task;
use super::*;
use crate::config::kernel_source::{KernelLoad, KernelQuery};
use crate::config::process::InProcess;
use crate::config::request::{OutputRequest, SymbolRequest};
use crate::config::typed::{BtfFile, Types};
use crate::error::{Error, ExitCode};
use crate::host::cgroup::{Cgroup, CgroupError};
use crate::model::target::{Base, Target};
use crate::perf::privilege::Privilege;

const KALLSYMS: &str = "\
ffffffff81000000 T _text
ffffffff81000100 T do_work
ffffffff82000000 D jiffies
ffffffff82000040 D other
";

/// The command a launch-mode plan started, as the tests see it.
struct Child {
    pid: u32,
    ran_to_entry: Rc<RefCell<bool>>,
}

impl Launch for Child {
    fn pid(&self) -> u32 {
        self.pid
    }
    fn run_to_entry(&mut self) -> crate::error::Result<bool> {
        *self.ran_to_entry.borrow_mut() = true;
        Ok(true)
    }
    fn release(&mut self) -> crate::error::Result<()> {
        Ok(())
    }
    fn status(&mut self) -> Option<i32> {
        None
    }
}

/// A machine: 2 CPUs, root, BPF unless told otherwise, a few tasks, one process-wide symbol `counter`.
struct FakeHost {
    bpf: bool,
    /// How many times planning asked whether BPF loads.
    bpf_asked: Rc<Cell<u32>>,
    /// Whether a hit program can tell which event fired (Linux 6.2 and its BTF).
    firing_event: bool,
    privilege: Privilege,
    online: BTreeSet<u32>,
    /// Task id -> its process.
    tasks: BTreeMap<u32, u32>,
    /// How many times planning asked for a task.
    tasks_asked: Rc<Cell<u32>>,
    /// Where `counter` is in each process.
    counter_at: BTreeMap<u32, u64>,
    threads: usize,
    fd_limit: Option<u64>,
    launched: Rc<RefCell<Vec<Vec<OsString>>>>,
    ran_to_entry: Rc<RefCell<bool>>,
    kallsyms_loads: Rc<RefCell<usize>>,
    /// What the kernel stage asked of the kernel's symbols, each time.
    asked: Rc<RefCell<Vec<SymbolsAsked>>>,
    /// Whether the `--btf` file is the running kernel's BTF.
    btf_running: Option<bool>,
    /// The kernel's BTF, if the machine has any ([`kernel_btf`]'s).
    btf: Option<Vec<u8>>,
    /// What debuginfod delivers as the kernel's symbols are loaded.
    delivered: Option<Delivered>,
    /// tracefs's `events` directory, where mounted.
    tracefs: Option<PathBuf>,
}

/// A [`KernelQuery`] as the tests compare it: what planning decided the watch needs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SymbolsAsked {
    dwarf: bool,
    /// The targets whose symbols a kallsyms must have (a system-wide watch's), as written.
    data_symbols: Option<Vec<String>>,
    later: bool,
    user_only: bool,
}

impl FakeHost {
    fn new() -> FakeHost {
        FakeHost {
            bpf: true,
            bpf_asked: Rc::default(),
            firing_event: true,
            privilege: Privilege::ROOT,
            online: [0, 1].into(),
            tasks: [(100, 100), (101, 100), (200, 200)].into(),
            tasks_asked: Rc::default(),
            counter_at: [(100, 0x5000), (200, 0x5000), (4242, 0x6000)].into(),
            threads: 3,
            fd_limit: Some(1024),
            launched: Rc::default(),
            ran_to_entry: Rc::default(),
            kallsyms_loads: Rc::default(),
            asked: Rc::default(),
            btf_running: Some(true),
            btf: None,
            delivered: None,
            tracefs: None,
        }
    }

    fn without_bpf() -> FakeHost {
        FakeHost {
            bpf: false,
            ..FakeHost::new()
        }
    }

    /// A user without CAP_PERFMON at perf_event_paranoid 2.
    fn unprivileged() -> FakeHost {
        FakeHost {
            privilege: Privilege {
                euid: 1000,
                cap_perfmon: false,
                cap_sys_admin: false,
                cap_bpf: false,
                paranoid: Some(2),
                initial_user_ns: true,
            },
            ..FakeHost::new()
        }
    }
}

impl Host for FakeHost {
    fn bpf(&self) -> io::Result<()> {
        self.bpf_asked.set(self.bpf_asked.get() + 1);
        match self.bpf {
            true => Ok(()),
            false => Err(io::Error::from_raw_os_error(libc::EPERM)),
        }
    }
    fn firing_event(&self) -> bool {
        self.firing_event
    }
    fn privilege(&self) -> Privilege {
        self.privilege
    }
    fn online_cpus(&self) -> io::Result<BTreeSet<u32>> {
        Ok(self.online.clone())
    }
    fn possible_cpus(&self) -> Option<BTreeSet<u32>> {
        Some([0, 1, 2, 3].into())
    }
    fn task(&self, pid: u32) -> Option<Task> {
        self.tasks_asked.set(self.tasks_asked.get() + 1);
        self.tasks.get(&pid).map(|&tgid| Task {
            tgid,
            name: "app".into(),
            zombie: false,
        })
    }
    fn process_exists(&self, pid: u32) -> bool {
        self.tasks.values().any(|&p| p == pid)
    }
    /// A process (a task that leads itself) started at ten times its pid.
    fn start_time(&self, pid: u32) -> Option<u64> {
        (self.tasks.get(&pid) == Some(&pid)).then_some(u64::from(pid) * 10)
    }
    fn process_symbol(&self, pid: u32, target: &Target) -> crate::error::Result<InProcess> {
        let addr = match &target.base {
            // `liblate:` is mapped once the command has run to its entry; `libnever:` never is.
            Base::Symbol {
                object: Some(o), ..
            } if o == "libnever" || (o == "liblate" && !*self.ran_to_entry.borrow()) => {
                return Err(Error::from_cause(
                    ExitCode::Usage,
                    ksymwatch_symbols::process::ProcessError::NotMapped {
                        pid,
                        object: o.clone(),
                        mapped: Vec::new(),
                    },
                ));
            }
            Base::Symbol {
                object: Some(o), ..
            } if o == "liblate" => Some(0x7000),
            Base::Symbol { name, .. } if name == "counter" => self.counter_at.get(&pid).copied(),
            _ => None,
        }
        .ok_or_else(|| Error::usage(format!("`{}` is not in process {pid}", target.text)))?;
        let found = ksymwatch_symbols::process::ProcessTarget {
            symbol: target.text.clone(),
            object: "/made-up/app".into(),
            is_exe: true,
            file_vaddr: addr,
            bias: 0,
            addr,
            size: Some(4),
            symbol_size: Some(4),
            type_char: 'D',
            section: None,
            type_name: None,
            member: None,
            debug_file: None,
            notes: Vec::new(),
        };
        Ok(InProcess {
            text: target.text.clone(),
            pid,
            comm: None,
            found,
            addr,
            offset: 0,
            size: Some(4),
            type_name: None,
        })
    }
    fn threads(&self, _pids: &[u32]) -> usize {
        self.threads
    }
    fn named_threads(&self, _pids: &[u32]) -> Vec<(u32, String)> {
        vec![(42, "writer".into())]
    }
    fn fd_limit(&self) -> Option<u64> {
        self.fd_limit
    }
    fn launch(&mut self, argv: &[OsString]) -> crate::error::Result<Box<dyn Launch>> {
        self.launched.borrow_mut().push(argv.to_vec());
        Ok(Box::new(Child {
            pid: 4242,
            ran_to_entry: Rc::clone(&self.ran_to_entry),
        }))
    }
    fn kernel_symbols(&mut self, query: &KernelQuery<'_>) -> crate::error::Result<KernelLoad> {
        self.asked.borrow_mut().push(SymbolsAsked {
            dwarf: query.dwarf,
            data_symbols: query
                .data_symbols
                .map(|t| t.iter().map(|t| t.text.clone()).collect()),
            later: query.kallsyms_later,
            user_only: query.user_only,
        });
        let picked = Source::Kallsyms(query.symbols.kallsyms.clone());
        if query.kallsyms_later {
            return Ok(KernelLoad {
                picked,
                loaded: Ok(Loaded::Later),
                delivered: None,
            });
        }
        *self.kallsyms_loads.borrow_mut() += 1;
        let table = ksymwatch_symbols::kallsyms::from_text(KALLSYMS, &query.symbols.kallsyms)
            .map_err(|e| Error::usage(e.to_string()))
            .map(|t| Loaded::Kallsyms(t, Origin::Parsed));
        Ok(KernelLoad {
            picked,
            loaded: table,
            delivered: self.delivered.clone(),
        })
    }
    fn percpu_bases(
        &self,
        _cpus: &[u32],
    ) -> std::result::Result<(BTreeMap<u32, u64>, Offsets), String> {
        Err("no per-CPU bases on this made-up machine".into())
    }
    fn tracefs_events(&self) -> Option<PathBuf> {
        self.tracefs.clone()
    }
    fn read_tracefs(&self, path: &Path) -> io::Result<String> {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            path.display().to_string(),
        ))
    }
    /// One cgroup, `/pods/a`; no other.
    fn cgroup(&self, arg: &str) -> std::result::Result<Cgroup, CgroupError> {
        let dir = PathBuf::from("/sys/fs/cgroup/pods/a");
        match arg {
            "/pods/a" => Ok(Cgroup {
                path: arg.into(),
                dir,
                id: 0x1a,
            }),
            _ => Err(CgroupError::NotFound {
                path: arg.into(),
                dir,
            }),
        }
    }
    fn types(&self, btf: &Path) -> Types {
        let file = BtfFile {
            exists: true,
            dir: false,
            elf: false,
            running: self.btf_running,
        };
        let vmlinux = match &self.btf {
            Some(blob) => ksymwatch_symbols::Btf::from_bytes(blob.clone(), btf, None)
                .map_err(|e| e.to_string()),
            None => Err("no BTF on this made-up machine".into()),
        };
        Types::given(btf, file, vmlinux)
    }
}

/// A kernel's BTF with `struct rq { int nr_running; int cpu; }`, the per-CPU variable `runqueues` (at 0x40
/// in the per-CPU area) and the global `other` of that type.
fn kernel_btf() -> Vec<u8> {
    let mut strs = b"\0int\0rq\0nr_running\0cpu\0runqueues\0other\0.data..percpu\0.data\0".to_vec();
    let at = |name: &str| {
        let pos = strs.windows(name.len() + 2).position(|w| {
            w[0] == 0 && &w[1..=name.len()] == name.as_bytes() && w[name.len() + 1] == 0
        });
        pos.map_or(0, |p| p as u32 + 1)
    };
    // Each type: name offset, info (kind << 24 | members), size or type, then its words.
    let types: [&[u32]; 6] = [
        &[at("int"), 1 << 24, 4, 32],
        &[
            at("rq"),
            4 << 24 | 2,
            8,
            at("nr_running"),
            1,
            0,
            at("cpu"),
            1,
            32,
        ],
        &[at("runqueues"), 14 << 24, 2, 1],
        &[at("other"), 14 << 24, 2, 1],
        &[at(".data..percpu"), 15 << 24 | 1, 0, 3, 0x40, 8],
        &[at(".data"), 15 << 24 | 1, 0, 4, 0, 8],
    ];
    let words: Vec<u8> = types
        .iter()
        .flat_map(|t| t.iter())
        .flat_map(|w| w.to_le_bytes())
        .collect();
    let mut blob = vec![0x9f, 0xeb, 1, 0];
    let len = words.len() as u32;
    for w in [24, 0, len, len, strs.len() as u32] {
        blob.extend_from_slice(&w.to_le_bytes());
    }
    blob.extend(words);
    blob.append(&mut strs);
    blob
}

/// `write TARGETS` with every option at its default.
fn request(targets: &[&str]) -> WatchRequest {
    WatchRequest {
        access: Access::Write,
        targets: targets.iter().map(|t| t.to_string()).collect(),
        pids: Vec::new(),
        command: None,
        cpus: None,
        on: None,
        rotate: false,
        free: Vec::new(),
        percpu_cpu: None,
        buffer_pages: None,
        realtime: "1".into(),
        strict_hotplug: false,
        control: None,
        remove_on_exec: false,
        per_thread: false,
        value: false,
        condition: None,
        last: None,
        dump_on: Vec::new(),
        duration: None,
        count: None,
        symbols: SymbolRequest {
            kallsyms: "/made-up/kallsyms".into(),
            vmlinux: None,
            system_map: None,
            notes: "/made-up/notes".into(),
            btf: "/made-up/btf".into(),
            debuginfod: Default::default(),
            force: false,
            lines: false,
            symbol_cache: false,
        },
        output: OutputRequest {
            top: 20,
            ..OutputRequest::default()
        },
    }
}

fn pids(mut r: WatchRequest, pids: &[u32]) -> WatchRequest {
    r.pids = pids.to_vec();
    r
}

/// The plan for `r` on `host` as the command line makes it: its first phase decided on the host, then
/// planned.
fn planning(r: WatchRequest, host: &mut FakeHost) -> Planned {
    match decide(&r, host) {
        Ok(decided) => plan(r, decided, host),
        Err(e) => Planned {
            notes: Vec::new(),
            plan: Err(e),
        },
    }
}

fn planned(r: WatchRequest, host: &mut FakeHost) -> WatchPlan {
    match planning(r, host).plan {
        Ok(p) => p,
        Err(e) => panic!("refused: {e}"),
    }
}

fn refused(r: WatchRequest, host: &mut FakeHost) -> Error {
    match planning(r, host).plan {
        Ok(p) => panic!("planned: {}", p.describe()),
        Err(e) => e,
    }
}

/// Where BPF loads, every watch takes the hit program; without it, a system-wide watch takes perf samples
/// and a process watch one breakpoint per thread.
#[test]
fn the_delivery_follows_bpf_and_the_scope() {
    let p = planned(request(&["jiffies"]), &mut FakeHost::new());
    assert_eq!(
        p.delivery(),
        Delivery {
            hits: Hits::Program,
            events: Binding::Cpus,
        }
    );
    assert!(p.scope().system_wide());
    let p = planned(request(&["jiffies"]), &mut FakeHost::without_bpf());
    assert_eq!(
        p.delivery(),
        Delivery {
            hits: Hits::Samples,
            events: Binding::Cpus,
        }
    );
    let p = planned(
        pids(request(&["counter"]), &[100]),
        &mut FakeHost::without_bpf(),
    );
    assert_eq!(
        p.delivery(),
        Delivery {
            hits: Hits::Samples,
            events: Binding::Scope {
                remove_on_exec: false,
            },
        }
    );
    assert!(p
        .describe()
        .contains("# path: one breakpoint per thread, CPU and target"));
}

/// The hit path or not, as the plan and the prefetch both take it from [`delivery`]: where BPF loads
/// every watch takes the program, per-thread events too; whether the program can tell which event fired
/// is asked only of a per-thread watch reading no value (one reading values needs the program anyway).
#[test]
fn the_hit_program_is_taken_wherever_bpf_loads() {
    let unasked = || panic!("asked which event fired");
    let system = request(&["jiffies"]);
    assert_eq!(
        delivery(&system, &Scope::System, || true, unasked).hits,
        Hits::Program
    );
    assert_eq!(
        delivery(&system, &Scope::System, || false, unasked).hits,
        Hits::Samples
    );
    let mut per_thread = pids(request(&["counter"]), &[100]);
    per_thread.per_thread = true;
    let scope = Scope::Processes(vec![100]);
    let events = Binding::Scope {
        remove_on_exec: false,
    };
    // (BPF loads, the program can tell which event fired) -> how the hits come.
    for ((bpf, firing), hits) in [
        ((true, true), Hits::Program),
        ((true, false), Hits::Samples),
        ((false, true), Hits::Samples),
    ] {
        let d = delivery(&per_thread, &scope, || bpf, || firing);
        assert_eq!(d, Delivery { hits, events }, "bpf {bpf}, firing {firing}");
    }
    // Without BPF the question is not asked; reading values, the program is taken (the plan refuses a
    // kernel without the check, naming what it lacks, as the program's load would).
    assert_eq!(
        delivery(&per_thread, &scope, || false, unasked).hits,
        Hits::Samples
    );
    per_thread.value = true;
    assert_eq!(
        delivery(&per_thread, &scope, || true, unasked).hits,
        Hits::Program
    );
}

/// Planning asks whether BPF loads once per plan, whatever needs the answer: every watch now can use a
/// program, so the delivery asks it of each, a per-thread watch reading no value too (it did not while
/// such a watch took perf samples wherever BPF loaded); `--value`'s check asks no second time.
#[test]
fn bpf_is_asked_once_per_plan() {
    let mut machine = FakeHost::new();
    let mut per_thread = pids(request(&["counter"]), &[100]);
    per_thread.per_thread = true;
    planned(per_thread.clone(), &mut machine);
    assert_eq!(machine.bpf_asked.get(), 1);
    per_thread.value = true;
    planned(per_thread, &mut machine);
    assert_eq!(machine.bpf_asked.get(), 2);
    planned(request(&["jiffies"]), &mut machine);
    assert_eq!(machine.bpf_asked.get(), 3);
}

/// `-p`'s processes are read once, as the scope is decided: a thread stands for its process, each process
/// once, with its start. The prefetch takes them from the decision, and so does the plan, which asks the
/// host for no task again.
#[test]
fn the_decision_holds_the_processes_p_names() {
    let mut machine = FakeHost::new();
    let r = pids(request(&["counter"]), &[101, 100, 200]);
    let decided = decide(&r, &machine).expect("decided");
    assert_eq!(decided.scope().pids(), [100, 200]);
    assert_eq!(machine.tasks_asked.get(), 3);
    let planned = plan(r, decided, &mut machine);
    assert_eq!(machine.tasks_asked.get(), 3);
    assert_eq!(
        planned.notes,
        ["ksymwatch: -p 101 is a thread of process 100 (app): watching every thread of process 100"]
    );
    let p = planned.plan.expect("planned");
    assert_eq!(p.scope().pids(), [100, 200]);
    let started = [(100, 1000), (200, 2000)].map(|(pid, ticks)| Started { pid, ticks });
    assert_eq!(p.started(), started);
}

/// A `-p` that names no process is found as the scope is decided but refused in the plan's turn, as
/// before the decision read it: after the options checked against each other, and with the notes of the
/// pids before it. Until then the decided scope holds the pids as given.
#[test]
fn a_pid_of_no_process_is_refused_in_the_plans_turn() {
    let mut r = pids(request(&["counter"]), &[101, 999]);
    let decided = decide(&r, &FakeHost::new()).expect("the plan refuses it, not the decision");
    assert_eq!(decided.scope().pids(), [101, 999]);
    r.buffer_pages = Some(3);
    let e = refused(r.clone(), &mut FakeHost::new());
    assert!(e.to_string().starts_with("--buffer-pages 3"), "{e}");
    r.buffer_pages = None;
    let planned = planning(r, &mut FakeHost::new());
    let e = planned.plan.err().expect("refused");
    assert_eq!(e.code, ExitCode::Usage);
    assert!(e.to_string().starts_with("-p 999: no such process"), "{e}");
    assert_eq!(
        planned.notes,
        ["ksymwatch: -p 101 is a thread of process 100 (app): watching every thread of process 100"]
    );
}

/// `--per-thread` and `--remove-on-exec` take the per-thread events; where BPF loads every thread's event
/// runs the hit program, reading values or not, unless the program cannot tell which event fired and
/// reads no value: then the events' perf samples, as without BPF.
#[test]
fn per_thread_options_choose_the_per_thread_path() {
    // (--per-thread, --remove-on-exec, --value, the kernel tells the program which event fired)
    // -> how hits come, and whether an exec drops the events.
    let cases = [
        ((true, false, false, true), Hits::Program, false),
        ((false, true, false, true), Hits::Program, true),
        ((true, false, false, false), Hits::Samples, false),
        ((false, true, false, false), Hits::Samples, true),
        // Reading values, every thread's event runs the hit program (where it cannot tell which event
        // fired, the plan refuses the watch: `values_per_thread_without_the_firing_event_are_refused`).
        ((true, false, true, true), Hits::Program, false),
    ];
    let mut p = None;
    for ((per_thread, remove_on_exec, value, firing_event), hits, dropped) in cases {
        let mut r = pids(request(&["counter"]), &[100]);
        (r.per_thread, r.remove_on_exec, r.value) = (per_thread, remove_on_exec, value);
        let mut machine = FakeHost {
            firing_event,
            ..FakeHost::new()
        };
        let planned = planned(r, &mut machine);
        let events = Binding::Scope {
            remove_on_exec: dropped,
        };
        assert_eq!(planned.delivery(), Delivery { hits, events });
        if hits == Hits::Samples {
            assert!(planned.describe().contains(
                "# path: one breakpoint per thread, CPU and target, hits as perf samples"
            ));
        }
        p = Some(planned);
    }
    let p = p.expect("the last case's plan");
    assert_eq!(p.delivery().hits, Hits::Program);
    assert!(p.describe().contains(
        "# path: one breakpoint per thread, CPU and target, hits emitted by a BPF program"
    ));
}

/// `--cgroup` is refused exactly where the watch's hits are perf samples, whose path cannot test the
/// writer's cgroup: without BPF (whatever the watch), or for a per-thread watch reading no value on a
/// kernel whose program cannot tell which event fired. Wherever the program runs, per CPU or on every
/// thread's events, the cgroup is kept in the plan's filter, for the program to test.
#[test]
fn cgroup_is_refused_exactly_where_hits_are_perf_samples() {
    // (--per-thread, --remove-on-exec, --value, BPF loads, the program can tell which event fired)
    // -> refused, with what the message says.
    let cases = [
        ((false, false, false, true, true), None),
        ((true, false, false, true, true), None),
        ((false, true, false, true, true), None),
        // Reading values there, the plan refuses the watch itself, as the program's load did.
        (
            (true, false, true, true, false),
            Some("report each store once"),
        ),
        ((false, false, false, false, true), Some("drop --cgroup")),
        ((true, false, false, false, true), Some("drop --cgroup")),
        ((true, false, false, true, false), Some("which event fired")),
        ((false, true, false, true, false), Some("which event fired")),
    ];
    for ((per_thread, remove_on_exec, value, bpf, firing_event), refusal) in cases {
        let mut r = pids(request(&["counter"]), &[100]);
        (r.per_thread, r.remove_on_exec, r.value) = (per_thread, remove_on_exec, value);
        r.output.cgroups = vec!["/pods/a".into()];
        let mut machine = FakeHost {
            bpf,
            firing_event,
            ..FakeHost::new()
        };
        let case = format!("{per_thread} {remove_on_exec} {value} {bpf} {firing_event}");
        match refusal {
            None => {
                let p = planned(r, &mut machine);
                assert_eq!(p.delivery().hits, Hits::Program, "{case}");
                let ids: Vec<u64> = p.filter().cgroups.iter().map(|c| c.id).collect();
                assert_eq!(ids, [0x1a], "{case}");
            }
            Some(needle) => {
                let e = refused(r, &mut machine);
                assert_eq!(e.code, ExitCode::NotPermitted, "{case}");
                assert!(e.to_string().contains(needle), "{case}: {e}");
            }
        }
    }
    // A wrong path comes first, whatever the machine makes of the watch.
    let mut r = pids(request(&["counter"]), &[100]);
    r.per_thread = true;
    r.output.cgroups = vec!["/pods/nope".into()];
    let mut machine = FakeHost {
        firing_event: false,
        ..FakeHost::new()
    };
    assert_eq!(refused(r, &mut machine).code, ExitCode::Usage);
    // Without BPF, `--value`'s refusal comes before `--cgroup`'s, as it did.
    let mut r = pids(request(&["counter"]), &[100]);
    r.value = true;
    r.output.cgroups = vec!["/pods/a".into()];
    let e = refused(r, &mut FakeHost::without_bpf());
    assert!(e.to_string().starts_with("--value and --if"), "{e}");
}

/// A per-thread watch reading values where the hit program cannot tell which event fired is refused by
/// the plan, as the program's load refused it (exit 4, naming what the kernel lacks), before any symbol
/// is loaded or a command started; reading none, or one breakpoint per CPU, it is planned.
#[test]
fn values_per_thread_without_the_firing_event_are_refused() {
    let no_firing = || FakeHost {
        firing_event: false,
        ..FakeHost::new()
    };
    let reading = |mut r: WatchRequest, per_thread: bool| {
        (r.per_thread, r.remove_on_exec) = (per_thread, !per_thread);
        r.value = true;
        r
    };
    let launched = |mut r: WatchRequest| {
        r.command = Some(vec!["./app".into()]);
        r
    };
    for r in [
        reading(pids(request(&["counter"]), &[100]), true),
        reading(launched(request(&["counter"])), false),
        WatchRequest {
            value: false,
            condition: Some("value == 3".into()),
            ..reading(pids(request(&["counter"]), &[100]), true)
        },
    ] {
        let mut machine = no_firing();
        let e = refused(r, &mut machine);
        // The words the program's load refused it with (`cli::advice` says them from `no_firing_event`).
        assert_eq!(e.code, ExitCode::NotPermitted);
        assert_eq!(
            e.to_string(),
            format!(
                "--value and --if with --per-thread or --remove-on-exec report each store once only \
                 where the kernel has {}; without those two options (one breakpoint per CPU) they work",
                crate::perf::bpf::repeats::NEEDS
            )
        );
        assert_eq!(*machine.kallsyms_loads.borrow(), 0);
        assert!(machine.launched.borrow().is_empty());
        assert_eq!(machine.bpf_asked.get(), 1);
    }
    // Reading no value: perf samples. Reading values with one breakpoint per CPU: the program, which
    // needs no telling.
    let samples = planned(
        WatchRequest {
            value: false,
            ..reading(pids(request(&["counter"]), &[100]), true)
        },
        &mut no_firing(),
    );
    assert_eq!(samples.delivery().hits, Hits::Samples);
    let mut per_cpu = pids(request(&["counter"]), &[100]);
    per_cpu.value = true;
    assert_eq!(
        planned(per_cpu, &mut no_firing()).delivery().hits,
        Hits::Program
    );
    // Without BPF, the values' own refusal comes first, as before.
    let mut machine = FakeHost {
        bpf: false,
        ..no_firing()
    };
    let e = refused(
        reading(pids(request(&["counter"]), &[100]), true),
        &mut machine,
    );
    assert!(
        e.to_string().starts_with("--value and --if read the value"),
        "{e}"
    );
}

/// `--value`'s olds are seeded at arming only where the hit programs read a process's values (a launched
/// command's too), and are the kernel's wherever it may drop traps (`--if`, a filter).
#[test]
fn the_olds_are_decided_once_from_scope_delivery_and_values() {
    let valued = |r: WatchRequest| WatchRequest { value: true, ..r };
    let olds = |r: WatchRequest| planned(r, &mut FakeHost::new()).old_values();
    assert_eq!(
        olds(valued(pids(request(&["counter"]), &[100]))),
        OldValues {
            condition: None,
            kernel_drops: false,
            seeded: true
        }
    );
    let mut launched = valued(request(&["counter"]));
    launched.command = Some(vec!["./app".into()]);
    assert!(olds(launched).seeded);
    // No process's memory to read system-wide; no value read without --value.
    assert!(!olds(valued(request(&["jiffies"]))).seeded);
    assert!(!olds(pids(request(&["counter"]), &[100])).seeded);
    let mut per_thread = valued(pids(request(&["counter"]), &[100]));
    per_thread.per_thread = true;
    // The per-thread path reading values runs the hit program: seeded as one breakpoint per CPU is.
    assert!(olds(per_thread.clone()).seeded);
    // Reading none, it runs the program too, and has no olds to seed.
    assert!(
        !olds(WatchRequest {
            value: false,
            ..per_thread
        })
        .seeded
    );
    let mut condition = pids(request(&["counter"]), &[100]);
    condition.condition = Some("value == 3".into());
    let decided = olds(condition);
    assert_eq!(
        decided.condition.map(|c| c.to_string()).as_deref(),
        Some("value == 3")
    );
    assert!(decided.kernel_drops && decided.seeded);
    let mut filtered = valued(request(&["jiffies"]));
    filtered.output.comms = vec!["worker".into()];
    assert!(olds(filtered).kernel_drops);
    assert!(!olds(valued(request(&["jiffies"]))).kernel_drops);
}

/// `--value` without BPF cannot work at all: exit 4 before any symbol is loaded.
#[test]
fn values_without_bpf_are_refused_before_loading_symbols() {
    let mut r = request(&["jiffies"]);
    r.value = true;
    let mut machine = FakeHost::without_bpf();
    let e = refused(r, &mut machine);
    assert_eq!(e.code, ExitCode::NotPermitted);
    assert!(
        e.to_string().starts_with("--value and --if read the value"),
        "{e}"
    );
    assert_eq!(*machine.kallsyms_loads.borrow(), 0);
    let mut r = request(&["jiffies"]);
    r.condition = Some("value == 3".into());
    let p = planned(r, &mut FakeHost::new());
    assert!(matches!(p.values(), Values::If(_)));
    assert!(
        p.describe().contains("# if: value == 3"),
        "{}",
        p.describe()
    );
}

/// `-p` names processes: a thread stands for its process, each process once; the target is resolved in
/// every one of them.
#[test]
fn a_thread_stands_for_its_process() {
    let p = planned(
        pids(request(&["counter"]), &[101, 100]),
        &mut FakeHost::new(),
    );
    assert!(matches!(p.scope(), Scope::Processes(pids) if pids == &[100]));
    assert!(!p.scope().system_wide());
    assert_eq!(p.watches()[0].addr, 0x5000);
    let p = planned(
        pids(request(&["counter"]), &[100, 200]),
        &mut FakeHost::new(),
    );
    assert_eq!(p.scope().pids(), [100, 200]);
}

/// Each `-p` process's start is planned with it (the fake's: ten times the pid), its own for a thread's
/// process, so the session can tell the process from another given its pid; a process gone before its
/// start is read is no process at all; a launched command's is not planned (this process's child, its
/// pid cannot be another's).
#[test]
fn each_process_is_planned_with_its_start() {
    let p = planned(
        pids(request(&["counter"]), &[101, 200]),
        &mut FakeHost::new(),
    );
    let started = [(100, 1000), (200, 2000)].map(|(pid, ticks)| Started { pid, ticks });
    assert_eq!(p.started(), started);
    let mut r = request(&["counter"]);
    r.command = Some(vec!["./app".into()]);
    assert!(planned(r, &mut FakeHost::new()).started().is_empty());
    // Task 300's process (301) is gone by the time its start is read: 301 is no task.
    let mut machine = FakeHost::new();
    machine.tasks.insert(300, 301);
    let e = refused(pids(request(&["counter"]), &[300]), &mut machine);
    assert_eq!(e.code, ExitCode::Usage);
    assert!(e.to_string().starts_with("-p 300: no such process"), "{e}");
}

/// A symbol at different addresses in two processes cannot be one watch.
#[test]
fn processes_must_agree_on_the_address() {
    let mut machine = FakeHost::new();
    machine.counter_at.insert(200, 0x7000);
    let e = refused(pids(request(&["counter"]), &[100, 200]), &mut machine);
    assert_eq!(e.code, ExitCode::Usage);
    assert!(
        e.to_string()
            .contains("is at 0x5000/4 in pid 100 but at 0x7000/4 in pid 200"),
        "{e}"
    );
}

/// `-- CMD` starts the command (and nothing is started for `-p`), resolves the target in it, and the
/// plan holds it until the run takes it over.
#[test]
fn launch_starts_the_command_and_attach_does_not() {
    let mut machine = FakeHost::new();
    let mut r = request(&["counter"]);
    r.command = Some(vec!["./app".into(), "-v".into()]);
    let mut p = planned(r, &mut machine);
    assert_eq!(
        *machine.launched.borrow(),
        [vec![OsString::from("./app"), "-v".into()]]
    );
    assert!(matches!(p.scope(), Scope::Launched(c) if c.argv == ["./app", "-v"]));
    assert_eq!(p.scope().pids(), [4242]);
    assert_eq!(p.watches()[0].addr, 0x6000);
    assert!(matches!(
        p.scope().arming(),
        crate::model::scope::Scope::Launched(4242)
    ));
    assert!(p.take_command().is_some_and(|c| c.pid() == 4242));
    assert!(p.take_command().is_none());

    let mut machine = FakeHost::new();
    planned(pids(request(&["counter"]), &[100]), &mut machine);
    assert!(machine.launched.borrow().is_empty());
}

/// A launched command's library symbol is resolved once the command has run to its entry (one retry); a
/// library still not mapped there is refused with the way out, and a running process is never retried.
#[test]
fn a_launched_library_symbol_is_resolved_at_the_entry() {
    let mut machine = FakeHost::new();
    let mut r = request(&["liblate:counter"]);
    r.command = Some(vec!["./app".into()]);
    let p = planned(r, &mut machine);
    assert!(*machine.ran_to_entry.borrow());
    assert_eq!(p.watches()[0].addr, 0x7000);

    let mut machine = FakeHost::new();
    let mut r = request(&["libnever:counter"]);
    r.command = Some(vec!["./app".into()]);
    let e = refused(r, &mut machine);
    assert!(*machine.ran_to_entry.borrow());
    assert!(
        e.to_string().contains("not loaded when the command starts"),
        "{e}"
    );

    let mut machine = FakeHost::new();
    let e = refused(pids(request(&["libnever:counter"]), &[100]), &mut machine);
    assert!(!*machine.ran_to_entry.borrow());
    assert!(
        !e.to_string().contains("not loaded when the command starts"),
        "{e}"
    );
}

/// A bare `--`, and `-p` with `-- CMD`, are the user's to fix; a missing process too.
#[test]
fn who_to_watch_must_be_said_once() {
    let mut r = request(&["counter"]);
    r.command = Some(Vec::new());
    let e = refused(r, &mut FakeHost::new());
    assert!(
        e.to_string()
            .starts_with("`--` must be followed by a command"),
        "{e}"
    );
    let mut r = pids(request(&["counter"]), &[100]);
    r.command = Some(vec!["./app".into()]);
    let e = refused(r, &mut FakeHost::new());
    assert!(
        e.to_string().starts_with("-p watches a running process"),
        "{e}"
    );
    let e = refused(pids(request(&["counter"]), &[999]), &mut FakeHost::new());
    assert_eq!(e.code, ExitCode::Usage);
    assert!(e.to_string().starts_with("-p 999: no such process"), "{e}");
}

/// Without CAP_PERFMON, a process watch sees user-space writers only (and needs no kernel symbols it
/// cannot read); a system-wide watch is refused with exit 4.
#[test]
fn an_unprivileged_user_watches_user_space_of_own_processes() {
    let p = planned(
        pids(request(&["counter"]), &[100]),
        &mut FakeHost::unprivileged(),
    );
    assert_eq!(p.writers(), Writers::UserSpaceOnly);
    assert!(p.describe().contains("# user-space writers only"));
    let p = planned(pids(request(&["counter"]), &[100]), &mut FakeHost::new());
    assert_eq!(p.writers(), Writers::All);
    let e = refused(request(&["jiffies"]), &mut FakeHost::unprivileged());
    assert_eq!(e.code, ExitCode::NotPermitted);
    assert!(
        e.to_string()
            .starts_with("system-wide breakpoints need root or CAP_PERFMON"),
        "{e}"
    );
}

/// A process watch of user-space writers only (no CAP_PERFMON) refuses a kernel address before arming,
/// naming CAP_SYS_ADMIN (exit 4): the kernel would take no such event (EINVAL), which arming called an
/// unwatchable address (exit 3). With the kernel visible it is the kernel's to judge.
#[test]
fn a_kernel_address_in_a_user_space_only_watch_needs_cap_sys_admin() {
    let kernel = "0xffffffff82e03e00";
    let e = refused(
        pids(request(&[kernel]), &[100]),
        &mut FakeHost::unprivileged(),
    );
    assert_eq!(e.code, ExitCode::NotPermitted);
    assert!(
        e.to_string().starts_with(
            "`0xffffffff82e03e00` is at kernel address 0xffffffff82e03e00, and this watch sees \
             user-space writers only"
        ),
        "{e}"
    );
    let p = planned(pids(request(&[kernel]), &[100]), &mut FakeHost::new());
    assert_eq!(p.writers(), Writers::All);
}

/// A target given twice is refused (exit 2) before anything is armed: each store would be reported twice.
#[test]
fn a_target_given_twice_is_refused() {
    let e = refused(
        pids(request(&["counter", "counter"]), &[100]),
        &mut FakeHost::new(),
    );
    assert_eq!(e.code, ExitCode::Usage);
    assert!(
        e.to_string()
            .starts_with("`counter` and `counter` are the same "),
        "{e}"
    );
    planned(pids(request(&["counter"]), &[100]), &mut FakeHost::new());
}

/// `--percpu-cpu` is for a system-wide watch of a per-CPU variable: refused with `-p`, and refused when no
/// target is one.
#[test]
fn percpu_cpu_needs_a_system_wide_per_cpu_target() {
    let mut r = pids(request(&["counter"]), &[100]);
    r.percpu_cpu = Some(1);
    let e = refused(r, &mut FakeHost::new());
    assert!(
        e.to_string()
            .starts_with("--percpu-cpu 1 chooses the copy of a kernel per-CPU variable"),
        "{e}"
    );
    let mut r = request(&["jiffies"]);
    r.percpu_cpu = Some(1);
    let e = refused(r, &mut FakeHost::new());
    assert_eq!(e.code, ExitCode::Usage);
    assert!(
        e.to_string()
            .contains("and no target is one; drop --percpu-cpu"),
        "{e}"
    );
    let p = planned(request(&["jiffies"]), &mut FakeHost::new());
    assert!(p.watches()[0].per_cpu.is_none());
    assert!(p.kernel().percpu().is_none());
}

/// The CPUs: every online one, followed through hotplug; `--cpus` those only, refused when offline or
/// absent.
#[test]
fn cpus_are_online_ones() {
    let p = planned(request(&["jiffies"]), &mut FakeHost::new());
    assert_eq!(p.cpus().now, BTreeSet::from([0, 1]));
    assert_eq!(p.cpus().follow, None);
    let mut r = request(&["jiffies"]);
    r.cpus = Some("1".into());
    let p = planned(r, &mut FakeHost::new());
    assert_eq!(p.cpus().follow, Some(BTreeSet::from([1])));
    let mut r = request(&["jiffies"]);
    r.cpus = Some("3".into());
    let e = refused(r, &mut FakeHost::new());
    assert!(e.to_string().starts_with("--cpus: cpu 3 is offline"), "{e}");
    let mut r = request(&["jiffies"]);
    r.cpus = Some("9".into());
    let e = refused(r, &mut FakeHost::new());
    assert!(
        e.to_string().starts_with("--cpus: cpu 9 does not exist"),
        "{e}"
    );
}

/// The per-thread path of a process with more threads than descriptors fails before opening any.
#[test]
fn the_per_thread_path_checks_its_descriptors() {
    let mut machine = FakeHost::without_bpf();
    machine.threads = 1000;
    let e = refused(pids(request(&["counter"]), &[100]), &mut machine);
    assert_eq!(e.code, ExitCode::Arm);
    assert!(
        e.to_string().starts_with("watching 1000 threads on 2 CPUs"),
        "{e}"
    );
    // The hit path takes one breakpoint per CPU, whatever the threads.
    let mut machine = FakeHost::new();
    machine.threads = 1000;
    planned(pids(request(&["counter"]), &[100]), &mut machine);
}

/// An edit of a request.
type Change = Box<dyn Fn(&mut WatchRequest)>;

/// Options that contradict each other, or ask for what no CPU has, are usage errors (exit 2).
#[test]
fn contradictions_are_usage_errors() {
    let cases: Vec<(Change, &str)> = vec![
        (
            Box::new(|r| r.buffer_pages = Some(3)),
            "--buffer-pages 3 must be a power of two",
        ),
        (
            Box::new(|r| r.realtime = "0".into()),
            "--realtime 0 must be a priority",
        ),
        (
            Box::new(|r| {
                r.output.kernel_only = true;
                r.output.user_only = true
            }),
            "--kernel-only and --user-only exclude each other",
        ),
        (
            Box::new(|r| r.rotate = true),
            "--rotate chooses what happens",
        ),
        (
            Box::new(|r| r.remove_on_exec = true),
            "--remove-on-exec is for a process watch",
        ),
        (
            Box::new(|r| r.per_thread = true),
            "--per-thread is for a process watch",
        ),
        (
            Box::new(|r| r.targets = ["a", "b", "c", "d", "e"].map(String::from).to_vec()),
            "5 targets given, but a CPU has only 4 debug registers",
        ),
        (
            Box::new(|r| {
                r.targets.push("other".into());
                r.control = Some("/tmp/fifo".into())
            }),
            "--control moves one watch, but 2 targets were given",
        ),
        (
            Box::new(|r| {
                r.command = Some(vec!["./app".into()]);
                r.control = Some("-".into())
            }),
            "--control - reads stdin",
        ),
        (
            Box::new(|r| r.last = Some(5)),
            "--last N prints only when a trigger fires",
        ),
        (
            Box::new(|r| {
                r.output.json = true;
                r.output.format = Some(crate::config::request::Format::Text)
            }),
            "--json is --format json, and --format text was given too",
        ),
        (
            Box::new(|r| {
                r.output.folded = Some("-".into());
                r.output.summary = true
            }),
            "--folded writes stdout, and so does --summary",
        ),
        (
            Box::new(|r| r.condition = Some("value ==".into())),
            "--if 'value =='",
        ),
    ];
    for (change, message) in cases {
        let mut r = request(&["jiffies"]);
        change(&mut r);
        let mut machine = FakeHost::new();
        let e = refused(r, &mut machine);
        assert_eq!(e.code, ExitCode::Usage, "{e}");
        assert!(e.to_string().starts_with(message), "{e}");
        assert!(machine.launched.borrow().is_empty());
    }
}

/// A condition's constants must fit the watched width.
#[test]
fn a_condition_must_fit_the_watch() {
    let mut r = request(&["jiffies/1"]);
    r.condition = Some("value == 300".into());
    let e = refused(r, &mut FakeHost::new());
    assert_eq!(e.code, ExitCode::Usage);
    assert!(e.to_string().starts_with("--if 'value == 300': "), "{e}");
}

/// `--control`'s resolver comes with the plan: a system-wide watch's `watch` line resolves in the same
/// kernel symbols as the command line's targets did; no `--control`, no resolver.
#[test]
fn control_resolves_in_the_plans_kernel_symbols() {
    let mut r = request(&["jiffies"]);
    r.control = Some("/made-up/fifo".into());
    let p = planned(r, &mut FakeHost::new());
    let control = p.control().expect("--control planned");
    assert_eq!(control.path(), Path::new("/made-up/fifo"));
    let other = crate::model::target::parse("other/8").expect("parses");
    let w = control
        .resolver()
        .resolve(&other, Access::ReadWrite)
        .expect("resolves");
    assert_eq!(
        (w.addr, w.len, w.access),
        (0xffff_ffff_8200_0040, 8, Access::ReadWrite)
    );
    let missing = crate::model::target::parse("nowhere").expect("parses");
    assert!(control.resolver().resolve(&missing, Access::Write).is_err());
    assert!(planned(request(&["jiffies"]), &mut FakeHost::new())
        .control()
        .is_none());
}

/// A system-wide target resolves in kallsyms; the plan says where its symbols came from.
#[test]
fn a_system_wide_target_resolves_in_kallsyms() {
    let p = planned(
        request(&["jiffies", "0xffffffff82000040/8"]),
        &mut FakeHost::new(),
    );
    assert_eq!(p.watches()[0].addr, 0xffff_ffff_8200_0000);
    assert_eq!(p.watches()[1].addr, 0xffff_ffff_8200_0040);
    assert!(p.describe().contains("# covers: every task (system-wide)"));
    assert!(matches!(p.kernel().symbols(), KernelSymbols::Kallsyms(_)));
}

/// A process watch reads the running kernel's kallsyms only when a kernel frame comes, under the same
/// `# symbols:` line; a system-wide watch, and a `--kallsyms FILE`, read it while planning.
#[test]
fn a_process_watch_reads_kernel_symbols_on_first_use() {
    let mut machine = FakeHost::new();
    let mut r = pids(request(&["counter"]), &[100]);
    r.symbols.kallsyms = crate::config::kernel_source::DEFAULT_KALLSYMS.into();
    let p = planned(r, &mut machine);
    assert!(matches!(p.kernel().symbols(), KernelSymbols::Lazy(_)));
    assert_eq!(*machine.kallsyms_loads.borrow(), 0);
    let kallsyms = Source::Kallsyms(crate::config::kernel_source::DEFAULT_KALLSYMS.into());
    assert_eq!(p.kernel().source_text(), kallsyms.to_string());

    let mut machine = FakeHost::new();
    let p = planned(pids(request(&["counter"]), &[100]), &mut machine);
    assert!(matches!(p.kernel().symbols(), KernelSymbols::Kallsyms(_)));
    assert_eq!(*machine.kallsyms_loads.borrow(), 1);
    let mut machine = FakeHost::new();
    let mut r = request(&["jiffies"]);
    r.symbols.kallsyms = crate::config::kernel_source::DEFAULT_KALLSYMS.into();
    let p = planned(r, &mut machine);
    assert!(matches!(p.kernel().symbols(), KernelSymbols::Kallsyms(_)));
}

/// What the kernel stage asks of the machine's symbols is decided from the request: DWARF for a kernel
/// target's member or element (not for a `(TYPE)` cast, whose members come from BTF, nor for a process's
/// own variable) and for `--lines`; the data symbols a kallsyms must have for a system-wide watch, as
/// their bases; the running kernel's kallsyms left to first use for a process watch that names no file;
/// hidden kernel addresses allowed where only user-space writers are seen.
#[test]
fn the_kernel_stage_says_what_the_watch_needs_of_the_symbols() {
    let asked = |r: WatchRequest, machine: &mut FakeHost| {
        let _ = planning(r, machine);
        machine
            .asked
            .borrow_mut()
            .pop()
            .expect("the symbols were asked for")
    };
    let mut machine = FakeHost::new();
    let got = asked(request(&["jiffies", "0xffffffff82000040/8"]), &mut machine);
    let want = SymbolsAsked {
        dwarf: false,
        data_symbols: Some(vec!["jiffies".into(), "0xffffffff82000040/8".into()]),
        later: false,
        user_only: false,
    };
    assert_eq!(got, want);
    let got = asked(request(&["init_uts_ns.name[2]"]), &mut machine);
    assert!(got.dwarf, "{got:?}");
    let got = asked(
        request(&["(struct new_utsname)init_uts_ns.release"]),
        &mut machine,
    );
    assert_eq!(got.data_symbols, Some(vec!["init_uts_ns".into()]));
    assert!(!got.dwarf, "{got:?}");

    let default_kallsyms = |mut r: WatchRequest| {
        r.symbols.kallsyms = crate::config::kernel_source::DEFAULT_KALLSYMS.into();
        r
    };
    let got = asked(
        default_kallsyms(pids(request(&["counter.a[1]"]), &[100])),
        &mut machine,
    );
    let want = SymbolsAsked {
        dwarf: false,
        data_symbols: None,
        later: true,
        user_only: false,
    };
    assert_eq!(got, want);
    let got = asked(pids(request(&["counter"]), &[100]), &mut machine);
    assert!(!got.later, "a --kallsyms FILE is read while planning");
    let mut lines = default_kallsyms(pids(request(&["counter"]), &[100]));
    lines.symbols.lines = true;
    assert!(asked(lines, &mut machine).dwarf);

    let mut machine = FakeHost::unprivileged();
    let got = asked(pids(request(&["counter"]), &[100]), &mut machine);
    assert!(got.user_only, "{got:?}");
}

/// The options stage reads the request whole before it asks the machine anything: a request that
/// contradicts itself is refused for that, whatever the machine would have said about its `-p` process
/// or its `--cpus`, and nothing of the kernel is loaded for a refused request.
#[test]
fn the_request_is_checked_whole_before_the_machine_is_read() {
    let mut machine = FakeHost::new();
    let mut r = pids(request(&["counter"]), &[999]);
    r.percpu_cpu = Some(1);
    r.cpus = Some("7".into());
    let e = refused(r, &mut machine);
    assert_eq!(e.code, ExitCode::Usage);
    assert!(e.to_string().starts_with("--percpu-cpu 1 chooses"), "{e}");
    // Once the request holds together, the machine answers: the pid first, then the CPUs.
    let mut r = pids(request(&["counter"]), &[999]);
    r.cpus = Some("7".into());
    let e = refused(r, &mut machine);
    assert!(e.to_string().starts_with("-p 999: no such process"), "{e}");
    let e = refused(
        {
            let mut r = pids(request(&["counter"]), &[100]);
            r.cpus = Some("7".into());
            r
        },
        &mut machine,
    );
    assert!(
        e.to_string().starts_with("--cpus: cpu 7 does not exist"),
        "{e}"
    );
    assert_eq!(*machine.kallsyms_loads.borrow(), 0);
}

/// A typed target takes its member's offset from `--btf`: another kernel's BTF is refused; the running
/// kernel's is asked for the type, and a machine without BTF says so.
#[test]
fn a_typed_target_takes_its_types_from_the_running_kernels_btf() {
    let typed = "(struct rq)0xffff888100000000.nr_running";
    let mut machine = FakeHost {
        btf_running: Some(false),
        ..FakeHost::new()
    };
    let e = refused(request(&[typed]), &mut machine);
    assert_eq!(e.code, ExitCode::Usage);
    assert!(
        e.to_string()
            .starts_with("--btf /made-up/btf: not the running kernel's BTF"),
        "{e}"
    );
    let e = refused(request(&[typed]), &mut FakeHost::new());
    assert_eq!(e.code, ExitCode::Usage);
    assert_eq!(e.to_string(), "no BTF on this made-up machine");
}

/// The kernel stage's variables are typed from the BTF the host gives: without DWARF, `other.nr_running`
/// is a cast on `other`, watched on its member; `runqueues.nr_running` is a per-CPU variable, whose copies
/// need the per-CPU bases this machine cannot give (exit 4, with the copy's cast to watch by hand).
#[test]
fn variables_are_typed_from_the_hosts_btf() {
    let mut machine = FakeHost {
        btf: Some(kernel_btf()),
        ..FakeHost::new()
    };
    let p = planned(request(&["other.cpu"]), &mut machine);
    let w = &p.watches()[0];
    assert_eq!((w.addr, w.len), (0xffff_ffff_8200_0044, 4));
    let e = refused(request(&["runqueues.nr_running"]), &mut machine);
    assert_eq!(e.code, ExitCode::NotPermitted);
    assert!(
        e.to_string().starts_with(
            "`runqueues.nr_running`: `runqueues` is a per-CPU variable, and the per-CPU bases cannot be had here"
        ),
        "{e}"
    );
    assert!(
        e.to_string()
            .ends_with("'(struct rq)0xADDR.nr_running' (that CPU's per-CPU base plus 0x40)"),
        "{e}"
    );
}

/// A cast target's member is found in the types before any process is asked: one the type does not
/// have is refused before a launched command is started (nothing ran for a target that cannot
/// resolve), and one it has is placed on the base and sized by the member.
#[test]
fn a_members_refusal_comes_before_the_command_is_launched() {
    let mut machine = FakeHost {
        btf: Some(kernel_btf()),
        ..FakeHost::new()
    };
    let mut launched = request(&["(struct rq)0x5000.no_such_field"]);
    launched.command = Some(vec!["./app".into()]);
    let e = refused(launched, &mut machine);
    assert_eq!(e.code, ExitCode::Usage);
    assert!(e.to_string().contains("no_such_field"), "{e}");
    assert!(machine.launched.borrow().is_empty());
    let mut launched = request(&["(struct rq)0x5000.cpu"]);
    launched.command = Some(vec!["./app".into()]);
    let p = planned(launched, &mut machine);
    let w = &p.watches()[0];
    assert_eq!(
        (w.addr, w.len, w.label.as_str()),
        (0x5004, 4, "(struct rq)0x5000.cpu")
    );
    assert_eq!(machine.launched.borrow().len(), 1);
}

/// The plan carries the note that `--tid`/`--comm` match no thread of the watched processes (the fake's
/// one thread is 42 `writer`), and only for running processes with such a condition.
#[test]
fn a_filter_that_matches_no_watched_thread_is_a_note_of_the_plan() {
    let filtered = |tids: &[u32], r: WatchRequest| {
        let mut r = r;
        r.output.tids = tids.to_vec();
        let planned = planning(r, &mut FakeHost::new());
        assert!(planned.plan.is_ok());
        planned.notes
    };
    let notes = filtered(&[99], pids(request(&["counter"]), &[100]));
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with(
            "ksymwatch: note: no thread of process 100 matches --tid 99 now (threads: 42 writer)"
        ),
        "{notes:?}"
    );
    assert!(filtered(&[42], pids(request(&["counter"]), &[100])).is_empty());
    assert!(filtered(&[], pids(request(&["counter"]), &[100])).is_empty());
    assert!(filtered(&[99], request(&["jiffies"])).is_empty());
}

/// Planning prints nothing: its notes come back with the plan, one `ksymwatch: ...` line each, in the
/// order the stages found them (a `--comm` the kernel cuts with the options, a `-p` thread with the
/// processes, the unmatched `--tid`/`--comm` last).
#[test]
fn planning_returns_its_notes_in_the_stages_order() {
    let mut r = pids(request(&["counter"]), &[101]);
    r.output.comms = vec!["a_name_of_twenty_bytes".into()];
    let planned = planning(r, &mut FakeHost::new());
    assert!(planned.plan.is_ok());
    let notes = planned.notes;
    assert_eq!(notes.len(), 3, "{notes:?}");
    assert_eq!(
        notes[0],
        "ksymwatch: note: --comm a_name_of_twenty_bytes: the kernel keeps only the first 15 bytes of \
         a task's name; matching `a_name_of_twent`"
    );
    assert_eq!(
        notes[1],
        "ksymwatch: -p 101 is a thread of process 100 (app): watching every thread of process 100"
    );
    assert!(
        notes[2].starts_with("ksymwatch: note: no thread of process 100 matches"),
        "{notes:?}"
    );
    let quiet = planning(pids(request(&["counter"]), &[100]), &mut FakeHost::new());
    assert!(
        quiet.plan.is_ok() && quiet.notes.is_empty(),
        "{:?}",
        quiet.notes
    );
}

/// A note found before a stage refuses the request comes back with the error, so the command line still
/// says it, before the error: the `-p` thread before a target its process lacks, and an unprivileged
/// user's user-space-only note before its kernel address is refused.
#[test]
fn the_notes_before_a_refusal_come_back_with_it() {
    let planned = planning(pids(request(&["nowhere"]), &[101]), &mut FakeHost::new());
    let e = planned.plan.err().expect("refused");
    assert!(e.to_string().contains("is not in process 100"), "{e}");
    assert_eq!(
        planned.notes,
        ["ksymwatch: -p 101 is a thread of process 100 (app): watching every thread of process 100"]
    );
    let kernel = pids(request(&["0xffffffff82e03e00"]), &[100]);
    let planned = planning(kernel, &mut FakeHost::unprivileged());
    let e = planned.plan.err().expect("refused");
    assert_eq!(e.code, ExitCode::NotPermitted);
    assert_eq!(planned.notes.len(), 1, "{:?}", planned.notes);
    assert!(
        planned.notes[0].starts_with("ksymwatch: note: ")
            && planned.notes[0].contains("watching user-space writers only"),
        "{:?}",
        planned.notes
    );
}

/// What debuginfod delivered as the machine loaded the kernel's symbols is a note of the kernel stage,
/// said before the stage's own refusal that follows it.
#[test]
fn what_debuginfod_delivered_is_a_note_of_the_kernel_stage() {
    let mut machine = FakeHost::new();
    machine.delivered = Some(Delivered {
        build_id: ksymwatch_symbols::BuildId(vec![0xab, 0xcd]),
        fetched: ksymwatch_symbols::debuginfod::Fetched::Cached("/made-up/vmlinux".into()),
    });
    let said =
        "ksymwatch: debuginfod: the running kernel's vmlinux (build-id abcd) from the cache: \
                /made-up/vmlinux";
    let planned = planning(request(&["jiffies"]), &mut machine);
    assert!(planned.plan.is_ok());
    assert_eq!(planned.notes, [said]);
    let mut r = request(&["jiffies"]);
    r.percpu_cpu = Some(1);
    let planned = planning(r, &mut machine);
    let e = planned.plan.err().expect("refused");
    assert!(e.to_string().starts_with("--percpu-cpu 1"), "{e}");
    assert_eq!(planned.notes, [said]);
}

/// `--dump-on`'s tracepoints are found with the kernel's types: one that is not there is refused (exit 2),
/// naming the trigger; one whose group could not be checked is planned, with a note saying so.
#[test]
fn dump_on_tracepoints_are_found_in_the_kernel() {
    let dump_on = |trigger: &str| {
        let mut r = request(&["jiffies"]);
        r.last = Some(5);
        r.dump_on = vec![crate::config::flight::dump_on(trigger).expect("a trigger")];
        r
    };
    let mut host = FakeHost {
        tracefs: Some("/made-up/events".into()),
        ..FakeHost::new()
    };
    let e = refused(dump_on("tracepoint:nope:gone"), &mut host);
    assert_eq!(e.code, ExitCode::Usage);
    assert!(
        e.to_string()
            .contains("--dump-on 'tracepoint:nope:gone': no tracepoint nope:gone"),
        "{e}"
    );
    let planned = planning(
        dump_on("tracepoint:error_report:error_report_end"),
        &mut FakeHost::new(),
    );
    assert!(planned.plan.is_ok());
    assert!(
        planned.notes.iter().any(|n| n.contains(
            "note: --dump-on tracepoint:error_report:error_report_end: group `error_report` not checked"
        )),
        "{:?}",
        planned.notes
    );
}
