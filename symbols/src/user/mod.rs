//! Naming user-space frames: a process's mappings say which file an address is in and where; that file's ELF
//! symbols (`.symtab`, else `.dynsym`) say which function. Each binary is read once and cached by device,
//! inode, path and mtime, whichever process maps it.
//!
//! A process's mappings come from two places. Every process alive at the start is read from
//! `/proc/PID/maps` while the tracer starts ([`UserSymbols::scan_all`]), and any process is read again
//! when an address falls outside every known mapping. A tracer that sees the kernel's task records also hands them over as they
//! happen, in time order: each executable mapping ([`UserSymbols::map`], from PERF_RECORD_MMAP2), a fork
//! (the child starts with its parent's mappings), an exec (the old ones are dropped). So a process that
//! starts after arming and exits right after its hit, gone from /proc by the time the hit is named, still
//! gets named frames.
//!
//! What a process leaves behind is dropped when the tracer says it is done with it ([`UserSymbols::forget`],
//! after the process exited and its last hits were named); a binary no process's mapping still uses is kept
//! only among the [`BINARIES_KEPT`] most recently used. A day-long run over millions of processes stays flat.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rustc_hash::FxHashMap;

pub(crate) mod elf;

pub use elf::{demangle, Binary, Skipped, MAX_TABLE};

/// Binaries no remembered mapping uses, kept for the next process that maps them (the cache's bound).
pub const BINARIES_KEPT: usize = 32;

/// A miss re-reads the maps at most this often per process: a JIT or a corrupt frame would otherwise re-read
/// them on every hit.
const REFRESH_EVERY: Duration = Duration::from_millis(100);

/// What is known about one user address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserFrame {
    /// Basename of the mapped file (`writer`, `libc.so.6`) or the kernel's name for it (`[vdso]`).
    pub binary: Arc<str>,
    /// Function, offset into it, and its size. Names are shared, not copied: a flood of hits names the same
    /// few functions again and again.
    pub sym: Option<(Arc<str>, u64, Option<u64>)>,
}

/// Identity of a mapped file: the same file mapped by many processes is loaded once; a file replaced at the
/// same path is loaded again.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct BinKey {
    dev: String,
    inode: u64,
    path: String,
    mtime: Option<SystemTime>,
}

#[derive(Debug, Clone)]
pub(crate) struct Mapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    /// The file's path as maps gives it, or `[vdso]`-style names for kernel-provided ones.
    pub path: String,
    /// What frames in this mapping print as: the path's basename.
    pub name: Arc<str>,
    pub dev: String,
    pub inode: u64,
    /// The loaded binary, once looked up: the lookup stats the file, far too slow to repeat for every frame
    /// of every hit (it was most of the tracer's CPU time at 60k hits/s).
    bin: Option<Option<Arc<Binary>>>,
}

#[derive(Debug, Default, Clone)]
struct Proc {
    /// Shared between a parent and a fork child until either changes them: nearly every fork is followed
    /// by an exec that drops the copy, so a fork copies nothing.
    maps: Arc<Vec<Mapping>>,
    read_at: Option<Instant>,
}

impl Proc {
    /// Adds `new`, cutting away whatever part of older mappings it covers (a `MAP_FIXED` mapping
    /// replaces what was there).
    fn insert(&mut self, new: Mapping) {
        self.merge(vec![new]);
    }

