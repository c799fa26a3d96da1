//! Opening the files this crate reads, in one place, so that no path can hang or exhaust the process:
//! every loader of a kernel symbol file (kallsyms, System.map, vmlinux, the kernel's notes, BTF) goes through
//! [`open_regular`], and the text ones through [`read_text`]. (User-space binaries, which the user does not
//! name, are opened by [`crate::user`] with the same precautions plus an inode check.)
//!
//! - Only regular files are read. A path naming a device (`/dev/zero` and `/dev/urandom` never end), a
//!   FIFO (no writer: a blocking open never returns), a socket or a directory is refused with
//!   [`Error::NotRegular`], from `stat` alone, so a device is not even opened (opening one can have side
//!   effects: a watchdog arms, a tape rewinds).
//! - The open is `O_NONBLOCK` (cleared again once the file is known to be regular), so a path swapped for a
//!   FIFO between that `stat` and the open cannot block either; the opened file is checked again with
//!   `fstat`.
//! - Files of procfs and sysfs are regular files too (`/proc/kallsyms`, `/sys/kernel/notes`), but procfs
//!   reports their size as 0 and generates them as they are read, so their size cannot be checked up
//!   front. Reads are therefore bounded ([`Role::limit`]): a file past the bound is refused with
//!   [`Error::TooLarge`] when its size says so, and otherwise reading stops there, instead of growing
//!   memory.
//!
//! A vmlinux has no bound: it is memory-mapped, not read, and a debug vmlinux is legitimately gigabytes.

use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::Error;
pub use crate::role::{FileKind, Role, BTF_LIMIT, NOTES_LIMIT, TEXT_LIMIT, VMLINUX_BTF};

/// Opens `path` for reading as `role`, if it is a regular file (see the module documentation): never
/// blocks, never opens a device, and refuses a file whose size is over the role's bound.
pub fn open_regular(path: &Path, role: Role) -> Result<File, Error> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let not_regular = |kind| Error::NotRegular {
        path: path.to_path_buf(),
        kind,
        role,
    };
    // `stat` first: a device must not even be opened.
    let kind = FileKind::of(std::fs::metadata(path).map_err(io)?.file_type());
    if kind != FileKind::Regular {
        return Err(not_regular(kind));
    }
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    // The path may have been swapped since the `stat`: what counts is what was opened.
    let meta = file.metadata().map_err(io)?;
    let kind = FileKind::of(meta.file_type());
    if kind != FileKind::Regular {
        return Err(not_regular(kind));
    }
    if let Some(limit) = role.limit().filter(|&l| meta.len() > l) {
        return Err(Error::TooLarge {
            path: path.to_path_buf(),
            role,
            limit,
        });
    }
    set_blocking(&file).map_err(io)?;
    Ok(file)
}

