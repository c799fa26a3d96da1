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
mod tests {
    use super::*;

    /// The bytes of our own code, read from the file mapped there, are the ones in memory; an address with
    /// no file mapping, or a read past its mapping, gives none.
    #[test]
    fn reads_the_file_mapped_at_an_address() {
        let f = reads_the_file_mapped_at_an_address as fn() as usize as u64;
        let pid = std::process::id();
        let mut u = UserSymbols::default();
        if !u.read_process(pid) {
            crate::testing::skip(format_args!("no /proc/{pid}/maps to read"));
            return;
        }
        let got = u.read_mapped(pid, f, 16).expect("our own text");
        // SAFETY: 16 bytes of this very function's code, mapped and readable while it runs.
        let mem = unsafe { std::slice::from_raw_parts(f as *const u8, 16) };
        assert_eq!(got, mem);
        assert_eq!(u.read_mapped(pid, 0x1000, 16), None);
        assert_eq!(u.read_mapped(pid, f, 1 << 40), None);
    }

    #[test]
    fn parses_maps_lines() {
        let maps = parse_maps(
            "55d0c0000000-55d0c0001000 r--p 00000000 fd:01 1234 /usr/bin/my prog\n\
             55d0c0001000-55d0c0002000 r-xp 00001000 fd:01 1234 /usr/bin/my prog\n\
             7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n\
             7f0000000000-7f0000001000 rw-p 00000000 00:00 0\n\
             7f0000001000-7f0000002000 r-xp 00000000 fd:01 99                         /tmp/a  b\tc\\012d (deleted)\n",
        );
        assert_eq!(maps.len(), 4);
        // A path as the file has it: spaces and tabs kept, the kernel's `\012` a newline again.
        let odd = maps
            .iter()
            .find(|m| m.inode == 99)
            .expect("the odd path's line");
        assert_eq!(odd.path, "/tmp/a  b\tc\nd (deleted)");
        assert_eq!(basename(&odd.path), "a  b\tc\nd");
        assert_eq!(maps[1].offset, 0x1000);
        assert_eq!(maps[1].path, "/usr/bin/my prog");
        assert_eq!(basename(&maps[1].path), "my prog");
        assert_eq!(basename("/tmp/a.out (deleted)"), "a.out");
    }

    fn mapping(start: u64, end: u64, offset: u64, path: &str) -> Mapping {
        Mapping {
            start,
            end,
            offset,
            path: path.into(),
            name: basename(path).into(),
            dev: "fd:01".into(),
            inode: 1,
            bin: None,
        }
    }

    /// A `MAP_FIXED` mapping over part of older ones cuts them, keeping the file offsets of what is left.
    #[test]
    fn a_new_mapping_replaces_what_it_covers() {
        let mut p = Proc::default();
        p.insert(mapping(0x1000, 0x5000, 0, "/a"));
        p.insert(mapping(0x8000, 0x9000, 0, "/c"));
        p.insert(mapping(0x2000, 0x3000, 0x7000, "/b"));
        let got: Vec<(u64, u64, u64, &str)> = p
            .maps
            .iter()
            .map(|m| (m.start, m.end, m.offset, m.path.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (0x1000, 0x2000, 0, "/a"),
                (0x2000, 0x3000, 0x7000, "/b"),
                (0x3000, 0x5000, 0x2000, "/a"),
                (0x8000, 0x9000, 0, "/c"),
            ]
        );
        // A snapshot lacking a mapping keeps it; one still the same keeps its loaded binary.
        let mut p = Proc::default();
        p.insert(mapping(0x1000, 0x2000, 0, "/a"));
        p.insert(Mapping {
            bin: Some(None),
            ..mapping(0x4000, 0x5000, 0, "/b")
        });
        p.merge(vec![
            mapping(0x4000, 0x5000, 0, "/b"),
            mapping(0x7000, 0x8000, 0, "/e"),
        ]);
        let got: Vec<(u64, &str, bool)> = p
            .maps
            .iter()
            .map(|m| (m.start, m.path.as_str(), m.bin.is_some()))
            .collect();
        assert_eq!(
            got,
            [
                (0x1000, "/a", false),
                (0x4000, "/b", true),
                (0x7000, "/e", false)
            ]
        );
        // The same mapping reported twice (two events covering one thread) is one mapping.
        p.insert(mapping(0x8000, 0x9000, 0, "/c"));
        p.insert(mapping(0x0, 0x10000, 0, "/d"));
        assert_eq!(p.maps.len(), 1);
    }

