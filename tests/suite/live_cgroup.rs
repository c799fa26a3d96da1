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

/// The test's child cgroup and the helper in it: the helper is killed and the cgroup removed on drop.
struct Moved {
    dir: PathBuf,
    child: Option<Child>,
}

impl Drop for Moved {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir(&self.dir);
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
    let h = match Hierarchy::find() {
        Ok(h) => h,
        Err(CgroupError::NoHierarchy) => {
            skip("no cgroup v2 hierarchy is mounted");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let name = format!("ksymwatch-test-{}", std::process::id());
    let dir = PathBuf::from(&h.mount.point).join(&name);
    if let Err(e) = std::fs::create_dir(&dir) {
        skip(format_args!(
            "cannot make a cgroup under {}: {e}",
            h.mount.point
        ));
        return;
    }
    let mut moved = Moved { dir, child: None };
    let child = Command::new(helper_with("allocs", &["-pthread"]))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start the helper");
    let pid = child.id();
    moved.child = Some(child);
    let before = h.of_process(pid).expect("the helper's cgroup");
    std::fs::write(moved.dir.join("cgroup.procs"), pid.to_string()).expect("move the helper");

    let by_path = h.resolve(&format!("/{name}")).expect("the new cgroup");
    let by_process = h
        .of_process(pid)
        .expect("the helper's cgroup after the move");
    assert_eq!(by_process, by_path);
    assert_ne!(before.id, by_path.id, "the move changed its cgroup");
    assert_eq!(by_path.id, std::fs::metadata(&moved.dir).unwrap().ino());
    assert_eq!(
        h.resolve(&moved.dir.display().to_string()).unwrap().id,
        by_path.id
    );

    // The kernel's own handle for the directory: kernfs encodes the node id, 8 bytes, native-endian.
    let (kind, bytes) = file_handle(&moved.dir).expect("name_to_handle_at on the cgroup");
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
        let h = match Hierarchy::find() {
            Ok(h) => h,
            Err(CgroupError::NoHierarchy) => {
                skip("no cgroup v2 hierarchy is mounted");
                return None;
            }
            Err(e) => panic!("{e}"),
        };
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
#[test]
#[ignore = "live: makes a cgroup and arms hardware breakpoints"]
fn only_the_writer_inside_the_cgroup_is_kept() {
    let Some(_lock) = live() else { return };
    let Some(cg) = TestCgroup::make("two-writers") else {
        return;
    };
    let n = STORES.to_string();
    let mut inside = Writer::start_fixed(&["write", &n, "0"]);
    let mut outside = Writer::start_fixed(&["write", &n, "1"]);
    assert_eq!(inside.addr, outside.addr, "one address for both");
    cg.add(inside.pid);
    let target = inside.target();

    let t = Tracer::write_json(&["--cgroup", &cg.path, "--summary", &target]);
    outside.go();
    inside.go();
    let (_, out, err) = t.interrupt(Duration::from_secs(30));
    let records = util::ndjson(&out);
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
    let mut inside = Writer::start_fixed(&["write", &n, "0"]);
    let mut outside = Writer::start_fixed(&["write", &n, "1"]);
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
    let (_, out, err) = t.interrupt(Duration::from_secs(30));
    let records = util::ndjson(&out);
    assert_eq!(
        records.iter().filter(|v| v["type"] == "hit").count(),
        0,
        "{err}"
    );
    drop((inside, outside));
}

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
    util::rejects(
        &["write", "--cgroup", "/", "--per-thread", "-p", "1", target],
        2,
        &["drop --per-thread"],
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
