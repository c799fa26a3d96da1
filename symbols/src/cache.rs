//! A cache of the running kernel's parsed kallsyms, so a start-up does not wait for the kernel to print
//! 100k+ symbols and for us to parse them (most of a watch's start-up time).
//!
//! **Key.** A cached table is used only for the kernel and module set it was read from: the boot id
//! (`/proc/sys/kernel/random/boot_id`, new on every boot, so a new KASLR layout never meets an old table),
//! the release and build-id (handed in: the caller reads the kernel's notes once for every use), and a hash of `/proc/modules`' names, sizes and load addresses (loading or
//! unloading a module changes kallsyms; reference counts, which change all the time, are left out). The key
//! is read *before* kallsyms, so a module loaded meanwhile makes the stored key older than the content and
//! the next run re-reads, never the other way round.
//!
//! **Secrecy and trust.** kallsyms addresses defeat KASLR, so the file is written 0600 in a directory we
//! create 0700, atomically (a temporary file renamed over the old one); a directory or file owned by another
//! user or writable by group or others is not used (nor written). Every load checks the magic, the format
//! version, the length, the key, a checksum of the table and the table's layout; on any doubt the caller
//! re-parses kallsyms, silently: the cache can make a start slower, never wrong.
//!
//! **What it does not see.** kallsyms also lists symbols the kernel creates at run time (BPF programs and
//! trampolines as `[bpf]`, ftrace and kprobe trampolines). A cached table holds those that existed when it
//! was written; one loaded later is not named (its frames print as addresses) until the key changes or the
//! cache is bypassed (`--no-symbol-cache` on the command line).
//!
//! **Format** (little-endian): `KSWSYMS\0`, version `u32`, body length `u64`, checksum of the table `u64`,
//! then the body: the key (three LEB128-length-prefixed strings and the modules hash `u64`) and the table
//! in the layout it has in memory (`crate::columns`), so a load maps the file and uses the table where it
//! lies: no symbol is decoded, no name copied.

use std::fs::{self, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::{self, Write};

use memmap2::MmapOptions;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::buildid::BuildId;
use crate::columns::Bytes;
use crate::error::Error;
use crate::kallsyms;
use crate::table::SymbolTable;

const MAGIC: &[u8; 8] = b"KSWSYMS\0";
/// 3: every alias at one address is sized (version 2 sized only the last name of each run).
const VERSION: u32 = 3;
const HEADER: usize = 8 + 4 + 8 + 8;
/// A cache file larger than this is not ours (a 200k-symbol kallsyms takes about 9 MiB).
const MAX_FILE: u64 = 256 << 20;
const FILE_NAME: &str = "kallsyms.bin";

/// The directory used when no other is configured.
pub const DEFAULT_DIR: &str = "/var/cache/ksymwatch";

/// Which kernel, boot and module set a table belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey {
    pub boot_id: String,
    pub release: String,
    /// The kernel's build-id in hex, empty when it has none.
    pub build_id: String,
    /// Hash of every loaded module's name, size and address.
    pub modules: u64,
}

impl CacheKey {
    /// The running kernel's key, `build_id` being its build-id (`None`: it has none, or its notes could
    /// not be read); `None` when any other part cannot be read (then nothing is cached).
    pub fn running(build_id: Option<&BuildId>) -> Option<CacheKey> {
        CacheKey::read(Path::new("/proc"), build_id)
    }

    /// The key from a `/proc`-like tree (tests use a made-up one) and the kernel's build-id.
    pub fn read(proc_root: &Path, build_id: Option<&BuildId>) -> Option<CacheKey> {
        let line = |p: &str| {
            fs::read_to_string(proc_root.join(p))
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        };
        // A kernel built without module support has no /proc/modules: its module set never changes.
        let modules = match fs::read_to_string(proc_root.join("modules")) {
            Ok(text) => modules_hash(&text),
            Err(e) if e.kind() == io::ErrorKind::NotFound => modules_hash(""),
            Err(_) => return None,
        };
        Some(CacheKey {
            boot_id: line("sys/kernel/random/boot_id")?,
            release: line("sys/kernel/osrelease")?,
            build_id: build_id.map(BuildId::to_string).unwrap_or_default(),
            modules,
        })
    }
}

