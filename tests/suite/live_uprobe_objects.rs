//! `--on uretprobe:`/`uprobe:`: objects as a program allocates them, watched through the same object
//! machinery as the kernel's. The helpers (tests/helpers/widgets.c, gizmo_lib.c, gadgets.cpp, built with
//! -g so their types come from DWARF) make objects at a pace the tracer can arm each one, then store into
//! the watched field a known number of times with known values, then free it: every object must be armed,
//! every store seen exactly once, every free reported. Where this process may not open uprobe events
//! (EACCES/EPERM), the tests skip, saying so.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value;

use crate::util::{self, skip};

/// Stores each helper makes into each object's watched field, with the values 1, 2, 3.
const STORES: u64 = 3;

/// Builds `tests/helpers/SRC` with `compiler` and `flags` into `out` (a file name), once per test binary.
fn build(compiler: &str, src: &str, flags: &[&str], out: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    static BUILD: Mutex<()> = Mutex::new(());
    let dir = DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("ksymwatch-uobjects-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("helper dir");
        d
    });
    let path = dir.join(out);
    let _one = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if !path.exists() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/helpers")
            .join(src);
        let status = Command::new(compiler)
            .args(["-O1", "-g", "-fno-omit-frame-pointer"])
            .args(flags)
            .arg("-o")
            .arg(&path)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| {
                panic!(
                    "{compiler} must be installed to build {}: {e}",
                    src.display()
                )
            });
        assert!(status.success(), "building {}", src.display());
    }
    path
}

pub fn widgets() -> PathBuf {
    build("gcc", "widgets.c", &["-ldl"], "widgets")
}

fn gizmo_lib() -> PathBuf {
    build("gcc", "gizmo_lib.c", &["-shared", "-fPIC"], "libgizmo.so")
}

fn gadgets() -> PathBuf {
    build("g++", "gadgets.cpp", &[], "gadgets")
}

/// True (after a SKIP line) where this process may not open uprobe events, or the kernel has none:
/// ksymwatch's own refusal.
pub(crate) fn refused(err: &str) -> bool {
    let denied = err.contains("Permission denied") || err.contains("not permitted");
    if err.contains("no uprobe PMU") || (err.contains("uprobe") && denied) {
        skip(format!(
            "the kernel refused uprobe events here: {}",
            err.trim()
        ));
        return true;
    }
    false
}

/// `write --json --no-status ARGS -- CMD...` to its end (the command's); `None` after a SKIP line.
fn launched(args: &[&str], cmd: &[&str]) -> Option<Vec<Value>> {
    let mut all = vec!["write", "--json", "--no-status"];
    all.extend_from_slice(args);
    all.push("--");
    all.extend_from_slice(cmd);
    let (code, out, err) = util::run_within(&all, Duration::from_secs(60));
    if code != 0 && refused(&err) {
        return None;
    }
    assert_eq!(code, 0, "{err}");
    Some(util::ndjson(&out))
}

/// [`launched`] `widgets RUN...` watching each widget's `count`: the objects from its `PROBE:...:AT` (`uretprobe`
/// `widget_new`, `uprobe` `widget_init:arg0`), freed by `widget_free`, with `extra` options.
fn widgets_launched(probe: &str, at: &str, extra: &[&str], run: &[&str]) -> Option<Vec<Value>> {
    let exe = widgets().display().to_string();
    let on = format!("{probe}:{exe}:{at}");
    let free = format!("uprobe:{exe}:widget_free:arg0");
    let mut args = vec!["--on", &on, "--free", &free, "(struct widget)$obj.count"];
    args.extend_from_slice(extra);
    let mut cmd = vec![exe.as_str()];
    cmd.extend_from_slice(run);
    launched(&args, &cmd)
}

/// What happened to one object: its address, its hits' values (in order) at store sites in `sym`, and
/// the hit count its free reported (`None`: never freed).
#[derive(Debug)]
struct Seen {
    addr: String,
    values: Vec<String>,
    freed_hits: Option<u64>,
}