    /// Takes in `fresh` mappings (sorted, not overlapping: a /proc snapshot or one new mapping): each
    /// replaces whatever it overlaps, and what it does not cover stays. A snapshot of /proc can lack what the
    /// kernel has reported (read mid-exec or mid-exit, it can hold a single line), so it only ever adds. A
    /// mapping that is still the same keeps the binary already loaded for it.
    fn merge(&mut self, mut fresh: Vec<Mapping>) {
        let old = Arc::unwrap_or_clone(std::mem::take(&mut self.maps));
        let mut out = Vec::with_capacity(old.len() + fresh.len());
        let piece = |m: &Mapping, start: u64, end: u64| Mapping {
            start,
            end,
            offset: m.offset + (start - m.start),
            ..m.clone()
        };
        for m in old {
            let mut from = m.start;
            let mut i = fresh.partition_point(|f| f.end <= m.start);
            while let Some(f) = fresh.get_mut(i).filter(|f| f.start < m.end) {
                let same =
                    (f.start, f.end, f.offset, f.inode) == (m.start, m.end, m.offset, m.inode);
                if same && f.path == m.path && f.bin.is_none() {
                    f.bin = m.bin.clone();
                }
                if f.start > from {
                    out.push(piece(&m, from, f.start));
                }
                from = from.max(f.end);
                i += 1;
            }
            if from < m.end {
                out.push(piece(&m, from, m.end));
            }
        }
        out.append(&mut fresh);
        out.sort_by_key(|m| m.start);
        self.maps = Arc::new(out);
    }
}

/// One executable mapping as the kernel reports it when it is made (PERF_RECORD_MMAP2), for
/// [`UserSymbols::map`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MappedFile<'a> {
    pub start: u64,
    pub len: u64,
    /// File offset of `start`.
    pub offset: u64,
    /// Device (major, minor) and inode of the file.
    pub dev: (u32, u32),
    pub inode: u64,
    /// The kernel's path of the file, or its name for memory without one (`[vdso]`, `//anon`).
    pub path: &'a str,
}

/// A cached binary and when it was last asked for.
#[derive(Debug)]
struct Cached {
    bin: Option<Arc<Binary>>,
    used: u64,
}

/// The directory of a live thread of process `pid` other than its leader, for a process whose main thread
/// has exited while others run: its leader is then a zombie whose process-level files (`maps`, `exe`,
/// `root`) show nothing, while each live thread's `/proc/PID/task/TID` still shows the process's memory.
/// `None` when no other thread's `maps` shows anything.
pub(crate) fn live_thread_dir(proc_root: &Path, pid: u32) -> Option<PathBuf> {
    let leader = pid.to_string();
    std::fs::read_dir(proc_root.join(format!("{pid}/task")))
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_str() != Some(leader.as_str()))
        .map(|e| e.path())
        .find(|dir| maps_show_memory(&dir.join("maps")))
}

/// Whether the maps file at `path` lists any mapping (a zombie's lists none).
fn maps_show_memory(path: &Path) -> bool {
    use std::io::Read;
    let mut byte = [0u8; 1];
    std::fs::File::open(path).is_ok_and(|mut f| f.read(&mut byte).is_ok_and(|n| n > 0))
}

/// Parses `/proc/PID/maps` text; lines it does not understand are skipped.
pub(crate) fn parse_maps(text: &str) -> Vec<Mapping> {
    let mut maps: Vec<Mapping> = text
        .lines()
        .filter_map(|l| {
            let mut rest = l;
            let mut field = || {
                let (word, after) = rest.trim_start_matches(' ').split_once(' ')?;
                rest = after;
                Some(word)
            };
            let (range, _perms, offset, dev, inode) =
                (field()?, field()?, field()?, field()?, field()?);
            let (start, end) = range.split_once('-')?;
            // The path is the rest of the line, after the padding, exactly: it may hold runs of spaces
            // or tabs, and the kernel writes a newline in it as `\012` (a path that differs from the
            // file's opens nothing once the process is gone, and names the wrong file).
            let path = rest.trim_start_matches(' ').replace("\\012", "\n");
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                offset: u64::from_str_radix(offset, 16).ok()?,
                name: basename(&path).into(),
                path,
                dev: dev.to_string(),
                inode: inode.parse().ok()?,
                bin: None,
            })
        })
        .filter(|m| !m.path.is_empty())
        .collect();
    maps.sort_by_key(|m| m.start);
    maps
}

/// The last component of a mapped path, without the ` (deleted)` maps adds to a removed file.
pub(crate) fn basename(path: &str) -> String {
    let p = path.strip_suffix(" (deleted)").unwrap_or(path);
    Path::new(p)
        .file_name()
        .map_or_else(|| p.to_string(), |n| n.to_string_lossy().into_owned())
}