/// Clears `O_NONBLOCK` (meaningless for a regular file on a local file system, but a FUSE server sees it).
fn set_blocking(file: &File) -> std::io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl F_GETFL/F_SETFL on a descriptor `file` owns and keeps open for the call; no pointers.
    let ok = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
    };
    if ok {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The whole of a regular file read as `role`, at most its bound ([`Role::limit`]): a file that turns out
/// longer while being read (a procfs file reports size 0) is [`Error::TooLarge`].
pub fn read(path: &Path, role: Role) -> Result<Vec<u8>, Error> {
    read_bounded(open_regular(path, role)?, path, role, role.limit())
}

fn read_bounded(file: File, path: &Path, role: Role, limit: Option<u64>) -> Result<Vec<u8>, Error> {
    let mut bytes = Vec::new();
    let read = match limit {
        // One byte past the bound tells "exactly at it" from "beyond it".
        Some(l) => file.take(l.saturating_add(1)).read_to_end(&mut bytes),
        None => (&file).read_to_end(&mut bytes),
    };
    read.map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if let Some(limit) = limit.filter(|&l| bytes.len() as u64 > l) {
        return Err(Error::TooLarge {
            path: path.to_path_buf(),
            role,
            limit,
        });
    }
    Ok(bytes)
}

/// [`read`] in pieces of `chunk` bytes (the last one shorter), each handed to `each` as it is complete, so
/// a caller can work on one while the next is read (procfs files are generated as they are read, a page
/// per `read`). Stops early, without error, when `each` returns `false`; the role's bound is enforced as
/// by [`read`].
pub fn read_chunks(
    path: &Path,
    role: Role,
    chunk: usize,
    mut each: impl FnMut(Vec<u8>) -> bool,
) -> Result<(), Error> {
    let mut file = open_regular(path, role)?;
    let limit = role.limit().unwrap_or(u64::MAX);
    let mut total = 0u64;
    loop {
        let mut piece = Vec::with_capacity(chunk.max(1));
        let n = (&mut file)
            .take(chunk.max(1) as u64)
            .read_to_end(&mut piece)
            .map_err(|source| Error::Io {
                path: path.to_path_buf(),
                source,
            })?;
        total += n as u64;
        if total > limit {
            return Err(Error::TooLarge {
                path: path.to_path_buf(),
                role,
                limit,
            });
        }
        if n == 0 || !each(piece) {
            return Ok(());
        }
    }
}

/// [`read`] as UTF-8 text (kallsyms, System.map).
pub fn read_text(path: &Path, role: Role) -> Result<String, Error> {
    String::from_utf8(read(path, role)?).map_err(|_| Error::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ksymwatch-file-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn refused(path: &Path, role: Role) -> FileKind {
        match open_regular(path, role) {
            Err(Error::NotRegular { kind, .. }) => kind,
            other => panic!("{}: expected NotRegular, got {other:?}", path.display()),
        }
    }

    #[test]
    fn classifies_every_kind_and_refuses_all_but_regular_files() {
        let dir = temp_dir("kinds");
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let sock = dir.join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let file = dir.join("file");
        std::fs::write(&file, "ffffffff81000000 T _text\n").unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();

        let kind = |p: &Path| FileKind::of(std::fs::symlink_metadata(p).unwrap().file_type());
        assert_eq!(kind(&file), FileKind::Regular);
        assert_eq!(kind(&dir), FileKind::Directory);
        assert_eq!(kind(Path::new("/dev/null")), FileKind::CharDevice);
        assert_eq!(kind(&fifo), FileKind::Fifo);
        assert_eq!(kind(&sock), FileKind::Socket);
        assert_eq!(kind(&link), FileKind::Symlink);

        // A FIFO with no writer returns at once, as every non-regular kind does.
        assert_eq!(refused(&fifo, Role::Kallsyms), FileKind::Fifo);
        assert_eq!(refused(&sock, Role::SystemMap), FileKind::Socket);
        assert_eq!(refused(&dir, Role::Vmlinux), FileKind::Directory);
        assert_eq!(
            refused(Path::new("/dev/zero"), Role::Kallsyms),
            FileKind::CharDevice
        );
        // A symlink to a regular file is that file.
        assert!(open_regular(&link, Role::Kallsyms).is_ok());
        // Missing is still plain I/O: callers fall back on it where they did before.
        let missing = open_regular(&dir.join("missing"), Role::Kallsyms).unwrap_err();
        assert!(matches!(missing, Error::Io { .. }) && !missing.is_wrong_file());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn messages_name_the_file_its_kind_and_what_to_give() {
        let e = open_regular(Path::new("/dev/zero"), Role::Kallsyms).unwrap_err();
        assert!(e.is_wrong_file());
        assert_eq!(
            e.to_string(),
            "/dev/zero: not a regular file (a character device); give a kallsyms text file, such as \
             /proc/kallsyms or a copy of it"
        );
        let dir = temp_dir("dir-msg");
        let e = open_regular(&dir, Role::Vmlinux).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{0}: not a regular file (a directory); name the vmlinux ELF file itself, not a directory \
                 (e.g. {0}/vmlinux for a kernel built there, or /usr/lib/debug/boot/vmlinux-$(uname -r))",
                dir.display()
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_stop_at_the_bound() {
        let dir = temp_dir("bound");
        let p = dir.join("k");
        std::fs::write(&p, b"0123456789").unwrap();
        let open = || open_regular(&p, Role::Kallsyms).unwrap();
        assert_eq!(
            read_bounded(open(), &p, Role::Kallsyms, Some(10)).unwrap(),
            b"0123456789"
        );
        let e = read_bounded(open(), &p, Role::Kallsyms, Some(9)).unwrap_err();
        assert!(matches!(e, Error::TooLarge { limit: 9, .. }), "{e:?}");
        assert!(e.is_wrong_file());
        assert!(
            e.to_string().contains("more than any kallsyms file holds"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn procfs_files_are_regular_and_read_within_the_bound() {
        // procfs says size 0; the read is what is bounded.
        let text = read_text(Path::new("/proc/self/status"), Role::Kallsyms).unwrap();
        assert!(text.contains("Name:"), "{text}");
        let e = read_bounded(
            open_regular(Path::new("/proc/self/status"), Role::Kallsyms).unwrap(),
            Path::new("/proc/self/status"),
            Role::Kallsyms,
            Some(4),
        )
        .unwrap_err();
        assert!(matches!(e, Error::TooLarge { .. }), "{e:?}");
    }
}