/// Every armed object of `records`, by index. Only hits whose instruction is in function `sym` count
/// towards `values` (an allocator's own `memset` of a new object is a store too).
fn objects(records: &[Value], sym: &str) -> BTreeMap<u64, Seen> {
    let mut seen: BTreeMap<u64, Seen> = BTreeMap::new();
    for r in records {
        match r["type"].as_str() {
            Some("object_armed") => {
                seen.insert(
                    r["index"].as_u64().expect("index"),
                    Seen {
                        addr: r["addr"].as_str().expect("addr").to_string(),
                        values: Vec::new(),
                        freed_hits: None,
                    },
                );
            }
            Some("hit") if r["ip"]["sym"] == sym => {
                let target = r["target"].as_str().expect("target");
                let index = target
                    .rsplit_once('#')
                    .and_then(|(_, i)| i.parse::<u64>().ok())
                    .expect("an object's hit names it");
                let o = seen.get_mut(&index).expect("a hit on an armed object");
                assert!(target.contains(&o.addr), "{r}");
                o.values
                    .push(r["value"].as_str().unwrap_or("?").to_string());
            }
            Some("object_freed") => {
                let index = r["index"].as_u64().expect("index");
                if let Some(o) = seen.get_mut(&index) {
                    o.freed_hits = r["hits"].as_u64();
                }
            }
            _ => {}
        }
    }
    seen
}

/// Each of `n` objects armed (no other), each store seen once with its value, each freed with its hits.
fn each_armed_stored_and_freed(records: &[Value], sym: &str, n: u64) {
    let summary = &records.last().expect("summary")["objects"];
    assert_eq!(summary["seen"], n, "{summary}");
    armed_ones_stored_and_freed(records, sym, n);
}

/// Each of the `armed` objects armed, each store of theirs seen once with its value, each freed with its
/// hits (the objects seen are the caller's to count).
fn armed_ones_stored_and_freed(records: &[Value], sym: &str, armed: u64) {
    let summary = &records.last().expect("summary")["objects"];
    assert_eq!(summary["armed"], armed, "{summary}");
    assert_eq!(summary["freed"], armed, "{summary}");
    let seen = objects(records, sym);
    assert_eq!(seen.len() as u64, armed, "{seen:?}");
    let want: Vec<String> = (1..=STORES).map(|v| format!("0x{v:x}")).collect();
    for (index, o) in &seen {
        assert_eq!(o.values, want, "object {index}: {o:?}");
        assert!(
            o.freed_hits.is_some_and(|h| h >= STORES),
            "object {index}: {o:?}"
        );
    }
    assert!(summary["gap_median_ns"].as_u64().is_some(), "{summary}");
}

/// [`launched`], then its header's `objects` line says each of `says` and [`each_armed_stored_and_freed`]
/// holds for `n` objects stored in `sym`; the records for more checks, `None` after a SKIP line.
fn launched_each(
    args: &[&str],
    cmd: &[&str],
    says: &[&str],
    sym: &str,
    n: u64,
) -> Option<Vec<Value>> {
    let records = launched(args, cmd)?;
    util::objects_header(&records, says);
    each_armed_stored_and_freed(&records, sym, n);
    Some(records)
}

