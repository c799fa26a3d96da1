//! What a file of this crate is read as ([`Role`]: its size bound and the advice when it is no such
//! file) and what kind of file a path names ([`FileKind`]): the words that [`crate::file`] and the errors
//! share, kept below both.

use std::fs::FileType;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// The most a kallsyms or System.map text file may hold. A kernel with every module loaded and
/// CONFIG_KALLSYMS_ALL lists a few hundred thousand symbols, 10-30 MiB of text; this is ten times that.
pub const TEXT_LIMIT: u64 = 256 << 20;

/// The most a copy of `/sys/kernel/notes` may hold (the real one is well under a page).
pub const NOTES_LIMIT: u64 = 1 << 20;

/// The running kernel's BTF, which every BTF message offers ([`crate::btf::Btf::VMLINUX`]).
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// The most a BTF file may hold: the vmlinux BTF of a distribution kernel is 5-6 MiB, a module's far less.
pub const BTF_LIMIT: u64 = 64 << 20;

/// What a path names, as far as reading it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Regular,
    Directory,
    CharDevice,
    BlockDevice,
    Fifo,
    Socket,
    /// Only from `lstat`; every open here follows symlinks.
    Symlink,
}

impl FileKind {
    /// The kind of a file type from `stat` or `lstat`.
    pub fn of(ft: FileType) -> FileKind {
        if ft.is_file() {
            FileKind::Regular
        } else if ft.is_dir() {
            FileKind::Directory
        } else if ft.is_char_device() {
            FileKind::CharDevice
        } else if ft.is_block_device() {
            FileKind::BlockDevice
        } else if ft.is_fifo() {
            FileKind::Fifo
        } else if ft.is_socket() {
            FileKind::Socket
        } else {
            FileKind::Symlink
        }
    }

    /// `a character device`: the kind with its article, as an error message says it.
    pub fn describe(self) -> &'static str {
        match self {
            FileKind::Regular => "a regular file",
            FileKind::Directory => "a directory",
            FileKind::CharDevice => "a character device",
            FileKind::BlockDevice => "a block device",
            FileKind::Fifo => "a FIFO",
            FileKind::Socket => "a socket",
            FileKind::Symlink => "a symbolic link",
        }
    }
}

impl std::fmt::Display for FileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}

/// What a file is read as: the size bound, and what an error tells the user to give instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `/proc/kallsyms` or a copy of it.
    Kallsyms,
    /// A `System.map`.
    SystemMap,
    /// A vmlinux ELF (mapped, not read: no bound).
    Vmlinux,
    /// `/sys/kernel/notes` or a copy of it.
    KernelNotes,
    /// BTF type information: `/sys/kernel/btf/vmlinux`, a module's, or a copy.
    Btf,
}

impl Role {
    /// The most a file of this role may hold; `None` for a vmlinux, which is mapped, not read.
    pub fn limit(self) -> Option<u64> {
        match self {
            Role::Kallsyms | Role::SystemMap => Some(TEXT_LIMIT),
            Role::KernelNotes => Some(NOTES_LIMIT),
            Role::Btf => Some(BTF_LIMIT),
            Role::Vmlinux => None,
        }
    }

    /// The kind of file this role reads, as in "more than any kallsyms file holds".
    pub fn noun(self) -> &'static str {
        match self {
            Role::Kallsyms => "kallsyms file",
            Role::SystemMap => "System.map",
            Role::Vmlinux => "vmlinux",
            Role::KernelNotes => "kernel notes file",
            Role::Btf => "BTF file",
        }
    }

    /// What to give instead of `path`, which is `kind`.
    pub(crate) fn advice(self, path: &Path, kind: FileKind) -> String {
        match (self, kind) {
            (Role::Vmlinux, FileKind::Directory) => format!(
                "name the vmlinux ELF file itself, not a directory (e.g. {} for a kernel built there, or \
                 /usr/lib/debug/boot/vmlinux-$(uname -r))",
                path.join("vmlinux").display()
            ),
            (Role::Kallsyms, _) => "give a kallsyms text file, such as /proc/kallsyms or a copy of it".into(),
            (Role::SystemMap, _) => {
                "give a System.map text file, such as /boot/System.map-$(uname -r)".into()
            }
            (Role::Vmlinux, _) => "give an uncompressed vmlinux ELF file, such as \
                                   /usr/lib/debug/boot/vmlinux-$(uname -r)"
                .into(),
            (Role::KernelNotes, _) => "give a copy of /sys/kernel/notes".into(),
            (Role::Btf, _) => format!(
                "give a BTF file, such as {} or /sys/kernel/btf/MODULE",
                VMLINUX_BTF
            ),
        }
    }
}
