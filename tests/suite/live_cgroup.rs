//! `--cgroup`'s foundations against the real cgroup v2 hierarchy: a child cgroup made for the test, a
//! helper moved into it, and the id found from the helper's `/proc/PID/cgroup` (no BPF) checked against
//! the directory's inode and against the kernel's own file handle for it (`name_to_handle_at`, which
//! encodes the kernfs node id `bpf_get_current_cgroup_id()` reports).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use ksymwatch::host::cgroup::{CgroupError, Hierarchy, Names};

use crate::util::{helper_with, live, skip};

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