// A program's own allocator and free function, launched: each widget armed before its stores, each of
// the three stores of `count` reported once, each freed by widget_free with its hits.
live_test!(a_programs_own_allocator_and_free_function, {
    let Some(records) = widgets_launched("uretprobe", "widget_new", &[], &["go", "10"]) else {
        return;
    };
    let header = util::objects_header(&records, &["freed by widget_free"]);
    assert!(
        !header.contains("not known"),
        "launched: every object is known: {header}"
    );
    each_armed_stored_and_freed(&records, "go", 10);

    // The text summary: the chains are the target's (not named after the first object a breakpoint slot
    // held), and each object's hits are listed.
    let exe_text = widgets().display().to_string();
    let on = format!("uretprobe:{exe_text}:widget_new");
    let free = format!("uprobe:{exe_text}:widget_free:arg0");
    let (code, out, err) = util::run_within(
        &[
            "write",
            "--quiet",
            "--no-status",
            "--on",
            &on,
            "--free",
            &free,
            "(struct widget)$obj.count",
            "--",
            &exe_text,
            "go",
            "10",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, 0, "{err}");
    let summary = &out[out.find("# summary: 30 hits").expect(&out)..];
    assert!(
        summary.contains("target=(struct widget)$obj.count  comm:") && !summary.contains(".count#"),
        "{summary}"
    );
    let by_object = &summary[summary
        .find("# hits by object (10 armed, 0 with no hit):\n")
        .expect(summary)..];
    let objects = by_object
        .lines()
        .skip(1)
        .take_while(|l| l.len() > 1)
        .filter(|l| l.starts_with("#        3  10.0%  #"))
        .count();
    assert_eq!(objects, 10, "{summary}");
});

/// Starts `helper` (it writes "ready PID"), runs `write --json --no-status ARGS -p PID` on it, sends each of
/// `commands` once armed (waiting for its "done N"), stops the tracer as Ctrl-C does; the records, or
/// `None` after a SKIP line where uprobe events are refused.
fn watch_running(helper: &Path, args: &[&str], commands: &[&str]) -> Option<Vec<Value>> {
    let mut helper = Command::new(helper)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the helper");
    let mut stdin = helper.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(helper.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("ready");
    let pid = helper.id().to_string();
    let mut all = vec!["write", "--json", "--no-status"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-p", &pid]);
    let mut child = util::spawn(&all);
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut header = String::new();
    loop {
        let mut l = String::new();
        if out.read_line(&mut l).unwrap_or(0) == 0 {
            let err = stderr_of(child);
            let _ = helper.kill();
            let _ = helper.wait();
            if refused(&err) {
                return None;
            }
            panic!("ksymwatch ended before arming: {err}");
        }
        header.push_str(&l);
        if l.contains("\"type\":\"armed\"") {
            break;
        }
    }
    for c in commands {
        writeln!(stdin, "{c}").expect("command");
        line.clear();
        stdout.read_line(&mut line).expect("done");
        assert!(line.starts_with("done "), "{c}: {line}");
    }
    std::thread::sleep(Duration::from_millis(100));
    // SAFETY: our own child, signalled to stop as Ctrl-C would.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).expect("stdout");
    let status = child.wait().expect("ksymwatch");
    assert!(status.success(), "{status}");
    drop(stdin);
    let _ = helper.wait();
    Some(util::ndjson(&(header + &rest)))
}

/// ksymwatch's stderr once it has ended (bounded).
fn stderr_of(mut child: std::process::Child) -> String {
    util::wait_within(&mut child, Duration::from_secs(30));
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    err
}

// libc's malloc in a running process (-p): only the 64-byte requests (struct widget's size) are taken, not
// the 24- and 200-byte ones between them; free ends each.
live_test!(libc_malloc_chosen_by_size_in_a_running_process, {
    let Some(records) = watch_running(
        &widgets(),
        &["--on", "uretprobe:libc:malloc", "(struct widget)$obj.count"],
        &["go 8"],
    ) else {
        return;
    };
    util::objects_header(
        &records,
        &[
            "64-byte requests",
            "freed by free",
            "objects allocated before the start are not known",
        ],
    );
    each_armed_stored_and_freed(&records, "go", 8);
});

// Every thread's calls are seen, each once: tests/helpers/allocs.c makes 50 objects on its second thread
// (started before the watch) and 30 on its main thread, each freed at once; every one is seen (armed, or
// freed before it could be), none twice.
live_test!(every_threads_allocations_are_seen_once, {
    let allocs = util::helper_with("allocs", &["-pthread"]);
    let on = format!("uretprobe:{}:make_widget", allocs.display());
    let Some(records) = watch_running(
        &allocs,
        &["--on", &on, "--free", "uprobe:libc:free:arg0", "$obj/1"],
        &["tgo 50", "go 30"],
    ) else {
        return;
    };
    let o = &records.last().expect("summary")["objects"];
    assert_eq!(o["seen"], 80, "{o}");
    assert_eq!(
        o["armed"].as_u64().unwrap() + o["freed_unarmed"].as_u64().unwrap(),
        80,
        "{o}"
    );
    assert_eq!(o["armed"], o["freed"], "every armed one freed: {o}");
});

// C++ objects from `new` (libstdc++'s operator new, size 56 taken; a std::string's 101 bytes not),
// deleted by operator delete.
live_test!(cpp_new_allocated_objects, {
    let exe = gadgets();
    let exe_text = exe.display().to_string();
    launched_each(
        &[
            "--on",
            "uretprobe:libstdc++:_Znwm",
            "(struct Gadget)$obj.hits",
        ],
        &[&exe_text, "go", "6"],
        &["56-byte requests"],
        "go(long)",
        6,
    );
});

// A library the program loads with dlopen after its start: the probe is on the file (by path), so it is
// placed when the library is mapped, and its own struct comes from its DWARF.
live_test!(a_library_loaded_with_dlopen_after_the_start, {
    let exe = widgets().display().to_string();
    let lib = gizmo_lib().display().to_string();
    let on = format!("uretprobe:{lib}:gizmo_new");
    let free = format!("uprobe:{lib}:gizmo_free:arg0");
    launched_each(
        &["--on", &on, "--free", &free, "(struct gizmo)$obj.level"],
        &[&exe, "lib", "5", &lib],
        &[],
        "gizmo_cycle",
        5,
    );
});

// A program that forks while its object is armed: the child inherits the breakpoints and stores into its
// copy of the object, at the same address in its own memory. Those stores are not the object's: each
// object has the parent's three stores (1, 2, 3) only, and the children's nine are filtered.
live_test!(a_forked_childs_stores_are_not_its_parents_objects, {
    let forks = util::helper_with("forks", &["-g"]);
    let exe = forks.display().to_string();
    let Some(records) = launched_each(
        &[
            "--on",
            "uretprobe:libc:malloc",
            "(struct parcel)$obj.weight",
        ],
        &[&exe, "3"],
        &[],
        "weigh",
        3,
    ) else {
        return;
    };
    let summary = each_object_has_its_stores_only(&records);
    assert_eq!(summary["filtered"], 3 * STORES, "{summary}");
});

// Objects freed and their memory reused at once, by four threads at the same time: glibc's free writes
// its tcache key over the watched field and the next malloc clears it, often before the tracer has read
// the free. Those stores are writes after a free, never hits of the freed object: each armed object has
// exactly its three stores, and the run exactly 3 per armed object. Each thread holds its object for
// the whole of its pause, so the four need four slots: where another process holds a debug register
// (the header then names three slots), a thread's objects find every slot busy, and they are skipped and
// counted, never armed: every object is armed or counted skipped.
live_test!(stores_after_a_free_are_never_the_freed_objects, {
    const THREADS: u64 = 4;
    const OBJECTS: u64 = THREADS * 6;
    let reuse = util::helper_with("reuse", &["-g", "-pthread"]);
    let exe = reuse.display().to_string();
    let Some(records) = launched(
        &["--on", "uretprobe:libc:malloc", "(struct slip)$obj.mark"],
        &[&exe, &THREADS.to_string(), &(OBJECTS / THREADS).to_string()],
    ) else {
        return;
    };
    let slots = records[0]["targets"].as_array().expect("targets").len() as u64;
    let objects = &records.last().expect("summary")["objects"];
    let (armed, skipped) = (
        objects["armed"].as_u64().expect("armed"),
        objects["skipped"].as_u64().expect("skipped"),
    );
    assert_eq!(objects["seen"], OBJECTS, "{objects}");
    assert_eq!(armed + skipped, OBJECTS, "{objects}");
    if slots >= THREADS {
        assert_eq!(skipped, 0, "{slots} slots for {THREADS} threads: {objects}");
    } else {
        eprintln!(
            "note: {slots} free debug registers for {THREADS} threads: {skipped} objects skipped, counted"
        );
    }
    armed_ones_stored_and_freed(&records, "stamp", armed);
    let summary = each_object_has_its_stores_only(&records);
    for r in &records {
        if r["type"] == "object_freed" {
            assert_eq!(r["hits"], STORES, "{r}");
        }
    }
    assert_eq!(summary["hits"], armed * STORES, "{summary}");
});

/// The summary, after checking that each armed object's hits are exactly its [`STORES`] stores.
fn each_object_has_its_stores_only(records: &[Value]) -> &Value {
    let summary = records.last().expect("summary");
    for o in summary["objects"]["by_object"]
        .as_array()
        .expect("by_object")
    {
        assert_eq!(o["hits"], STORES, "{o}");
    }
    summary
}

/// `write ARGS` must fail with exit 2 before arming anything, its one error line containing each of `says`.
fn refused_before_arming(args: &[&str], says: &[&str]) {
    let mut all = vec!["write"];
    all.extend_from_slice(args);
    let (code, out, err) = util::run_within(&all, Duration::from_secs(60));
    assert_eq!(code, 2, "{args:?}: {err}");
    assert!(!out.contains("armed"), "{args:?}: nothing is armed: {out}");
    for s in says {
        assert!(err.contains(s), "{args:?}: `{s}` not in: {err}");
    }
}

/// A copy of the widgets helper without its symbol table.
fn stripped_widgets() -> PathBuf {
    let out = widgets().with_file_name("widgets-stripped");
    static STRIP: Mutex<()> = Mutex::new(());
    let _one = STRIP.lock().unwrap_or_else(|e| e.into_inner());
    if !out.exists() {
        let status = Command::new("objcopy")
            .args(["--strip-all"])
            .arg(widgets())
            .arg(&out)
            .status()
            .expect("objcopy (binutils) strips the helper");
        assert!(status.success());
    }
    out
}

// Uprobes that cannot be placed, and targets that cannot be resolved, are exit 2 with the way out, before
// anything is armed (a launched command is killed before its first instruction).
#[test]
fn unplaceable_user_sources_are_refused_before_arming() {
    let exe = widgets().display().to_string();
    let stripped = stripped_widgets().display().to_string();
    refused_before_arming(
        &[
            "--on",
            &format!("uretprobe:{stripped}:widget_new"),
            "$obj+48/4",
            "--",
            &stripped,
            "go",
            "1",
        ],
        &["stripped", "debug symbols"],
    );
    refused_before_arming(
        &[
            "--on",
            &format!("uretprobe:{exe}:widget_nwe"),
            "$obj+48/4",
            "--",
            &exe,
            "go",
            "1",
        ],
        &["no function `widget_nwe`", "nearest: widget_new"],
    );
    // Named, not by path, a library the program loads later is not known before it runs.
    refused_before_arming(
        &[
            "--on",
            "uretprobe:libgizmo:gizmo_new",
            "$obj+8/8",
            "--",
            &exe,
            "go",
            "1",
        ],
        &["does not load `libgizmo`", "give the library's path"],
    );
    refused_before_arming(
        &[
            "--on",
            &format!("uretprobe:{exe}:widget_new"),
            "(struct nope)$obj.count",
            "--",
            &exe,
            "go",
            "1",
        ],
        &["describes no `struct nope`", "$obj+OFFSET/LEN"],
    );
    refused_before_arming(
        &[
            "--on",
            &format!("uretprobe:{exe}:widget_new"),
            "(struct widget)$obj.cnt",
            "--",
            &exe,
            "go",
            "1",
        ],
        &["no field `cnt`", "count"],
    );
    refused_before_arming(
        &[
            "--on",
            &format!("uretprobe:{exe}:widget_new"),
            "--free",
            &format!("uprobe:{exe}:widget_gone:arg0"),
            "(struct widget)$obj.count",
            "--",
            &exe,
            "go",
            "1",
        ],
        &["--free", "no function `widget_gone`"],
    );
}

// A user-space source needs one process; --free needs a user-space source and its own form.
#[test]
fn user_sources_need_a_process_and_free_its_form() {
    refused_before_arming(
        &["--on", "uretprobe:libc:malloc", "(struct widget)$obj.count"],
        &["give -p PID", "-- CMD"],
    );
    refused_before_arming(
        &["--free", "uprobe:libc:free:arg0", "0x1000"],
        &["--free", "add --on uretprobe:PATH:FUNC"],
    );
    refused_before_arming(
        &[
            "--on",
            "uretprobe:libc:malloc",
            "--free",
            "uprobe:libc:free",
            "$obj/8",
            "--",
            "true",
        ],
        &["--free `uprobe:libc:free`", "uprobe:PATH:FUNC:argN"],
    );
    refused_before_arming(
        &["--on", "uprobe:libc:free:arg7", "$obj/8", "--", "true"],
        &["at most arg5"],
    );
    let me = std::process::id().to_string();
    refused_before_arming(
        &[
            "--on",
            "uretprobe:libc:malloc",
            "$obj/8",
            "-p",
            "1",
            "-p",
            &me,
        ],
        &["one process at a time"],
    );
}

// With the malloc family, realloc's result is a new object (a 32-byte block grown to a widget's 64 bytes)
// and realloc ends the one it is given (grown again to 200 bytes): each armed, stored, ended.
live_test!(realloc_ends_one_object_and_starts_another, {
    let exe = widgets().display().to_string();
    launched_each(
        &["--on", "uretprobe:libc:malloc", "(struct widget)$obj.count"],
        &[&exe, "regrow", "5"],
        &["realloc's new objects taken too"],
        "regrow",
        5,
    );
});

// posix_memalign's object is stored through its argument 0 and taken only on a return of 0: each
// widget-sized one armed, its stores seen once, freed by free; the failing call (its out-pointer holding
// a live block) and the 24-byte one are not objects.
live_test!(
    posix_memalign_objects_are_taken_through_their_out_pointer,
    {
        let exe = widgets().display().to_string();
        launched_each(
            &[
                "--on",
                "uretprobe:libc:posix_memalign",
                "(struct widget)$obj.count",
            ],
            &[&exe, "aligned", "5"],
            &["freed by free"],
            "aligned",
            5,
        );
    }
);

// Eight widgets alive at once, more than the debug registers: without --rotate the first ones are armed
// and the rest skipped; with it each new one evicts the oldest, so the last ones are armed when the
// stores come (and only theirs are reported).
live_test!(more_live_objects_than_registers_skip_or_rotate, {
    for rotate in [false, true] {
        let extra: &[&str] = if rotate { &["--rotate"] } else { &[] };
        let Some(records) = widgets_launched("uretprobe", "widget_new", extra, &["hold", "8"])
        else {
            return;
        };
        let slots = records[0]["targets"].as_array().expect("the slots").len() as u64;
        assert!((1..8).contains(&slots), "{}", records[0]);
        let o = &records.last().expect("summary")["objects"];
        assert_eq!(o["seen"], 8, "{o}");
        let seen = objects(&records, "hold");
        let stored: Vec<u64> = seen
            .iter()
            .filter(|(_, s)| !s.values.is_empty())
            .map(|(i, _)| *i)
            .collect();
        if rotate {
            assert_eq!(
                (o["armed"].as_u64(), o["evicted"].as_u64()),
                (Some(8), Some(8 - slots)),
                "{o}"
            );
            assert_eq!(
                stored,
                (8 - slots..8).collect::<Vec<_>>(),
                "the last armed: {o}"
            );
        } else {
            assert_eq!(
                (o["armed"].as_u64(), o["skipped"].as_u64()),
                (Some(slots), Some(8 - slots)),
                "{o}"
            );
            assert_eq!(
                stored,
                (0..slots).collect::<Vec<_>>(),
                "the first armed: {o}"
            );
        }
        for i in &stored {
            assert_eq!(seen[i].values, ["0x1", "0x2", "0x3"], "object {i}");
        }
    }
});

// An argument at a function's entry is the object (`uprobe:PATH:FUNC:argN`): widget_init's argument 0,
// each armed, stored, freed.
live_test!(an_argument_at_a_functions_entry_is_the_object, {
    let Some(records) = widgets_launched("uprobe", "widget_init:arg0", &[], &["go", "5"]) else {
        return;
    };
    each_armed_stored_and_freed(&records, "go", 5);
});
