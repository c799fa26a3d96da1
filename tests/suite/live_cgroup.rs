//! `--cgroup` against the real cgroup v2 hierarchy: a child cgroup made for the test, a helper moved into
//! it, and the id found from the helper's `/proc/PID/cgroup` (no BPF) checked against the directory's
//! inode and against the kernel's own file handle for it (`name_to_handle_at`, which encodes the kernfs
//! node id `bpf_get_current_cgroup_id()` reports); then two identical writers storing into one address,
//! one of them inside the cgroup, watched with `--cgroup`: only the inside one's hits are kept.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use ksymwatch::host::cgroup::{CgroupError, Hierarchy, Names};

use std::time::Duration;

use crate::util::{self, helper_with, live, skip, Tracer, Writer};

/// A helper process, killed and reaped on drop (before its cgroup's drop removes the cgroup).
struct Helper(Child);

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `struct file_handle` with room for a kernfs handle (8 bytes: the node id).
#[repr(C)]
struct Handle {
    bytes: u32,
    kind: i32,
    data: [u8; 64],
}

/// The kernel's file handle of `path`: (type, bytes).
fn file_handle(path: &std::path::Path) -> std::io::Result<(i32, Vec<u8>)> {
    let c = CString::new(path.as_os_str().as_bytes()).expect("no NUL in a cgroup path");
    let mut h = Handle {
        bytes: 64,
        kind: 0,
        data: [0; 64],
    };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `c` is NUL-terminated and lives through the call; `h` is a file_handle whose `bytes` says
    // how much room follows it; `mount_id` is a writable int.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            libc::AT_FDCWD,
            c.as_ptr(),
            &mut h as *mut Handle,
            &mut mount_id as *mut libc::c_int,
            0,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((h.kind, h.data[..h.bytes as usize].to_vec()))
}

#[test]
#[ignore = "live: makes a cgroup and moves a process into it"]
fn a_helper_moved_into_a_child_cgroup_is_found_there_by_id() {
    let Some(_lock) = live() else { return };
    let Some(cg) = TestCgroup::make("test") else {
        return;
    };
    let h = hierarchy().expect("found by TestCgroup::make");
    let child = Helper(
        Command::new(helper_with("allocs", &["-pthread"]))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("start the helper"),
    );
    let pid = child.0.id();
    let before = h.of_process(pid).expect("the helper's cgroup");
    cg.add(pid);

    let by_path = h.resolve(&cg.path).expect("the new cgroup");
    let by_process = h
        .of_process(pid)
        .expect("the helper's cgroup after the move");
    assert_eq!(by_process, by_path);
    assert_ne!(before.id, by_path.id, "the move changed its cgroup");
    assert_eq!(by_path.id, cg.id());
    assert_eq!(
        h.resolve(&cg.dir.display().to_string()).unwrap().id,
        by_path.id
    );

    // The kernel's own handle for the directory: kernfs encodes the node id, 8 bytes, native-endian.
    let (kind, bytes) = file_handle(&cg.dir).expect("name_to_handle_at on the cgroup");
    eprintln!(
        "cgroup {} (pid {pid}): id {} by /proc/{pid}/cgroup and stat; file handle type {kind}, bytes {bytes:02x?}",
        by_path.path, by_path.id
    );
    let handle_id = u64::from_ne_bytes(bytes[..8].try_into().expect("an 8-byte kernfs handle"));
    assert_eq!(handle_id, by_path.id);

    let mut names = Names::new(h.clone());
    assert_eq!(names.get(by_path.id), Some(by_path.path.as_str()));
    assert_eq!(names.container(by_path.id), None);
}

