//! GNU build-ids: reading them from ELF note blobs, and deciding whether a file is the running kernel.
//!
//! The running kernel exports its own notes at `/sys/kernel/notes` (the bytes of vmlinux's `.notes` section),
//! so comparing that build-id with the one in a vmlinux is the only check that proves the file *is* this
//! kernel. System.map has no build-id; [`crate::relocate::verify`] falls back to comparing symbol addresses there.

use std::fmt;

/// `NT_GNU_BUILD_ID` from `<elf.h>`.
const NT_GNU_BUILD_ID: u32 = 3;

/// A build-id: the raw bytes of an `NT_GNU_BUILD_ID` note (20 bytes for ld's default sha1).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BuildId(pub Vec<u8>);

impl fmt::Display for BuildId {
    /// Lower-case hex, the form `readelf -n` and `file` print, so users can compare by eye.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// Finds the GNU build-id in a blob of ELF notes (`Elf_Nhdr` records, each name and descriptor padded to 4
/// bytes). Returns `None` when the blob holds no such note; a record that runs past the end stops the walk
/// rather than erroring, since a truncated blob can still have yielded an earlier note.
pub fn from_notes(blob: &[u8], little_endian: bool) -> Option<BuildId> {
    let read_u32 = |at: usize| -> Option<u32> {
        let bytes: [u8; 4] = blob.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(if little_endian {
            u32::from_le_bytes(bytes)
        } else {
            u32::from_be_bytes(bytes)
        })
    };
    let pad4 = |n: usize| n.checked_add(3).map(|n| n & !3);
    let mut at = 0usize;
    while at.checked_add(12)? <= blob.len() {
        let namesz = read_u32(at)? as usize;
        let descsz = read_u32(at + 4)? as usize;
        let ntype = read_u32(at + 8)?;
        let name_start = at + 12;
        let desc_start = name_start.checked_add(pad4(namesz)?)?;
        let desc_end = desc_start.checked_add(descsz)?;
        let name = blob.get(name_start..name_start.checked_add(namesz)?)?;
        let desc = blob.get(desc_start..desc_end)?;
        if ntype == NT_GNU_BUILD_ID && name == b"GNU\0" && !desc.is_empty() {
            return Some(BuildId(desc.to_vec()));
        }
        at = desc_start.checked_add(pad4(descsz)?)?;
    }
    None
}

/// Whether a symbol file is the running kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelMatch {
    /// The file's build-id equals the running kernel's.
    BuildIdMatch(BuildId),
    /// The build-ids differ: addresses from this file are not this kernel's.
    BuildIdMismatch { file: BuildId, running: BuildId },
    /// No build-id to compare (System.map, or notes unreadable), but `checked` text symbols sit where
    /// kallsyms says once the KASLR offset is applied.
    SymbolsAgree { checked: usize },
    /// No build-id to compare, and a symbol is not where kallsyms says: a different build.
    SymbolsDisagree {
        name: String,
        file_addr: u64,
        running_addr: u64,
    },
    /// The source *is* the running kernel (kallsyms).
    Running,
    /// Nothing to compare with; the reason says what was missing.
    Unknown(String),
}

impl KernelMatch {
    /// A proven mismatch: arming a watchpoint at these addresses would watch the wrong memory.
    pub fn is_mismatch(&self) -> bool {
        matches!(
            self,
            KernelMatch::BuildIdMismatch { .. } | KernelMatch::SymbolsDisagree { .. }
        )
    }

    /// Positive evidence that addresses are the running kernel's.
    pub fn is_match(&self) -> bool {
        matches!(
            self,
            KernelMatch::BuildIdMatch(_) | KernelMatch::SymbolsAgree { .. } | KernelMatch::Running
        )
    }

    /// A one-word status for machine-readable output: `match`, `mismatch` or `unknown`.
    pub fn status(&self) -> &'static str {
        if self.is_mismatch() {
            "mismatch"
        } else if self.is_match() {
            "match"
        } else {
            "unknown"
        }
    }

    /// Compares a file's build-id with the running kernel's.
    pub fn compare(file: Option<&BuildId>, running: Option<&BuildId>) -> KernelMatch {
        match (file, running) {
            (Some(f), Some(r)) if f == r => KernelMatch::BuildIdMatch(f.clone()),
            (Some(f), Some(r)) => KernelMatch::BuildIdMismatch {
                file: f.clone(),
                running: r.clone(),
            },
            (None, _) => KernelMatch::Unknown("the file has no build-id note".into()),
            (Some(_), None) => {
                KernelMatch::Unknown("the running kernel's build-id is unavailable".into())
            }
        }
    }
}

impl fmt::Display for KernelMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelMatch::BuildIdMatch(id) => write!(f, "match (build-id {id})"),
            KernelMatch::BuildIdMismatch { file, running } => {
                write!(f, "MISMATCH (file build-id {file}, running kernel {running})")
            }
            KernelMatch::SymbolsAgree { checked } => {
                write!(f, "match ({checked} text symbols agree with kallsyms; no build-id to compare)")
            }
            KernelMatch::SymbolsDisagree {
                name,
                file_addr,
                running_addr,
            } => write!(
                f,
                "MISMATCH (`{name}` is at 0x{file_addr:x} in the file after relocation, 0x{running_addr:x} in kallsyms)"
            ),
            KernelMatch::Running => write!(f, "match (running kernel)"),
            KernelMatch::Unknown(why) => write!(f, "unknown ({why})"),
        }
    }
}

/// What to do when the symbol file is proven not to be the running kernel. Its `check` is in error.rs, beside
/// the error it makes, so that this file, whose types that error carries, needs no error of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MismatchPolicy {
    /// Refuse (the default: a watchpoint on the wrong address watches some other variable).
    #[default]
    Refuse,
    /// Go on anyway (the user insists).
    Allow,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::note;

    #[test]
    fn finds_build_id_after_other_notes() {
        let mut blob = note(b"Xen\0", 18, &[1, 2, 3, 4, 5, 6, 7, 8]);
        blob.extend(note(b"Linux\0", 1, b"6.1\0\0"));
        blob.extend(note(b"GNU\0", 3, &[0xab; 20]));
        assert_eq!(
            from_notes(&blob, true).unwrap().to_string(),
            "ab".repeat(20)
        );
    }

    #[test]
    fn truncated_or_foreign_blobs_give_none() {
        let blob = note(b"GNU\0", 3, &[0xab; 20]);
        for len in 0..blob.len() {
            assert!(from_notes(&blob[..len], true).is_none(), "len {len}");
        }
        assert!(from_notes(&note(b"GNU\0", 1, &[1; 16]), true).is_none());
        // A huge namesz must not overflow or panic.
        let mut evil = vec![0xff; 12];
        evil.extend_from_slice(&[0; 8]);
        assert!(from_notes(&evil, true).is_none());
    }

    #[test]
    fn compare() {
        let a = BuildId(vec![1; 20]);
        let b = BuildId(vec![2; 20]);
        assert!(KernelMatch::compare(Some(&a), Some(&a)).is_match());
        let mis = KernelMatch::compare(Some(&a), Some(&b));
        assert!(mis.is_mismatch());
        assert_eq!(mis.status(), "mismatch");
        assert_eq!(KernelMatch::compare(None, Some(&b)).status(), "unknown");
    }
}