/// Per-process maps and per-binary symbols, learned as hits arrive.
pub struct UserSymbols {
    proc_root: PathBuf,
    // Looked up for every user frame of every hit: a fast integer hash, not SipHash.
    procs: FxHashMap<u32, Proc>,
    binaries: HashMap<BinKey, Cached>,
    /// Counts binary lookups: the age of a cached binary for eviction.
    clock: u64,
    notes: Vec<String>,
}

impl Default for UserSymbols {
    fn default() -> Self {
        UserSymbols::new("/proc")
    }
}

impl UserSymbols {
    pub fn new(proc_root: impl Into<PathBuf>) -> UserSymbols {
        UserSymbols {
            proc_root: proc_root.into(),
            procs: FxHashMap::default(),
            binaries: HashMap::new(),
            clock: 0,
            notes: Vec::new(),
        }
    }

    /// Reads the maps of every process alive now. Run while a session starts: a
    /// writer that exits within a tick of its hits would otherwise be gone before its first hit is named.
    /// (Processes started later are learned from [`UserSymbols::fork`] and [`UserSymbols::map`], or read on
    /// their first hit.)
    pub fn scan_all(&mut self) {
        let Ok(dir) = std::fs::read_dir(&self.proc_root) else {
            return;
        };
        let pids: Vec<u32> = dir
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        for pid in pids {
            self.refresh(pid);
        }
    }