    /// This test binary's executable segment "mapped" PIE-style at a made-up base, and a sized function
    /// in it: what a fixture process maps.
    struct Text {
        exe: PathBuf,
        inode: u64,
        start: u64,
        end: u64,
        offset: u64,
        /// A runtime address 5 bytes into `name`.
        runtime: u64,
        name: String,
        size: u64,
    }

    fn this_binarys_text() -> Text {
        let exe = std::env::current_exe().unwrap();
        let bytes = std::fs::read(&exe).unwrap();
        let elf = goblin::elf::Elf::parse(&bytes).unwrap();
        let bin = Binary::parse(&bytes).0.unwrap();
        let text = elf
            .program_headers
            .iter()
            .find(|p| p.p_type == goblin::elf::program_header::PT_LOAD && p.is_executable())
            .unwrap();
        // A sized function inside the executable segment.
        let (addr, size, name) = bin
            .functions()
            .find(|&(addr, size, _)| {
                size > 16 && addr >= text.p_vaddr && addr + size <= text.p_vaddr + text.p_filesz
            })
            .unwrap();
        let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&exe).unwrap());
        let base = 0x5555_0000_0000u64;
        let page = 0xfff;
        Text {
            exe,
            inode,
            start: base + (text.p_vaddr & !page),
            end: base + ((text.p_vaddr + text.p_memsz + page) & !page),
            offset: text.p_offset & !page,
            runtime: base + addr + 5,
            name,
            size,
        }
    }

    /// A process learned only from the kernel's records, never from /proc (the fixture /proc is empty, as
    /// for a writer that exited before its hit was named): its mapping names frames, a forked child
    /// inherits it, an exec drops it, and forgetting the process lets go of everything.
    #[test]
    fn mappings_from_the_kernel_name_a_process_that_is_gone_from_proc() {
        let t = this_binarys_text();
        let empty = std::env::temp_dir().join(format!("ksymwatch-noproc-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        let mut u = UserSymbols::new(&empty);
        let path = t.exe.to_string_lossy();
        u.map(
            42,
            &MappedFile {
                start: t.start,
                len: t.end - t.start,
                offset: t.offset,
                dev: (0xfd, 1),
                inode: t.inode,
                path: &path,
            },
        );
        // Memory with no file is not a mapping to name frames by.
        u.map(
            42,
            &MappedFile {
                start: 0x1000,
                len: 0x1000,
                offset: 0,
                dev: (0, 0),
                inode: 0,
                path: "//anon",
            },
        );
        let runtime = t.runtime;
        let want = Some((t.name.as_str().into(), 5, Some(t.size)));
        assert_eq!(u.lookup(42, runtime).unwrap().sym, want);
        // Exited but not reaped yet, /proc has the process with no mappings; in the middle of exec, with
        // only its stack. A miss reads them, and that must not wipe what the kernel reported.
        std::fs::create_dir_all(empty.join("42")).unwrap();
        for maps in [
            "",
            "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n",
        ] {
            std::fs::write(empty.join("42/maps"), maps).unwrap();
            u.procs.get_mut(&42).unwrap().read_at = None;
            assert_eq!(u.lookup(42, 0x1800), None);
            assert_eq!(u.lookup(42, runtime).unwrap().sym, want, "maps {maps:?}");
        }
        u.fork(42, 43);
        assert_eq!(u.lookup(43, runtime).unwrap().sym, want, "a fork child");
        assert!(
            Arc::ptr_eq(&u.procs[&42].maps, &u.procs[&43].maps),
            "the fork copied nothing"
        );
        u.exec(43);
        assert_eq!(u.lookup(43, runtime), None, "exec dropped the old program");
        assert_eq!(u.binaries(), 1);
        u.forget(42);
        u.forget(43);
        assert_eq!(u.processes(), 0);
        assert_eq!(u.lookup(42, runtime), None);
        std::fs::remove_dir_all(&empty).unwrap();
    }

    /// A process whose main thread alone exited: its leader's maps are empty (a zombie's), a live
    /// thread's show the memory; the leader itself, and a true zombie with no other thread, are no answer.
    #[test]
    fn a_live_thread_stands_in_for_an_exited_leader() {
        let root =
            std::env::temp_dir().join(format!("ksymwatch-leaderless-{}", std::process::id()));
        let maps = "55e000000000-55e000001000 r-xp 00000000 fd:01 77 /usr/bin/prog\n";
        for (task, text) in [("42", ""), ("43", ""), ("44", maps)] {
            std::fs::create_dir_all(root.join(format!("42/task/{task}"))).unwrap();
            std::fs::write(root.join(format!("42/task/{task}/maps")), text).unwrap();
        }
        std::fs::write(root.join("42/maps"), "").unwrap();
        assert_eq!(live_thread_dir(&root, 42), Some(root.join("42/task/44")));
        std::fs::create_dir_all(root.join("50/task/50")).unwrap();
        std::fs::write(root.join("50/task/50/maps"), maps).unwrap();
        assert_eq!(
            live_thread_dir(&root, 50),
            None,
            "the leader is not its own stand-in"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// A command read between its fork and its exec (the start-up scan races its launch) shows its
    /// parent's mappings; read again at its exec stop, only the program's own count, at once, though the
    /// first read was a moment ago.
    #[test]
    fn a_read_at_the_exec_stop_replaces_a_read_from_before_the_exec() {
        let t = this_binarys_text();
        let proc = std::env::temp_dir().join(format!("ksymwatch-execread-{}", std::process::id()));
        std::fs::create_dir_all(proc.join("50")).unwrap();
        let line = |start: u64, end: u64, offset: u64, inode: u64, path: &str| {
            format!("{start:x}-{end:x} r-xp {offset:08x} fd:01 {inode} {path}\n")
        };
        // Before the exec: the parent's program, where the new one will not be.
        std::fs::write(
            proc.join("50/maps"),
            line(0x7f00_0000_0000, 0x7f00_0001_0000, 0, 7, "/usr/bin/parent"),
        )
        .unwrap();
        let mut u = UserSymbols::new(&proc);
        u.scan_all();
        assert_eq!(
            u.lookup(50, 0x7f00_0000_1000).unwrap().binary.as_ref(),
            "parent"
        );
        let path = t.exe.to_string_lossy();
        std::fs::write(
            proc.join("50/maps"),
            line(t.start, t.end, t.offset, t.inode, &path),
        )
        .unwrap();
        assert!(u.read_process(50));
        let want = Some((t.name.as_str().into(), 5, Some(t.size)));
        assert_eq!(u.lookup(50, t.runtime).unwrap().sym, want);
        assert_eq!(
            u.lookup(50, 0x7f00_0000_1000),
            None,
            "the old program is gone"
        );
        std::fs::remove_dir_all(&proc).unwrap();
    }

    /// A frame left unnamed says why: no process, maps never read or unreadable (an exited process), or an
    /// address outside every file mapping read.
    #[test]
    fn an_unnamed_address_says_why() {
        let dir = std::env::temp_dir().join(format!("ksymwatch-unnamed-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("proc/7")).unwrap();
        std::fs::write(
            dir.join("proc/7/maps"),
            "00400000-00401000 r-xp 00000000 fd:01 42 /usr/bin/prog\n",
        )
        .unwrap();
        let mut u = UserSymbols::new(dir.join("proc"));
        assert_eq!(u.why_unnamed(0), "no process (pid 0)");
        assert!(u.lookup(9, 0x40_0010).is_none());
        assert!(
            u.why_unnamed(9).contains("could not be read"),
            "{}",
            u.why_unnamed(9)
        );
        assert!(u.why_unnamed(8).contains("never read"));
        assert!(u.lookup(7, 0x40_0010).is_some());
        assert!(u.lookup(7, 0x7f00_0000).is_none());
        assert!(u.why_unnamed(7).starts_with("in no file mapping"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Binaries no remembered process maps are kept only up to the bound, the least recently used going
    /// first; one a process still maps stays until that process is forgotten.
    #[test]
    fn the_binary_cache_is_bounded_by_what_processes_still_map() {
        let dir = std::env::temp_dir().join(format!("ksymwatch-bins-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut u = UserSymbols::new(dir.join("proc"));
        let map_file = |u: &mut UserSymbols, pid: u32, path: &Path| {
            let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(path).unwrap());
            u.map(
                pid,
                &MappedFile {
                    start: 0x10_0000,
                    len: 0x1000,
                    offset: 0,
                    dev: (0xfd, 1),
                    inode,
                    path: &path.to_string_lossy(),
                },
            );
            assert!(u.lookup(pid, 0x10_0010).is_some());
        };
        // A process that stays: the ELF file it maps (this test binary) is held by its mapping, kept
        // however many other files come and go.
        let exe = std::env::current_exe().unwrap();
        map_file(&mut u, 2, &exe);
        for i in 0..3 * BINARIES_KEPT as u32 {
            let f = dir.join(format!("bin{i}"));
            std::fs::write(&f, b"not elf either").unwrap();
            map_file(&mut u, 100 + i, &f);
            u.forget(100 + i);
            assert!(u.binaries() <= BINARIES_KEPT + 1, "{} cached", u.binaries());
        }
        let has = |u: &UserSymbols, p: &Path| u.binaries.keys().any(|k| Path::new(&k.path) == p);
        assert!(has(&u, &exe), "still mapped by process 2");
        u.forget(2);
        for i in 0..BINARIES_KEPT as u32 {
            let f = dir.join(format!("later{i}"));
            std::fs::write(&f, b"x").unwrap();
            map_file(&mut u, 1000 + i, &f);
            u.forget(1000 + i);
        }
        assert!(!has(&u, &exe), "evicted once nothing maps it");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// This test binary, "mapped" PIE-style at a made-up base through a fixture /proc: a function's runtime
    /// address must come back as that function, through the file offset and PT_LOAD translation.
    #[test]
    fn names_a_function_of_a_mapped_pie_through_a_fixture_proc() {
        let Text {
            exe,
            inode,
            start,
            end,
            offset,
            runtime,
            name,
            size,
        } = this_binarys_text();
        let dir = std::env::temp_dir().join(format!("ksymwatch-user-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("42")).unwrap();
        std::fs::write(
            dir.join("42/maps"),
            format!(
                "{start:x}-{end:x} r-xp {offset:08x} fd:01 {inode} {}\n",
                exe.display()
            ),
        )
        .unwrap();
        let mut u = UserSymbols::new(&dir);
        let got = u.lookup(42, runtime).unwrap();
        assert_eq!(*got.binary, *exe.file_name().unwrap().to_string_lossy());
        assert_eq!(got.sym, Some((name.as_str().into(), 5, Some(size))));
        // The process "exits": what was learned stays.
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(&*u.lookup(42, runtime).unwrap().sym.unwrap().0, name);
        assert_eq!(u.lookup(42, 0x10), None);
        assert_eq!(u.lookup(0, runtime), None);
    }
}