/// `/proc/modules` lines are `name size refcount deps state address`: the reference count and users
/// change while a module stays where it is, so only name, size, state and address are hashed.
pub fn modules_hash(text: &str) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    for line in text.lines() {
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        for i in [0, 1, 4, 5] {
            f.get(i).copied().unwrap_or("").hash(&mut h);
        }
    }
    h.finish()
}

/// A cache directory. Nothing is touched until [`SymbolCache::load`] or [`SymbolCache::store`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolCache {
    dir: PathBuf,
}

impl SymbolCache {
    pub fn new(dir: impl Into<PathBuf>) -> SymbolCache {
        SymbolCache { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn file(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    /// The cached table for `key`, or `None` if there is none, it is for another key, or anything about
    /// it is in doubt (ownership, permissions, length, checksum, encoding).
    pub fn load(&self, key: &CacheKey) -> Option<SymbolTable> {
        trusted(&fs::symlink_metadata(&self.dir).ok()?, true)?;
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(self.file())
            .ok()?;
        let meta = file.metadata().ok()?;
        trusted(&meta, false)?;
        if meta.len() > MAX_FILE || meta.len() < HEADER as u64 {
            return None;
        }
        // Mapped, not read, and the table used where it lies: a copy would fault in and zero as many fresh
        // pages again. `populate` maps the (page-cached) file in one go instead of one fault per page.
        // SAFETY: the mapping is read-only and private. The hazard is the file being truncated while mapped
        // (SIGBUS); it is checked above to be ours and writable by nobody else, and the cache only ever
        // replaces it by renaming a new file over it, which leaves this one's pages alone.
        let map = unsafe { MmapOptions::new().populate().map(&file) }.ok()?;
        let start = check(&map, key)?;
        SymbolTable::from_bytes(Bytes::Mapped(map), start)
    }

    /// Writes `table` for `key`: the directory is created 0700 if missing, the file 0600 under a temporary
    /// name and renamed into place, so a reader sees the old file or the new one, never half of one.
    pub fn store(&self, key: &CacheKey, table: &SymbolTable) -> io::Result<()> {
        let bytes = table.bytes();
        self.store_bytes(&header(key, &bytes), &bytes)
    }

    /// [`SymbolCache::store`] of a header and table bytes made beforehand (a write on another thread).
    fn store_bytes(&self, header: &[u8], table: &[u8]) -> io::Result<()> {
        let refused = || io::Error::new(io::ErrorKind::PermissionDenied, "untrusted cache dir");
        match fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
        {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        trusted(&fs::symlink_metadata(&self.dir)?, true).ok_or_else(refused)?;
        let tmp = self
            .dir
            .join(format!(".{FILE_NAME}.{}.tmp", std::process::id()));
        let _ = fs::remove_file(&tmp);
        let written = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)?;
            f.write_all(header)?;
            f.write_all(table)?;
            fs::rename(&tmp, self.file())
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written
    }

    /// Removes the cached table, if any.
    pub fn clear(&self) -> io::Result<()> {
        match fs::remove_file(self.file()) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// Owned by us and writable by nobody else; a directory must be a real one (no symlink), a file regular.
fn trusted(meta: &fs::Metadata, dir: bool) -> Option<()> {
    // SAFETY: geteuid takes no arguments, touches no memory and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let kind_ok = if dir {
        meta.file_type().is_dir()
    } else {
        meta.file_type().is_file()
    };
    (kind_ok && meta.uid() == euid && meta.mode() & 0o022 == 0).then_some(())
}

/// The running kernel's symbol table from `kallsyms`, through `cache` when one is given: a cached table
/// for the running kernel's key (`build_id` its build-id, as its caller read it once for every use) is used
/// as it is; otherwise kallsyms is parsed and the cache rewritten (failing to write it costs only the next
/// start-up). Pass a cache only for the real `/proc/kallsyms`.
pub fn load_kallsyms(
    kallsyms_path: &Path,
    build_id: Option<&BuildId>,
    cache: Option<&SymbolCache>,
) -> Result<(SymbolTable, Origin), Error> {
    // One way down: the key (read before kallsyms: see the module docs), the cached table for it, and only
    // without one the parse of kallsyms itself.
    let key = cache.and_then(|_| CacheKey::running(build_id));
    let cached = cache.zip(key.as_ref()).and_then(|(c, k)| c.load(k));
    if let Some(t) = cached {
        return Ok((t, Origin::Cached));
    }
    let table = kallsyms::load(kallsyms_path)?;
    if let (Some(cache), Some(k)) = (cache, key) {
        // Written later, on a thread: the caller has a watch to arm, and the file is only for the next
        // run. The layout and its checksum are made there too: a table parsed here is not laid out yet.
        let (to, shared) = (cache.clone(), table.share());
        writes().deferred.push(Box::new(move || {
            let _ = to.store(&k, &shared);
        }));
    }
    Ok((table, Origin::Parsed))
}

/// Cache writes [`load_kallsyms`] has to make: not started yet, and started but not waited for.
#[derive(Default)]
struct Writes {
    deferred: Vec<Box<dyn FnOnce() + Send>>,
    running: Vec<std::thread::JoinHandle<()>>,
}

static WRITES: std::sync::Mutex<Writes> = std::sync::Mutex::new(Writes {
    deferred: Vec::new(),
    running: Vec::new(),
});

fn writes() -> std::sync::MutexGuard<'static, Writes> {
    WRITES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Starts the cache writes [`load_kallsyms`] left for later, each on a thread. A front end calls this once
/// its time-critical start is over (a tracer: once its watch is armed), so that laying out and writing
/// the file does not take a CPU from it; [`finish_writes`] starts any still waiting.
pub fn start_writes() {
    let mut w = writes();
    for write in std::mem::take(&mut w.deferred) {
        // A thread that cannot be had costs only this write: the next start parses kallsyms again.
        if let Ok(handle) = std::thread::Builder::new()
            .name("ksymwatch-cache".into())
            .spawn(write)
        {
            w.running.push(handle);
        }
    }
}

/// [`start_writes`] `delay` from now, from a thread of its own (started at once when no thread can be had).
pub fn start_writes_after(delay: std::time::Duration) {
    let later = std::thread::Builder::new()
        .name("ksymwatch-cache".into())
        .spawn(move || {
            std::thread::sleep(delay);
            start_writes();
        });
    if later.is_err() {
        start_writes();
    }
}

/// Starts the writes still waiting and waits for every one: a process ends with this, so that the file is
/// complete (a write cut short leaves a temporary file behind, never a torn cache).
pub fn finish_writes() {
    start_writes();
    let handles = std::mem::take(&mut writes().running);
    for h in handles {
        let _ = h.join();
    }
}

/// Where [`load_kallsyms`] got its table: a cached one lacks the code the kernel created since it was
/// written (BPF programs, trampolines), which a reader of unnamed frames should be told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Parsed from kallsyms just now.
    Parsed,
    /// Read from the cache.
    Cached,
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// Detects a torn or flipped file (the file is ours and private: this guards against accidents, not
/// attackers). Four independent lanes of eight bytes, so the multiplications overlap: a few hundred
/// microseconds for a 122k-symbol table.
fn checksum(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let step = |h: u64, w: u64| (h ^ w).wrapping_mul(K).rotate_left(29);
    let word = |c: &[u8]| {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        u64::from_le_bytes(w)
    };
    let mut lanes = [K ^ bytes.len() as u64, K, !K, K.rotate_left(17)];
    let mut blocks = bytes.chunks_exact(32);
    for block in &mut blocks {
        for (lane, c) in lanes.iter_mut().zip(block.chunks_exact(8)) {
            *lane = step(*lane, word(c));
        }
    }
    let mut h = lanes.iter().fold(0, |h, &l| step(h, l));
    for &b in blocks.remainder() {
        h = step(h, u64::from(b));
    }
    h
}

/// The key as stored: three strings and the modules hash.
fn key_bytes(key: &CacheKey) -> Vec<u8> {
    let mut out = Vec::new();
    put_str(&mut out, &key.boot_id);
    put_str(&mut out, &key.release);
    put_str(&mut out, &key.build_id);
    out.extend_from_slice(&key.modules.to_le_bytes());
    out
}

/// Everything before the table: magic, version, body length, the table's checksum, the key.
fn header(key: &CacheKey, table: &[u8]) -> Vec<u8> {
    let key = key_bytes(key);
    let mut out = Vec::with_capacity(HEADER + key.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&((key.len() + table.len()) as u64).to_le_bytes());
    out.extend_from_slice(&checksum(table).to_le_bytes());
    out.extend_from_slice(&key);
    out
}

/// Reads the body front to back; every read is bounds-checked.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.bytes.len() {
            return None;
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Some(head)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.take(1)?.first()?;
            v |= u64::from(b & 0x7f).checked_shl(shift)?;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn str(&mut self) -> Option<&'a str> {
        let n = usize::try_from(self.varint()?).ok()?;
        std::str::from_utf8(self.take(n)?).ok()
    }
}

/// Checks a cache file's header, key and checksum; where its table starts, or `None`. The table's layout
/// is checked when it is made ([`SymbolTable::from_bytes`]).
fn check(bytes: &[u8], key: &CacheKey) -> Option<usize> {
    let mut r = Reader { bytes };
    if r.take(8)? != MAGIC || r.take(4)? != VERSION.to_le_bytes() {
        return None;
    }
    let len = r.u64()?;
    let sum = r.u64()?;
    if len != r.bytes.len() as u64 {
        return None;
    }
    let stored = CacheKey {
        boot_id: r.str()?.to_string(),
        release: r.str()?.to_string(),
        build_id: r.str()?.to_string(),
        modules: r.u64()?,
    };
    if &stored != key || checksum(r.bytes) != sum {
        return None;
    }
    Some(bytes.len() - r.bytes.len())
}

/// [`check`], then the table: what a load does after mapping the file.
#[cfg(test)]
fn decode(bytes: &[u8], key: &CacheKey) -> Option<SymbolTable> {
    let start = check(bytes, key)?;
    SymbolTable::from_bytes(Bytes::Owned(bytes.to_vec()), start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::SymbolRef;
    use std::os::unix::fs::PermissionsExt;

    const TEXT: &str = "\
ffffffff81000000 T _text
ffffffff81000040 T do_thing
ffffffff81000100 t local_helper
ffffffff83000000 D __start_init_stack
ffffffffc0001000 t foo_init\t[foo]
ffffffffc0001080 t foo_exit\t[foo]
ffffffffc0002000 t bar_fn\t[bar]
ffffffffc0003000 t bpf_prog_1234_x\t[bpf]
";

    fn key() -> CacheKey {
        CacheKey {
            boot_id: "b00t".into(),
            release: "6.18.0-test".into(),
            build_id: "abcd".into(),
            modules: modules_hash("foo 16384 0 - Live 0xffffffffc0001000\n"),
        }
    }

    fn table() -> SymbolTable {
        kallsyms::from_text(TEXT, Path::new("fixture")).unwrap()
    }

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ksymwatch-cache-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    /// A cache in a fresh temporary directory `name`, holding [`table`] under [`key`].
    fn stored(name: &str) -> (PathBuf, SymbolCache) {
        let d = temp_dir(name);
        let c = SymbolCache::new(&d);
        c.store(&key(), &table()).unwrap();
        (d, c)
    }

    #[test]
    fn round_trip_keeps_every_field_and_shares_module_names() {
        let d = temp_dir("round");
        let c = SymbolCache::new(d.join("sub"));
        let t = table();
        c.store(&key(), &t).unwrap();
        let meta = fs::metadata(c.dir()).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        let meta = fs::metadata(c.file()).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let back = c.load(&key()).expect("the cached table loads");
        assert!(back.iter().eq(t.iter()));
        assert_eq!(back.len(), 8);
        let foo: Vec<SymbolRef> = back
            .iter()
            .filter(|s| s.module.map(|m| &**m) == Some("foo"))
            .collect();
        assert_eq!(foo.len(), 2);
        assert!(std::sync::Arc::ptr_eq(
            foo[0].module.unwrap(),
            foo[1].module.unwrap()
        ));
        assert_eq!(
            back.symbolize(0xffffffff81000050).unwrap().to_string(),
            "do_thing+0x10/0xc0"
        );
        assert_eq!(
            back.lookup("__start_init_stack", None).unwrap().addr,
            0xffffffff83000000
        );
        // No temporary file is left behind.
        assert_eq!(fs::read_dir(c.dir()).unwrap().count(), 1);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn another_key_is_a_miss() {
        let (d, c) = stored("key");
        let mut k = key();
        k.boot_id = "other boot".into();
        assert!(c.load(&k).is_none());
        let mut k = key();
        k.modules = modules_hash(
            "foo 16384 0 - Live 0xffffffffc0001000\nbar 8192 0 - Live 0xffffffffc0002000\n",
        );
        assert!(c.load(&k).is_none(), "a module loaded since");
        let mut k = key();
        k.build_id = "ef01".into();
        assert!(c.load(&k).is_none());
        assert!(c.load(&key()).is_some());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn module_refcounts_do_not_change_the_key() {
        assert_eq!(
            modules_hash("foo 16384 0 - Live 0xffffffffc0001000\n"),
            modules_hash("foo 16384 3 bar, Live 0xffffffffc0001000\n")
        );
        assert_ne!(
            modules_hash("foo 16384 0 - Live 0xffffffffc0001000\n"),
            modules_hash("foo 16384 0 - Live 0xffffffffc0009000\n")
        );
    }

    #[test]
    fn writable_by_others_is_refused_for_reading_and_writing() {
        let (d, c) = stored("perms");
        fs::set_permissions(c.file(), fs::Permissions::from_mode(0o622)).unwrap();
        assert!(c.load(&key()).is_none(), "group/other-writable file");
        fs::set_permissions(c.file(), fs::Permissions::from_mode(0o600)).unwrap();
        assert!(c.load(&key()).is_some());
        fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
        assert!(c.load(&key()).is_none(), "world-writable directory");
        assert!(c.store(&key(), &table()).is_err());
        fs::set_permissions(&d, fs::Permissions::from_mode(0o700)).unwrap();
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn another_owner_is_refused() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: changing a file's owner needs root");
            return;
        }
        let (d, c) = stored("owner");
        std::os::unix::fs::chown(c.file(), Some(65534), None).unwrap();
        assert!(c.load(&key()).is_none(), "file owned by nobody");
        std::os::unix::fs::chown(c.file(), Some(0), None).unwrap();
        assert!(c.load(&key()).is_some());
        std::os::unix::fs::chown(&d, Some(65534), None).unwrap();
        assert!(c.load(&key()).is_none(), "directory owned by nobody");
        assert!(c.store(&key(), &table()).is_err());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_symlinked_file_is_not_followed() {
        let (d, c) = stored("link");
        fs::rename(c.file(), d.join("real")).unwrap();
        std::os::unix::fs::symlink(d.join("real"), c.file()).unwrap();
        assert!(c.load(&key()).is_none());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn truncated_or_corrupt_files_are_misses() {
        let (d, c) = stored("corrupt");
        let good = fs::read(c.file()).unwrap();
        let write = |bytes: &[u8]| {
            fs::remove_file(c.file()).unwrap();
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(c.file())
                .unwrap();
            f.write_all(bytes).unwrap();
        };
        for cut in [0, 5, HEADER, good.len() / 2, good.len() - 1] {
            write(&good[..cut]);
            assert!(c.load(&key()).is_none(), "truncated at {cut}");
        }
        for at in [0, 9, HEADER + 3, good.len() - 2] {
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            write(&bad);
            assert!(c.load(&key()).is_none(), "byte {at} flipped");
        }
        let mut longer = good.clone();
        longer.push(0);
        write(&longer);
        assert!(c.load(&key()).is_none(), "trailing byte");
        write(&good);
        assert!(c.load(&key()).is_some());
        fs::remove_dir_all(&d).unwrap();
    }

    /// A file with `table` (any bytes) after `k`, its checksum right.
    fn file_with(k: &CacheKey, table: &[u8]) -> Vec<u8> {
        let key = key_bytes(k);
        let mut file = Vec::new();
        file.extend_from_slice(MAGIC);
        file.extend_from_slice(&VERSION.to_le_bytes());
        file.extend_from_slice(&((key.len() + table.len()) as u64).to_le_bytes());
        file.extend_from_slice(&checksum(table).to_le_bytes());
        file.extend_from_slice(&key);
        file.extend_from_slice(table);
        file
    }

    /// Every question a table answers, on every symbol: none may panic.
    fn ask_everything(t: &SymbolTable) {
        for s in t.iter() {
            let _ = t.symbolize(s.addr.wrapping_add(1));
            let _ = t.by_name(s.name).count();
        }
        let _ = (t.modules(), t.has_data_symbols(), t.suggest("do_thin", 3));
        let _ = t.lookup_in_module("foo_init", "foo", None);
    }

    #[test]
    fn decode_survives_any_table_with_a_valid_checksum() {
        // A table that passes the checksum but is garbage (a bug, not an accident) must still not panic.
        let mut rng = 0x1234_5678u64;
        let mut next = move || {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1);
            (rng >> 33) as u32
        };
        let k = key();
        for len in 0..300 {
            // Small values, so counts and lengths are often plausible.
            let mask = if len % 2 == 0 { 0x0f } else { 0xff };
            let garbage: Vec<u8> = (0..len).map(|_| next() as u8 & mask).collect();
            if let Some(t) = decode(&file_with(&k, &garbage), &k) {
                ask_everything(&t);
            }
        }
        // A real table with one byte changed: counts, offsets, name ends, types, module indices.
        let good = table();
        let bytes = good.bytes();
        let mut accepted = 0;
        for at in 0..bytes.len() {
            for value in [0u8, 1, 0x7f, 0xff, next() as u8] {
                let mut bad = bytes.to_vec();
                bad[at] = value;
                if let Some(t) = decode(&file_with(&k, &bad), &k) {
                    accepted += 1;
                    ask_everything(&t);
                }
            }
        }
        assert!(
            accepted > 0,
            "some changes (in addresses, sizes, names) still make a table"
        );
        assert!(decode(&file_with(&k, &bytes), &k).is_some());
    }

    #[test]
    fn load_kallsyms_fills_then_uses_the_cache() {
        let d = temp_dir("load");
        let ks = d.join("kallsyms");
        fs::create_dir_all(&d).unwrap();
        fs::write(&ks, TEXT).unwrap();
        let c = SymbolCache::new(d.join("cache"));
        let running = CacheKey::running(None);
        let (first, origin) = load_kallsyms(&ks, None, Some(&c)).unwrap();
        finish_writes();
        assert_eq!(first.len(), 8);
        assert_eq!(origin, Origin::Parsed);
        let Some(k) = running else {
            eprintln!("skipped the warm half: this machine's cache key is unreadable");
            return;
        };
        // A cached table is used as it is: prove it by caching a different one under the running key.
        let other = kallsyms::from_text("ffffffff81000000 T only_one\n", Path::new("x")).unwrap();
        c.store(&k, &other).unwrap();
        let (warm, origin) = load_kallsyms(&ks, None, Some(&c)).unwrap();
        assert_eq!(warm.len(), 1);
        assert_eq!(origin, Origin::Cached);
        let (bypassed, origin) = load_kallsyms(&ks, None, None).unwrap();
        assert_eq!(bypassed.len(), 8);
        assert_eq!(origin, Origin::Parsed);
        fs::remove_dir_all(&d).unwrap();
    }
}