    /// Why [`UserSymbols::lookup`] named nothing in process `pid`, in words for a record: a frame left
    /// unnamed says why, so a reader can tell a race with the process's maps from memory no file backs.
    pub fn why_unnamed(&self, pid: u32) -> &'static str {
        if pid == 0 {
            return "no process (pid 0)";
        }
        match self.procs.get(&pid) {
            None => "the process's memory maps were never read",
            Some(p) if p.maps.is_empty() => {
                "the process's memory maps could not be read (it had exited, or was in exec)"
            }
            Some(_) => {
                "in no file mapping of the process as its memory maps were last read (anonymous or JIT \
                 code, or mapped since)"
            }
        }
    }

    /// Names `addr` in process `pid`; `None` when no mapping of it holds the address.
    pub fn lookup(&mut self, pid: u32, addr: u64) -> Option<UserFrame> {
        if pid == 0 {
            return None;
        }
        let i = match self.mapping(pid, addr) {
            Some(i) => i,
            None => {
                if !self.refresh(pid) {
                    return None;
                }
                self.mapping(pid, addr)?
            }
        };
        let m = &self.procs.get(&pid)?.maps[i];
        let binary = m.name.clone();
        if !m.path.starts_with('/') {
            return Some(UserFrame { binary, sym: None });
        }
        let (start, offset) = (m.start, m.offset);
        let bin = match &m.bin {
            Some(b) => b.clone(),
            None => {
                let m = m.clone();
                let b = self.binary(pid, &m);
                let slot = self
                    .procs
                    .get_mut(&pid)
                    .and_then(|p| Arc::make_mut(&mut p.maps).get_mut(i));
                if let Some(slot) = slot {
                    slot.bin = Some(b.clone());
                }
                b
            }
        };
        let sym = bin.and_then(|b| {
            let vaddr = b.vaddr(addr - start + offset)?;
            b.symbolize(vaddr)
        });
        Some(UserFrame { binary, sym })
    }

    /// `len` bytes at `addr` in process `pid` as the file mapped there holds them (the code a trap ran,
    /// readable after the process is gone); `None` when no file mapping known for `pid` holds all of them,
    /// or the file cannot be opened and read.
    pub fn read_mapped(&mut self, pid: u32, addr: u64, len: usize) -> Option<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let i = self.mapping(pid, addr)?;
        let m = &self.procs.get(&pid)?.maps[i];
        if !m.path.starts_with('/') || addr.checked_add(len as u64)? > m.end {
            return None;
        }
        let (file, _) = open_mapped(&self.proc_root, pid, m)?;
        let mut buf = vec![0; len];
        file.read_exact_at(&mut buf, addr - m.start + m.offset)
            .ok()?;
        Some(buf)
    }

    /// Index of the mapping of `pid` that contains `addr`.
    fn mapping(&self, pid: u32, addr: u64) -> Option<usize> {
        let maps = &self.procs.get(&pid)?.maps;
        let i = maps.partition_point(|m| m.start <= addr).checked_sub(1)?;
        (addr < maps[i].end).then_some(i)
    }

    /// Reads process `pid`'s maps now, as they are after its exec: a command launched after the start-up
    /// scan, stopped at its exec, whose executable was mapped before any event could report it. Whatever
    /// an earlier read saw is dropped first, and the read is not put off by one made a moment ago: the
    /// start-up scan can read the command between its fork and its exec (the tracer's own mappings, at
    /// other addresses), and those would otherwise stand in for the program's until the next re-read
    /// was due, leaving the first hits' frames in the program unnamed. Returns whether any were read.
    pub fn read_process(&mut self, pid: u32) -> bool {
        self.exec(pid);
        self.refresh(pid)
    }

    /// Re-reads a process's maps, unless it was read very recently; a process that has exited keeps what
    /// was learned. Returns whether anything new was read.
    fn refresh(&mut self, pid: u32) -> bool {
        let p = self.procs.entry(pid).or_default();
        if p.read_at.is_some_and(|t| t.elapsed() < REFRESH_EVERY) {
            return false;
        }
        p.read_at = Some(Instant::now());
        let read =
            std::fs::read_to_string(self.proc_root.join(format!("{pid}/maps"))).map(|text| {
                // A process whose main thread alone has exited: a live thread shows its memory.
                match text.is_empty() {
                    true => live_thread_dir(&self.proc_root, pid)
                        .and_then(|dir| std::fs::read_to_string(dir.join("maps")).ok())
                        .unwrap_or(text),
                    false => text,
                }
            });
        match read {
            // What the kernel's records taught stays (see `Proc::merge`): an exited process not yet
            // reaped reads as no mappings at all, one in the middle of exec as a few.
            Ok(text) => {
                let maps = parse_maps(&text);
                if maps.is_empty() {
                    return false;
                }
                p.merge(maps);
                true
            }
            Err(_) => false,
        }
    }

    /// `pid` mapped `file` executable. Memory with no file behind it (`//anon`, a JIT's code) names nothing
    /// and is left out.
    pub fn map(&mut self, pid: u32, file: &MappedFile<'_>) {
        if pid == 0 || file.path.starts_with("//") || file.path.is_empty() {
            return;
        }
        let Some(end) = file.start.checked_add(file.len).filter(|&e| e > file.start) else {
            return;
        };
        self.procs.entry(pid).or_default().insert(Mapping {
            start: file.start,
            end,
            offset: file.offset,
            path: file.path.to_string(),
            name: basename(file.path).into(),
            dev: format!("{:02x}:{:02x}", file.dev.0, file.dev.1),
            inode: file.inode,
            bin: None,
        });
    }

    /// `child` was forked from `parent`: it starts with a copy of the parent's mappings (read from /proc if
    /// the parent was not known yet).
    pub fn fork(&mut self, parent: u32, child: u32) {
        if parent == 0 || child == 0 || parent == child {
            return;
        }
        if !self.procs.contains_key(&parent) {
            self.refresh(parent);
        }
        match self.procs.get(&parent) {
            Some(p) => {
                let copy = Proc {
                    maps: p.maps.clone(),
                    read_at: None,
                };
                self.procs.insert(child, copy);
            }
            None => {
                self.procs.remove(&child);
            }
        }
    }

    /// `pid` ran exec: its old mappings are gone; the new program's arrive through [`UserSymbols::map`]
    /// (or /proc on a miss).
    pub fn exec(&mut self, pid: u32) {
        if let Some(p) = self.procs.get_mut(&pid) {
            p.maps = Arc::default();
            p.read_at = None;
        }
    }

    /// `pid` exited and none of its hits is left to name: everything learned about it goes, and the
    /// binaries only it used become evictable.
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }

    /// Processes whose mappings are remembered.
    pub fn processes(&self) -> usize {
        self.procs.len()
    }

    /// Binaries cached, in use or not.
    pub fn binaries(&self) -> usize {
        self.binaries.len()
    }

    /// The binary behind a mapping, loaded on first use (see [`open_mapped`] for how it is opened).
    fn binary(&mut self, pid: u32, m: &Mapping) -> Option<Arc<Binary>> {
        let (file, meta) = open_mapped(&self.proc_root, pid, m)?;
        let key = BinKey {
            dev: m.dev.clone(),
            inode: m.inode,
            path: m.path.clone(),
            mtime: meta.modified().ok(),
        };
        self.clock += 1;
        if let Some(c) = self.binaries.get_mut(&key) {
            c.used = self.clock;
            return c.bin.clone();
        }
        let (loaded, skipped) = Binary::load(&file);
        if let Some(Skipped(why)) = skipped {
            self.notes
                .push(format!("symbols of {} left out: {why}", m.path));
        }
        let loaded = loaded.map(Arc::new);
        self.binaries.insert(
            key,
            Cached {
                bin: loaded.clone(),
                used: self.clock,
            },
        );
        self.evict_binaries();
        loaded
    }

    /// Drops the least recently used binaries that no remembered mapping holds, down to [`BINARIES_KEPT`]
    /// of those. One still mapped by a process stays whatever its age: its next hit would load it again.
    fn evict_binaries(&mut self) {
        let unused = |c: &Cached| c.bin.as_ref().is_none_or(|b| Arc::strong_count(b) == 1);
        let spare = self.binaries.values().filter(|c| unused(c)).count();
        if spare <= BINARIES_KEPT {
            return;
        }
        let mut ages: Vec<u64> = self
            .binaries
            .values()
            .filter(|c| unused(c))
            .map(|c| c.used)
            .collect();
        ages.sort_unstable();
        // Down to half the bound, so eviction runs once per many loads, not on every one.
        let cutoff = ages[spare - BINARIES_KEPT / 2 - 1];
        self.binaries.retain(|_, c| !unused(c) || c.used > cutoff);
    }

    /// What was left out since the last call (binaries whose symbol tables were too large), for the
    /// session's summary.
    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }
}