/// The cgroup v2 hierarchy; `None` (skipped, saying why) where none is mounted.
fn hierarchy() -> Option<Hierarchy> {
    match Hierarchy::find() {
        Ok(h) => Some(h),
        Err(CgroupError::NoHierarchy) => {
            skip("no cgroup v2 hierarchy is mounted");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// A child cgroup of the v2 hierarchy made for one test, removed on drop (after whatever was moved into it
/// ended: drop the processes first). `None` (skipped, saying why) where there is no hierarchy or no
/// right to make one.
struct TestCgroup {
    dir: PathBuf,
    /// Its path in the hierarchy (`/ksymwatch-...`).
    path: String,
}

impl TestCgroup {
    fn make(tag: &str) -> Option<TestCgroup> {
        let h = hierarchy()?;
        let name = format!("ksymwatch-{tag}-{}", std::process::id());
        let dir = PathBuf::from(&h.mount.point).join(&name);
        if let Err(e) = std::fs::create_dir(&dir) {
            skip(format_args!(
                "cannot make a cgroup under {}: {e}",
                h.mount.point
            ));
            return None;
        }
        Some(TestCgroup {
            dir,
            path: format!("/{name}"),
        })
    }

    /// A cgroup made below this one (drop it first).
    fn child(&self, name: &str) -> TestCgroup {
        let dir = self.dir.join(name);
        std::fs::create_dir(&dir).expect("make a child cgroup");
        TestCgroup {
            dir,
            path: format!("{}/{name}", self.path),
        }
    }

    /// Its id: the directory's inode.
    fn id(&self) -> u64 {
        std::fs::metadata(&self.dir).expect("the cgroup").ino()
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .expect("move into the cgroup");
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // A cgroup is removable once its last process has been reaped; the writers' drops wait for theirs.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!("could not remove the test cgroup {}", self.dir.display());
    }
}

/// The machine-wide lock ([`live`]) and a [`TestCgroup`] tagged `tag`; `None` after a SKIP line.
fn live_cgroup(tag: &str) -> Option<(util::LiveLock, TestCgroup)> {
    let lock = live()?;
    let cg = TestCgroup::make(tag)?;
    Some((lock, cg))
}

/// The writer helper with address randomization off ([`Writer::start_fixed`]), to store `value` `stores`
/// times once told to go: every such writer's global is at one address.
fn writer(stores: usize, value: u8) -> Writer {
    Writer::start_fixed(&["write", &stores.to_string(), &value.to_string()])
}

/// Stops a `--json` watch as Ctrl-C does, within `secs`: (exit code, its records, stderr).
fn interrupted(t: Tracer, secs: u64) -> (i32, Vec<serde_json::Value>, String) {
    let (code, out, err) = t.interrupt(Duration::from_secs(secs));
    (code, util::ndjson(&out), err)
}

/// [`live_test!`] for a `--cgroup` test with a cgroup of its own: `#[test]`, ignored unless asked for, its
/// body run holding the machine-wide lock with `$cg` the [`TestCgroup`] tagged `$tag` (skipped, saying
/// why, where none can be made).
macro_rules! live_cgroup_test {
    ($name:ident, $tag:literal, $cg:ident, $body:block) => {
        #[test]
        #[ignore = "live: makes cgroups and arms hardware breakpoints"]
        fn $name() {
            let Some((_lock, $cg)) = live_cgroup($tag) else {
                return;
            };
            $body
        }
    };
}

/// Stores each writer makes in the test below.
const STORES: usize = 200;

/// The hits of `pid` at a user-space ip (exec's zeroing of .bss, by the kernel, comes before arming but
/// is left out all the same).
fn user_hits(records: &[serde_json::Value], pid: u32) -> usize {
    util::hits_of_pid(records, pid)
        .into_iter()
        .filter(|v| {
            v["ip"]["addr"]
                .as_str()
                .is_some_and(|a| !a.starts_with("0xffff"))
        })
        .count()
}

// Two identical writers with their global at one address (no address randomization), one of them moved
// into a cgroup the test makes: a system-wide watch with `--cgroup` keeps only the inside one's stores,
// every one of them, and counts the other's as filtered; with `-p` the outside writer's, nothing is kept.
live_cgroup_test!(
    only_the_writer_inside_the_cgroup_is_kept,
    "two-writers",
    cg,
    {
        let mut inside = writer(STORES, 0);
        let mut outside = writer(STORES, 1);
        assert_eq!(inside.addr, outside.addr, "one address for both");
        cg.add(inside.pid);
        let target = inside.target();

        let t = Tracer::write_json(&["--cgroup", &cg.path, "--summary", &target]);
        outside.go();
        inside.go();
        let (_, records, err) = interrupted(t, 30);
        assert_eq!(user_hits(&records, inside.pid), STORES, "{err}");
        assert_eq!(user_hits(&records, outside.pid), 0, "{err}");
        assert!(
            records
                .iter()
                .filter(|v| v["type"] == "hit")
                .all(|v| v["pid"] == inside.pid),
            "only the inside writer's hits"
        );
        // Each hit names the inside writer's cgroup, by the id the kernel read and its path.
        let id = std::fs::metadata(&cg.dir).expect("the cgroup").ino();
        for v in records.iter().filter(|v| v["type"] == "hit") {
            assert_eq!(v["cgroup_id"], id, "{v}");
            assert_eq!(v["cgroup"], cg.path.as_str(), "{v}");
            assert!(v.get("container_id").is_none(), "{v}");
        }
        let summary = util::summary_record(&records);
        assert!(
            summary["filtered"].as_u64().unwrap_or(0) >= STORES as u64,
            "the outside writer's stores are counted as filtered: {summary}"
        );
        let by_cgroup = summary["by_cgroup"].as_array().expect("by_cgroup");
        assert_eq!(by_cgroup.len(), 1, "{summary}");
        assert_eq!(by_cgroup[0]["path"], cg.path.as_str());
        assert_eq!(
            by_cgroup[0]["count"].as_u64(),
            summary["hits"].as_u64(),
            "{summary}"
        );

        // `-p` narrows further: the outside writer's own watch keeps nothing of it (fresh writers: each does
        // one round of stores).
        drop((inside, outside));
        let mut inside = writer(STORES, 0);
        let mut outside = writer(STORES, 1);
        cg.add(inside.pid);
        let t = Tracer::write_json(&[
            "--cgroup",
            &cg.dir.display().to_string(),
            "-p",
            &outside.pid.to_string(),
            &target,
        ]);
        outside.go();
        inside.go();
        let (_, records, err) = interrupted(t, 30);
        assert_eq!(
            records.iter().filter(|v| v["type"] == "hit").count(),
            0,
            "{err}"
        );
        drop((inside, outside));
    }
);

// `--per-thread` and `--remove-on-exec` put the hit program on every thread's events, and that program
// tests the writer's cgroup as the per-CPU one does: two identical writers watched by pid, one of them in
// the chosen cgroup, keep only its stores, every one, each naming its cgroup, the other's counted as
// filtered. Where the kernel cannot tell a thread's program which event fired, such a watch takes perf
// samples and `--cgroup` is refused (exit 4) instead, naming what the kernel lacks.
live_cgroup_test!(
    per_thread_events_keep_only_the_writer_inside_the_cgroup,
    "per-thread",
    cg,
    {
        let id = cg.id();
        for flag in ["--per-thread", "--remove-on-exec"] {
            let mut inside = writer(STORES, 0);
            let mut outside = writer(STORES, 1);
            assert_eq!(inside.addr, outside.addr, "one address for both");
            cg.add(inside.pid);
            let (pi, po) = (inside.pid.to_string(), outside.pid.to_string());
            let target = inside.target();
            let watch = [
                "--cgroup",
                &cg.path,
                flag,
                "--summary",
                "-p",
                &pi,
                "-p",
                &po,
                &target,
            ];
            if ksymwatch::perf::bpf::repeats::find().is_none() {
                let mut all = vec!["write"];
                all.extend_from_slice(&watch);
                util::rejects(&all, 4, &["which event fired", "drop --per-thread"]);
                skip("this kernel cannot tell a thread's program which event fired");
                return;
            }
            let t = Tracer::write_json(&watch);
            outside.go();
            inside.go();
            let (_, records, err) = interrupted(t, 30);
            assert_eq!(user_hits(&records, inside.pid), STORES, "{flag}: {err}");
            assert_eq!(
                util::hits_of_pid(&records, outside.pid).len(),
                0,
                "{flag}: {err}"
            );
            let hits: Vec<_> = records.iter().filter(|v| v["type"] == "hit").collect();
            assert!(!hits.is_empty(), "{flag}: {err}");
            for v in hits {
                assert_eq!(v["pid"], inside.pid, "{flag}: {v}");
                assert_eq!(v["cgroup_id"], id, "{flag}: {v}");
                assert_eq!(v["cgroup"], cg.path.as_str(), "{flag}: {v}");
            }
            let summary = util::summary_record(&records);
            assert!(
                summary["filtered"].as_u64().unwrap_or(0) >= STORES as u64,
                "{flag}: the outside writer's stores are counted as filtered: {summary}"
            );
            drop((inside, outside));
        }
    }
);

// A cgroup that does not exist, a file where a cgroup directory should be, a path out of the hierarchy:
// exit 2 before anything is armed, the message naming the fix (on a machine without cgroup v2, the
// missing hierarchy, with its fix).
#[test]
fn a_missing_cgroup_is_refused_before_arming() {
    let target = "0x601040/8";
    if Hierarchy::find().is_err() {
        util::rejects(
            &["write", "--cgroup", "/x", target],
            2,
            &["--cgroup /x", "cgroup2"],
        );
        return;
    }
    util::rejects(
        &["write", "--cgroup", "/ksymwatch-no-such-cgroup", target],
        2,
        &[
            "--cgroup /ksymwatch-no-such-cgroup",
            "no cgroup",
            "/proc/PID/cgroup",
        ],
    );
    util::rejects(
        &["write", "--cgroup", "/cgroup.procs", target],
        2,
        &["--cgroup /cgroup.procs", "no cgroup"],
    );
    util::rejects(
        &["write", "--cgroup", "/../etc", target],
        2,
        &["leaves the cgroup hierarchy"],
    );
    // On a hybrid machine, a v1 controller's directory is not the unified hierarchy's.
    let h = Hierarchy::find().expect("found above");
    let v1 = std::path::Path::new("/sys/fs/cgroup/memory");
    if h.mount.point != "/sys/fs/cgroup" && v1.is_dir() {
        util::rejects(
            &["write", "--cgroup", "/sys/fs/cgroup/memory", target],
            2,
            &["not in the cgroup v2 hierarchy", &h.mount.point],
        );
    }
}

/// Stores of the writer inside the cgroup when the ring is made to fall behind.
const FLOOD: usize = 100_000;

// A one-page ring the reader cannot keep up with: most records are dropped and the summary's counts come
// from the kernel's totals, so the by-cgroup count must too. The inside writer's every store is in its
// cgroup's count, the outside writer's in none, whatever was printed.
live_cgroup_test!(
    by_cgroup_counts_every_store_when_the_ring_drops_records,
    "flood",
    cg,
    {
        let mut inside = writer(FLOOD, 0);
        let mut outside = writer(20_000, 1);
        assert_eq!(inside.addr, outside.addr, "one address for both");
        cg.add(inside.pid);
        let t = Tracer::write_json(&[
            "--cgroup",
            &cg.path,
            "--summary",
            "--buffer-pages",
            "1",
            &inside.target(),
        ]);
        outside.go();
        inside.go();
        let (_, records, err) = interrupted(t, 60);
        drop((inside, outside));
        let summary = util::summary_record(&records);
        if summary["unprinted"].as_u64().unwrap_or(0) == 0 {
            skip("a one-page ring dropped nothing: the totals were not needed");
            return;
        }
        assert_eq!(summary["lost"].as_u64().unwrap_or(0), 0, "{summary}");
        assert_eq!(
            summary["hits"].as_u64(),
            Some(FLOOD as u64),
            "{summary}\n{err}"
        );
        let by_cgroup = summary["by_cgroup"].as_array().expect("by_cgroup");
        assert_eq!(by_cgroup.len(), 1, "{summary}");
        assert_eq!(by_cgroup[0]["path"], cg.path.as_str(), "{summary}");
        assert_eq!(
            by_cgroup[0]["count"].as_u64(),
            Some(FLOOD as u64),
            "{summary}"
        );
    }
);

// `--dry-run` names each chosen cgroup as planning found it: its path in the hierarchy, its id and its
// directory, once each however it was given (absolute, relative, by directory), a nested one too.
#[test]
fn a_dry_run_names_each_chosen_cgroup_by_path_and_id() {
    let Some(cg) = TestCgroup::make("dry-run") else {
        return;
    };
    let sub = cg.child("sub");
    let pid = std::process::id().to_string();
    let relative = cg.path.trim_start_matches('/');
    let (code, out, err) = util::run(&[
        "write",
        "--dry-run",
        "--cgroup",
        &cg.path,
        "--cgroup",
        relative,
        "--cgroup",
        &sub.dir.display().to_string(),
        "0x7000/8",
        "-p",
        &pid,
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("# cgroup: "))
        .collect();
    let line = |c: &TestCgroup| {
        format!(
            "# cgroup: {} (id {}, {}): writers in it or below only",
            c.path,
            c.id(),
            c.dir.display()
        )
    };
    assert_eq!(lines, [line(&cg), line(&sub)], "{out}");
    assert!(out.ends_with("# dry run: nothing armed\n"), "{out}");
    // A per-thread watch takes them too where its program runs on every thread's events.
    if ksymwatch::perf::bpf::repeats::find().is_some() {
        let (code, out, err) = util::run(&[
            "write",
            "--dry-run",
            "--per-thread",
            "--cgroup",
            &cg.path,
            "0x7000/8",
            "-p",
            &pid,
        ]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains(&line(&cg)), "{out}");
        assert!(
            out.contains(
                "# path: one breakpoint per thread, CPU and target, hits emitted by a BPF program"
            ),
            "{out}"
        );
    }
    drop(sub);
}

/// Each JSON hit's `cgroup` path, by writer: (hits, the paths they named).
fn cgroups_of(records: &[serde_json::Value], pid: u32) -> Vec<String> {
    util::hits_of_pid(records, pid)
        .into_iter()
        .map(|v| v["cgroup"].as_str().unwrap_or("?").to_string())
        .collect()
}

// As a user would run it on a node: a writer moved into the cgroup after the watch armed is kept from
// then on; one in a cgroup nested below the chosen one is kept and named by its own (nested) path; one
// outside is not; the summary counts each cgroup on its own. The same run as OTLP names the cgroup in
// each log record's attributes.
live_cgroup_test!(
    a_writer_moved_in_while_watching_and_one_below_are_kept,
    "moved",
    cg,
    {
        let sub = cg.child("pod");
        let mut late = writer(STORES, 0);
        let mut below = writer(STORES, 1);
        let mut outside = writer(STORES, 1);
        sub.add(below.pid);
        let target = late.target();
        let t = Tracer::write_json(&["--cgroup", &cg.path, "--summary", &target]);
        // Moved after arming: the kernel asks for the writer's cgroup at each trap.
        cg.add(late.pid);
        late.go();
        below.go();
        outside.go();
        let (_, records, err) = interrupted(t, 30);
        assert_eq!(user_hits(&records, late.pid), STORES, "{err}");
        assert_eq!(user_hits(&records, below.pid), STORES, "{err}");
        assert_eq!(util::hits_of_pid(&records, outside.pid).len(), 0, "{err}");
        assert!(cgroups_of(&records, late.pid).iter().all(|p| *p == cg.path));
        assert!(cgroups_of(&records, below.pid)
            .iter()
            .all(|p| *p == sub.path));
        let summary = util::summary_record(&records);
        let mut by: Vec<(String, u64)> = summary["by_cgroup"]
            .as_array()
            .expect("by_cgroup")
            .iter()
            .map(|c| {
                (
                    c["path"].as_str().unwrap_or("?").to_string(),
                    c["count"].as_u64().unwrap_or(0),
                )
            })
            .collect();
        by.sort();
        let hits_of = |pid| util::hits_of_pid(&records, pid).len() as u64;
        assert_eq!(
            by,
            [
                (cg.path.clone(), hits_of(late.pid)),
                (sub.path.clone(), hits_of(below.pid))
            ],
            "{summary}"
        );
        drop((late, below, outside));

        // OTLP: the cgroup's id and path on every log record of a hit.
        let mut inside = writer(STORES, 0);
        sub.add(inside.pid);
        let t = Tracer::start_otlp(&[
            "write",
            "--format",
            "otlp-json",
            "--no-status",
            "--cgroup",
            &cg.path,
            &target,
        ]);
        inside.go();
        let (_, out, err) = t.interrupt(Duration::from_secs(30));
        drop(inside);
        // Hit log records are the ones without an event name; each attribute a {key, value} pair.
        let mut hits = 0;
        for line in out.lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("an OTLP/JSON line");
            for rl in v["resourceLogs"].as_array().into_iter().flatten() {
                for sl in rl["scopeLogs"].as_array().into_iter().flatten() {
                    for r in sl["logRecords"].as_array().into_iter().flatten() {
                        if r.get("eventName").is_some() {
                            continue;
                        }
                        let attr = |k: &str| {
                            r["attributes"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .find(|a| a["key"] == k)
                                .map(|a| a["value"].clone())
                        };
                        assert_eq!(
                            attr("ksymwatch.cgroup.id"),
                            Some(serde_json::json!({ "intValue": sub.id().to_string() })),
                            "{r}"
                        );
                        assert_eq!(
                            attr("ksymwatch.cgroup.path"),
                            Some(serde_json::json!({ "stringValue": sub.path })),
                            "{r}"
                        );
                        hits += 1;
                    }
                }
            }
        }
        assert!(hits > 0, "{err}");
        drop(sub);
    }
);

// `-- CMD` with `--cgroup` narrows: the launched command's stores are kept only while it is in the
// chosen cgroup. The command moved in (by the test, before it stores) has every store kept; the same
// command left where the tracer runs has none, and the run still ends with the command.
live_cgroup_test!(
    a_launched_command_is_kept_only_inside_the_cgroup,
    "launched",
    cg,
    {
        let dir = util::temp_dir("ksw-cgroup-launch");
        let n = STORES.to_string();
        for (move_in, want) in [(true, STORES), (false, 0)] {
            let stream = dir.join(format!("stream-{move_in}.ndjson"));
            let watch = ["--cgroup", &cg.path, "--summary", "target_var"];
            let mut h = Writer::launched(
                &stream,
                &watch,
                &util::helper("writer"),
                &["write", &n, "0"],
            );
            let pid = h.pid;
            if move_in {
                cg.add(pid);
            }
            h.go();
            let status = h.close_and_wait(Duration::from_secs(30));
            assert_eq!(status.code(), Some(0), "ends with the command");
            let records = util::ndjson(&std::fs::read_to_string(&stream).expect("stream file"));
            assert_eq!(user_hits(&records, pid), want, "moved in: {move_in}");
            let summary = util::summary_record(&records);
            let by = summary["by_cgroup"].as_array().map_or(0, |a| a.len());
            assert_eq!(by, usize::from(move_in), "{summary}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
);

// The chosen cgroup removed while the watch runs (its writer done and gone): the run goes on and ends as
// asked, its hits still named by the path they had, and a writer in a cgroup made anew under the same
// name is not kept (another cgroup, another id).
live_cgroup_test!(
    a_cgroup_removed_while_watching_ends_nothing,
    "removed",
    cg,
    {
        let mut w = writer(STORES, 0);
        cg.add(w.pid);
        let target = w.target();
        let t = Tracer::write_json(&["--cgroup", &cg.path, "--summary", &target]);
        w.go();
        let first = w.pid;
        drop(w);
        std::fs::remove_dir(&cg.dir).expect("remove the emptied cgroup");
        std::fs::create_dir(&cg.dir).expect("a new cgroup under the same name");
        let mut again = writer(STORES, 0);
        cg.add(again.pid);
        again.go();
        let (code, records, err) = interrupted(t, 30);
        assert_eq!(code, 0, "{err}");
        assert_eq!(user_hits(&records, first), STORES, "{err}");
        assert!(cgroups_of(&records, first).iter().all(|p| *p == cg.path));
        assert_eq!(util::hits_of_pid(&records, again.pid).len(), 0, "{err}");
        let summary = util::summary_record(&records);
        assert_eq!(
            summary["by_cgroup"][0]["path"],
            cg.path.as_str(),
            "{summary}"
        );
        drop(again);
    }
);

// Without the right to load BPF (root without CAP_BPF and CAP_SYS_ADMIN) `--cgroup` cannot be decided in
// the kernel: exit 4 before anything is armed, saying why and the way out; an empty path (an unset
// variable) is exit 2, not the root.
#[test]
fn without_bpf_or_with_an_empty_path_cgroup_is_refused() {
    util::rejects(
        &["write", "--cgroup", "", "0x601040/8"],
        2,
        &["--cgroup ''", "empty path"],
    );
    if !util::capsh() {
        return;
    }
    let pid = std::process::id().to_string();
    let (code, out, err) = util::run_dropping(
        "cap_bpf,cap_sys_admin,cap_perfmon",
        &["write", "--cgroup", "/", "0x601040/8", "-p", &pid],
        "",
    );
    assert_eq!(code, 4, "{out}{err}");
    assert!(
        err.contains("--cgroup /") && err.contains("BPF") && err.contains("drop --cgroup"),
        "{err}"
    );
    assert!(
        !err.contains("# armed") && !out.contains("# armed"),
        "{out}"
    );
}
