//! Naming user-space frames: a process's `/proc/PID/maps` says which file an address is in and where; that
//! file's ELF symbols (`.symtab`, else `.dynsym`) say which function. Each binary is read once and cached by
//! device, inode, path and mtime, whichever process maps it; each process's maps are read on its first hit
//! and again when an address falls outside every known mapping (a library loaded later), and are kept after
//! the process exits, so a short-lived writer still gets names for hits printed after it is gone. Every
//! process alive at the start is read while the tracer starts ([`UserSymbols::scan_all`]); one that starts later and exits
//! within a drain tick of its first hit keeps its frames unnamed (PERF_RECORD_MMAP2 would close that gap).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rustc_hash::FxHashMap;

pub(crate) mod elf;

pub use elf::{Binary, Skipped, MAX_TABLE};

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

#[derive(Debug, Default)]
struct Proc {
    maps: Vec<Mapping>,
    read_at: Option<Instant>,
}

/// Rust (legacy and v0) and Itanium C++ names demangled; anything else as it is.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        // `{:#}` leaves out the hash suffix.
        return format!("{d:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(s) = cpp_demangle::Symbol::new(name) {
            if let Ok(d) = s.demangle() {
                return d;
            }
        }
    }
    name.to_string()
}

/// Parses `/proc/PID/maps` text; lines it does not understand are skipped.
pub(crate) fn parse_maps(text: &str) -> Vec<Mapping> {
    let mut maps: Vec<Mapping> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (range, _perms, offset, dev, inode) =
                (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
            let (start, end) = range.split_once('-')?;
            // The path is the rest of the line and may hold spaces.
            let path = f.collect::<Vec<_>>().join(" ");
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
    binaries: HashMap<BinKey, Option<Arc<Binary>>>,
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
            notes: Vec::new(),
        }
    }

    /// Reads the maps of every process alive now. Run while a session starts: a
    /// writer that exits within a tick of its hits would otherwise be gone before its first hit is named.
    /// (Processes started later are read on their first hit.)
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
                if let Some(slot) = self.procs.get_mut(&pid).and_then(|p| p.maps.get_mut(i)) {
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

    /// Index of the mapping of `pid` that contains `addr`.
    fn mapping(&self, pid: u32, addr: u64) -> Option<usize> {
        let maps = &self.procs.get(&pid)?.maps;
        let i = maps.partition_point(|m| m.start <= addr).checked_sub(1)?;
        (addr < maps[i].end).then_some(i)
    }

    /// Re-reads a process's maps, unless it was read very recently; a process that has exited keeps what
    /// was learned. Returns whether anything new was read.
    fn refresh(&mut self, pid: u32) -> bool {
        let p = self.procs.entry(pid).or_default();
        if p.read_at.is_some_and(|t| t.elapsed() < REFRESH_EVERY) {
            return false;
        }
        p.read_at = Some(Instant::now());
        match std::fs::read_to_string(self.proc_root.join(format!("{pid}/maps"))) {
            Ok(text) => {
                p.maps = parse_maps(&text);
                true
            }
            Err(_) => false,
        }
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
        if let Some(b) = self.binaries.get(&key) {
            return b.clone();
        }
        let (loaded, skipped) = Binary::load(&file);
        if let Some(Skipped(why)) = skipped {
            self.notes
                .push(format!("symbols of {} left out: {why}", m.path));
        }
        let loaded = loaded.map(Arc::new);
        self.binaries.insert(key, loaded.clone());
        loaded
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

    #[test]
    fn demangles_rust_and_cpp() {
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("main"), "main");
    }

    #[test]
    fn parses_maps_lines() {
        let maps = parse_maps(
            "55d0c0000000-55d0c0001000 r--p 00000000 fd:01 1234 /usr/bin/my prog\n\
             55d0c0001000-55d0c0002000 r-xp 00001000 fd:01 1234 /usr/bin/my prog\n\
             7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n\
             7f0000000000-7f0000001000 rw-p 00000000 00:00 0\n",
        );
        assert_eq!(maps.len(), 3);
        assert_eq!(maps[1].offset, 0x1000);
        assert_eq!(maps[1].path, "/usr/bin/my prog");
        assert_eq!(basename(&maps[1].path), "my prog");
        assert_eq!(basename("/tmp/a.out (deleted)"), "a.out");
    }

    /// This test binary, "mapped" PIE-style at a made-up base through a fixture /proc: a function's runtime
    /// address must come back as that function, through the file offset and PT_LOAD translation.
    #[test]
    fn names_a_function_of_a_mapped_pie_through_a_fixture_proc() {
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
        let start = base + (text.p_vaddr & !page);
        let end = base + ((text.p_vaddr + text.p_memsz + page) & !page);
        let dir = std::env::temp_dir().join(format!("ksymwatch-user-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("42")).unwrap();
        std::fs::write(
            dir.join("42/maps"),
            format!(
                "{start:x}-{end:x} r-xp {:08x} fd:01 {inode} {}\n",
                text.p_offset & !page,
                exe.display()
            ),
        )
        .unwrap();
        let mut u = UserSymbols::new(&dir);
        let runtime = base + addr + 5;
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