/// Opens the file behind mapping `m` of process `pid`, through the process's `map_files` link when possible:
/// that works for a deleted file and across mount namespaces; then through its root, then the path as it
/// is. Whatever path is used, the opened file must be a regular file with the mapping's inode: a path can
/// be replaced (by a FIFO, a device, another file) between the mapping and our open, and the open never
/// blocks.
pub(crate) fn open_mapped(
    proc_root: &Path,
    pid: u32,
    m: &Mapping,
) -> Option<(std::fs::File, std::fs::Metadata)> {
    use std::os::unix::fs::MetadataExt;
    let via_map = proc_root.join(format!("{pid}/map_files/{:x}-{:x}", m.start, m.end));
    let via_root = proc_root.join(format!(
        "{pid}/root{}",
        m.path.trim_end_matches(" (deleted)")
    ));
    let candidates = [via_map, via_root, PathBuf::from(&m.path)];
    candidates.iter().find_map(|p| {
        let (f, md) = open_if_regular(p)?;
        (md.ino() == m.inode).then_some((f, md))
    })
}

/// Opens `path` for reading if it is a regular file, without blocking and without ever opening a device
/// (opening one can have effects of its own): looks before opening, checks again what was opened.
pub(crate) fn open_if_regular(path: &Path) -> Option<(std::fs::File, std::fs::Metadata)> {
    use std::os::unix::fs::OpenOptionsExt;
    if !std::fs::metadata(path).ok()?.is_file() {
        return None;
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    let md = f.metadata().ok()?;
    md.is_file().then_some((f, md))
}

#[cfg(test)]
mod tests;
