//! The DWARF of a process's binary, for member paths and C types: the binary's own `.debug_*` sections,
//! else those of its separate debug file, found by build-id as gdb finds it
//! (`/usr/lib/debug/.build-id/ab/cdef….debug`), first under the process's root (the debug files of the
//! system the process runs in), then under ours. A debug file must carry the binary's build-id: one of
//! another build would give wrong offsets without a word. (`.gnu_debuglink` names without a build-id are
//! not followed.)
//!
//! The sections are read into memory with bounded positioned reads, like everything of a process's files:
//! only the ones the member walk reads, each at most [`MAX_SECTION`]. Compressed sections
//! (`SHF_COMPRESSED`, `gcc -gz`) are refused with the command that decompresses them.

use std::fs::File;
use std::path::{Path, PathBuf};

use goblin::elf::program_header::PT_NOTE;
use goblin::elf::section_header::{SHF_COMPRESSED, SHT_NOBITS, SHT_NOTE};

use super::error::DebugProblem;
use crate::buildid::{self, BuildId};
use crate::dwarf::DebugSections;
use crate::error::Error;
use crate::user::elf::{c_string, read, Headers, ReadAt};
use crate::user::open_if_regular;

/// The largest DWARF section read: 256 MiB, several times the `.debug_info` of a large C program (a debug
/// build of a browser has more, and is refused with this number in the message).
pub(crate) const MAX_SECTION: u64 = 256 << 20;

/// The most read of one note section or segment, where the build-id is.
const MAX_NOTES: u64 = 64 << 10;

/// The sections [`crate::dwarf`]'s member walk reads (gimli parses a unit's line-program header with the
/// unit, so `.debug_line` too).
const WANTED: [&str; 8] = [
    ".debug_info",
    ".debug_abbrev",
    ".debug_str",
    ".debug_str_offsets",
    ".debug_addr",
    ".debug_line",
    ".debug_line_str",
    ".debug_names",
];

/// DWARF sections of one file, read into memory.
pub(crate) struct DebugFile {
    path: PathBuf,
    little_endian: bool,
    sections: Vec<(&'static str, Vec<u8>)>,
}

impl DebugSections for DebugFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn little_endian(&self) -> bool {
        self.little_endian
    }

    fn debug_section(&self, name: &str) -> Result<Option<&[u8]>, Error> {
        Ok(self
            .sections
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| b.as_slice()))
    }
}

/// The DWARF for the binary `file` (mapped at `path`) of process `pid`: `Ok(None)` when there is none,
/// `Err` (saying why) when there is some that cannot be used.
pub(crate) fn find(
    proc_root: &Path,
    pid: u32,
    file: &File,
    headers: &Headers,
    path: &str,
) -> Result<Option<DebugFile>, DebugProblem> {
    if let Some(own) = load(file, headers, Path::new(path))? {
        return Ok(Some(own));
    }
    let Some(id) = build_id(file, headers) else {
        return Ok(None);
    };
    let Some(relative) = debug_file_path(&id) else {
        return Ok(None);
    };
    for root in [proc_root.join(format!("{pid}/root")), PathBuf::from("/")] {
        let candidate = root.join(&relative);
        let Some((f, _)) = open_if_regular(&candidate) else {
            continue;
        };
        let Some(h) = Headers::read(&f) else {
            continue;
        };
        if build_id(&f, &h).as_ref() != Some(&id) {
            continue;
        }
        if let Some(d) = load(&f, &h, &candidate)? {
            return Ok(Some(d));
        }
    }
    Ok(None)
}

/// Where a separate debug file of build-id `id` is, relative to a root (`usr/lib/debug/.build-id/ab/cdef….debug`).
pub(crate) fn debug_file_path(id: &BuildId) -> Option<String> {
    let hex = id.to_string();
    let (dir, rest) = hex.split_at_checked(2).filter(|(_, r)| !r.is_empty())?;
    Some(format!("usr/lib/debug/.build-id/{dir}/{rest}.debug"))
}

/// The wanted DWARF sections of one file: `Ok(None)` when it has no `.debug_info` with contents (a
/// stripped binary; in a debug file, the code sections are the empty ones).
fn load(
    src: &dyn ReadAt,
    headers: &Headers,
    path: &Path,
) -> Result<Option<DebugFile>, DebugProblem> {
    let Some(names) = headers.section_names(src) else {
        return Ok(None);
    };
    let named = |n: &str| {
        headers
            .sections
            .iter()
            .find(|s| c_string(&names, s.sh_name) == Some(n.as_bytes()))
            .filter(|s| s.sh_type != SHT_NOBITS && s.sh_size > 0)
    };
    if named(".debug_info").is_none() {
        return Ok(None);
    }
    let mut sections = Vec::new();
    for name in WANTED {
        let Some(s) = named(name) else {
            continue;
        };
        if s.sh_flags & u64::from(SHF_COMPRESSED) != 0 {
            return Err(DebugProblem::Compressed {
                section: name,
                path: path.to_path_buf(),
            });
        }
        if s.sh_size > MAX_SECTION {
            return Err(DebugProblem::TooLarge {
                section: name,
                size: s.sh_size,
                limit: MAX_SECTION,
            });
        }
        let bytes =
            read(src, s.sh_offset, s.sh_size, MAX_SECTION).ok_or(DebugProblem::OutsideFile {
                section: name,
                start: s.sh_offset,
                end: s.sh_offset.saturating_add(s.sh_size),
            })?;
        sections.push((name, bytes));
    }
    Ok(Some(DebugFile {
        path: path.to_path_buf(),
        little_endian: headers.ctx.is_little_endian(),
        sections,
    }))
}

/// The GNU build-id from the note sections, or from the note segments of a file without section headers.
pub(crate) fn build_id(src: &dyn ReadAt, headers: &Headers) -> Option<BuildId> {
    let le = headers.ctx.is_little_endian();
    let notes = |off, size| read(src, off, size, MAX_NOTES);
    headers
        .sections
        .iter()
        .filter(|s| s.sh_type == SHT_NOTE)
        .find_map(|s| buildid::from_notes(&notes(s.sh_offset, s.sh_size)?, le))
        .or_else(|| {
            headers
                .program
                .iter()
                .filter(|p| p.p_type == PT_NOTE)
                .find_map(|p| buildid::from_notes(&notes(p.p_offset, p.p_filesz)?, le))
        })
}
