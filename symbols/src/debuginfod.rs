//! A debuginfod client for the running kernel's vmlinux: `GET URL/buildid/HEX/debuginfo` from the servers
//! in `DEBUGINFOD_URLS`, into the cache every debuginfod client shares (elfutils' layout,
//! `CACHE/HEX/debuginfo`), so a vmlinux gdb or perf fetched serves ksymwatch and the other way round.
//!
//! Nothing half-written ever sits at `CACHE/HEX/debuginfo`: a download streams into a uniquely named
//! temporary file beside it, which a guard removes on every way out (errors and panics alike; a stop
//! signal too, when the caller asks for it with [`Debuginfod::with_interrupt_cleanup`]; what a SIGKILL
//! leaves, the next fetch removes), and only a complete file whose ELF build-id is the one asked for is
//! synced and renamed into place. A cached file is trusted only after the same build-id check, so a file
//! some other tool left there for another build is not used.
//!
//! A server is not trusted to be sane: what it sends must start with the ELF magic (checked on the first
//! bytes, so a server answering with an HTML page or endless junk is dropped at once), it may not send
//! more than a size limit (refused from `Content-Length` before reading, else stopped at the limit), and
//! the whole fetch (connect, headers, body, every server in turn) ends at one deadline, so a server that
//! trickles a byte now and then cannot hold the run forever.

mod interrupt;

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::buildid::BuildId;
use crate::error::Error;
use crate::progress::{NoProgress, Progress, Running, Task};
use crate::vmlinux::Vmlinux;

pub use crate::error::debuginfod::{
    BadFile, FailureKind, Limit, Need, Received, ServerFailure, Unfetched, UnusableCache,
};

/// The servers to ask, space-separated, as elfutils reads it.
pub const URLS_ENV: &str = "DEBUGINFOD_URLS";
/// Overrides where the cache is (elfutils' name, so every client shares one).
pub const CACHE_ENV: &str = "DEBUGINFOD_CACHE_PATH";

/// The most a server may send: the largest real vmlinux with debug info is well under 1 GiB, so twice
/// that and more is junk that would only fill the disk.
pub const DEFAULT_MAX_SIZE: u64 = 2 << 30;
/// The whole fetch, every server included, ends by then: a 1 GiB vmlinux at 2 MB/s fits.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(600);

/// How long to wait for a server to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one read may wait for bytes, the response headers included (a debuginfod server may first
/// unpack a large package before it answers): a server that sends nothing for this long is given up on.
const STALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Free space a download leaves on the cache's file system, at the least: filling a disk to the last
/// block breaks everything else on it, even if the file is removed a moment later.
const RESERVE: u64 = 64 << 20;
/// How often (in bytes written) a body of unknown size checks the free space again.
const SPACE_CHECK_EVERY: u64 = 16 << 20;
/// The ELF magic every answer must start with.
const ELF_MAGIC: &[u8; 4] = b"\x7fELF";

/// A debuginfod client: the servers to ask and the cache to keep what they send in.
#[derive(Debug, Clone)]
pub struct Debuginfod {
    urls: Vec<String>,
    cache_dir: PathBuf,
    progress: Arc<dyn Progress>,
    interruptible: bool,
    connect_timeout: Duration,
    stall_timeout: Duration,
    deadline: Duration,
    max_size: u64,
}

/// Where [`Debuginfod::fetch`] found the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// Already in the cache, with the right build-id; nothing was requested.
    Cached(PathBuf),
    /// Downloaded now: `bytes` long, from the server whose URL prefix is `from`.
    Downloaded {
        path: PathBuf,
        bytes: u64,
        from: String,
    },
}

impl Fetched {
    pub fn path(&self) -> &Path {
        match self {
            Fetched::Cached(p) | Fetched::Downloaded { path: p, .. } => p,
        }
    }
}

/// What the cache holds for a build-id.
enum Cached {
    Hit(PathBuf),
    Missing,
    /// A file is there but cannot stand in for the build-id.
    Unusable(UnusableCache),
}

/// Why one server did not deliver.
enum Attempt {
    /// Its own failure (one of the client's limits among them, after which no other server is asked).
    Failed(FailureKind),
    /// The cache itself cannot be written: no other server can help with that.
    Cache(Error),
}

impl Debuginfod {
    /// The client `DEBUGINFOD_URLS` asks for, with the standard cache; `None` unless it names a server
    /// (or when no cache directory can be named: no `DEBUGINFOD_CACHE_PATH`, `XDG_CACHE_HOME` or `HOME`).
    pub fn from_env() -> Option<Debuginfod> {
        let urls = parse_urls(&std::env::var_os(URLS_ENV)?.to_string_lossy());
        if urls.is_empty() {
            return None;
        }
        Some(Debuginfod::new(urls, Debuginfod::default_cache_dir()?))
    }

    pub fn new(urls: Vec<String>, cache_dir: PathBuf) -> Debuginfod {
        Debuginfod {
            urls,
            cache_dir,
            progress: Arc::new(NoProgress),
            interruptible: false,
            connect_timeout: CONNECT_TIMEOUT,
            stall_timeout: STALL_TIMEOUT,
            deadline: DEFAULT_DEADLINE,
            max_size: DEFAULT_MAX_SIZE,
        }
    }

    /// Where the fetch reports how far it got: a [`Progress::note`] `debuginfod: connecting to URL ...`
    /// for each server asked, then a [`Task::Download`] while a server sends the file. Nothing is
    /// reported by default.
    pub fn with_progress(mut self, progress: Arc<dyn Progress>) -> Debuginfod {
        self.progress = progress;
        self
    }

    /// Gives up on a server that sends nothing for this long (tests use a short one).
    pub fn with_stall_timeout(mut self, t: Duration) -> Debuginfod {
        self.stall_timeout = t;
        self
    }

    /// The whole fetch (connections, headers and bodies, every server in turn) ends after this long.
    pub fn with_deadline(mut self, t: Duration) -> Debuginfod {
        self.deadline = t;
        self
    }

    /// The most bytes a server may send.
    pub fn with_max_size(mut self, bytes: u64) -> Debuginfod {
        self.max_size = bytes;
        self
    }

    /// A stop signal (SIGINT, SIGTERM, SIGHUP) during [`Debuginfod::fetch`] removes the temporary file,
    /// prints one line, and ends the process by that signal. For a command-line tool, not a library
    /// caller with its own signal handling: it replaces the handlers of those signals while fetching.
    pub fn with_interrupt_cleanup(mut self, on: bool) -> Debuginfod {
        self.interruptible = on;
        self
    }

    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    /// The cache elfutils' client uses, by its rule: `$DEBUGINFOD_CACHE_PATH`; else
    /// `$HOME/.debuginfod_client_cache` if that directory exists (older clients made it); else
    /// `$XDG_CACHE_HOME/debuginfod_client`; else `$HOME/.cache/debuginfod_client`. Empty variables count as
    /// unset. `None` when none of them names a place (elfutils would fall back on `/`; writing a cache
    /// into the root directory is not something to do unasked).
    pub fn default_cache_dir() -> Option<PathBuf> {
        cache_dir_from(|k| std::env::var_os(k), |p| p.is_dir())
    }

    /// `CACHE/HEX/debuginfo` when it is there and its ELF build-id is `id`.
    pub fn cached(cache_dir: &Path, id: &BuildId) -> Option<PathBuf> {
        match check_cache(cache_dir, id) {
            Cached::Hit(p) => Some(p),
            Cached::Missing | Cached::Unusable(_) => None,
        }
    }

    /// The vmlinux (debug info) with build-id `id`: from the cache if it holds it, else from the first
    /// server in turn that has it, stored in the cache. On failure nothing new is left in the cache.
    pub fn fetch(&self, id: &BuildId) -> Result<Fetched, Error> {
        let cached = match check_cache(&self.cache_dir, id) {
            Cached::Hit(p) => return Ok(Fetched::Cached(p)),
            Cached::Missing => None,
            Cached::Unusable(u) => Some(Box::new(u)),
        };
        let _signals = self.interruptible.then(interrupt::Guard::install);
        let end = Instant::now() + self.deadline;
        let mut missing = Vec::new();
        let mut failed = Vec::new();
        for url in &self.urls {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                failed.push(ServerFailure {
                    url: url.clone(),
                    kind: FailureKind::NotAsked {
                        deadline: self.deadline,
                    },
                });
                continue;
            }
            // The global timeout is what stops a server that trickles: it bounds every read, headers
            // and body alike, by the time left of the whole fetch.
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .timeout_global(Some(left))
                .timeout_connect(Some(self.connect_timeout))
                .timeout_per_read(Some(self.stall_timeout))
                .max_redirects(8)
                .user_agent(concat!("ksymwatch/", env!("CARGO_PKG_VERSION")))
                .build()
                .into();
            match self.download(&agent, url, id, end) {
                Ok((path, bytes)) => {
                    return Ok(Fetched::Downloaded {
                        path,
                        bytes,
                        from: url.clone(),
                    })
                }
                Err(Attempt::Failed(FailureKind::NotFound)) => missing.push(url.clone()),
                Err(Attempt::Failed(kind)) => failed.push(ServerFailure {
                    url: url.clone(),
                    kind,
                }),
                Err(Attempt::Cache(e)) => return Err(e),
            }
        }
        if failed.is_empty() {
            return Err(Error::DebuginfodNotFound {
                build_id: id.clone(),
                tried: missing,
                cached,
            });
        }
        // The servers that failed are what the user can act on; those without the file come last.
        failed.extend(missing.into_iter().map(|url| ServerFailure {
            url,
            kind: FailureKind::NotFound,
        }));
        Err(Error::DebuginfodFailed {
            build_id: id.clone(),
            cached,
            failures: failed,
        })
    }

    /// One server: the response streamed into a temporary file, checked, and renamed into place.
    fn download(
        &self,
        agent: &ureq::Agent,
        url: &str,
        id: &BuildId,
        end: Instant,
    ) -> Result<(PathBuf, u64), Attempt> {
        let hex = id.to_string();
        let request = format!("{}/buildid/{hex}/debuginfo", url.trim_end_matches('/'));
        if self.interruptible {
            interrupt::publish(&request, None, None, false);
        }
        self.progress
            .note(&format!("debuginfod: connecting to {request} ..."));
        let mut response = match agent.get(&request).call() {
            Ok(r) => r,
            Err(ureq::Error::StatusCode(404)) => {
                return Err(Attempt::Failed(FailureKind::NotFound))
            }
            Err(ureq::Error::StatusCode(code)) => {
                return Err(Attempt::Failed(FailureKind::Status(code)))
            }
            Err(e) => return Err(self.transfer_error(e, Received::Nothing)),
        };
        let expected = response.body().content_length();
        if let Some(n) = expected.filter(|&n| n > self.max_size) {
            return Err(Attempt::Failed(FailureKind::Offers {
                bytes: n,
                limit: self.max_size,
            }));
        }
        let dir = self.cache_dir.join(&hex);
        let mut partial = Partial::create(&dir)?;
        if let Some(n) = expected {
            check_room(&dir, n)?;
        }
        let mut next_space_check = SPACE_CHECK_EVERY;
        let running = Running::start(&*self.progress, Task::Download { url }, expected);
        if self.interruptible {
            // What the progress reporter drew on a terminal's last line is cleared before the
            // handler's message; this crate cannot know whether it drew anything there.
            interrupt::publish(
                &request,
                Some(&partial.path),
                partial.made_dir.as_deref(),
                io::stderr().is_terminal(),
            );
        }
        let mut reader = response.body_mut().as_reader();
        let mut buf = vec![0u8; 256 * 1024];
        let mut got = 0u64;
        let received = |got: u64| Received::Body { got, of: expected };
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.read_error(e, received(got))),
            };
            let chunk = &buf[..n];
            // The magic is checked on the very first bytes, however few arrive at a time: a server
            // that answers with anything else is dropped before it can send more.
            if got < ELF_MAGIC.len() as u64 {
                let at = got as usize;
                let want = &ELF_MAGIC[at..(at + n).min(ELF_MAGIC.len())];
                if !chunk.starts_with(want) {
                    return Err(Attempt::Failed(FailureKind::NotElf {
                        start: chunk[..n.min(16)].to_vec(),
                        after: got + n as u64,
                    }));
                }
            }
            if got + n as u64 > self.max_size {
                return Err(Attempt::Failed(FailureKind::OverLimit {
                    limit: self.max_size,
                }));
            }
            // ureq checks the deadline on every network read; this also covers bytes it had buffered.
            if Instant::now() > end {
                return Err(Attempt::Failed(FailureKind::Deadline {
                    deadline: self.deadline,
                    when: received(got),
                }));
            }
            if expected.is_none() && got + n as u64 >= next_space_check {
                check_room(&dir, SPACE_CHECK_EVERY)?;
                next_space_check += SPACE_CHECK_EVERY;
            }
            partial.write(chunk)?;
            got += n as u64;
            running.advance(got);
        }
        drop(running);
        if let Some(of) = expected.filter(|&n| n != got) {
            return Err(Attempt::Failed(FailureKind::ClosedEarly { got, of }));
        }
        partial.sync()?;
        if let Some(bad) = bad_file(&partial.path, id) {
            return Err(Attempt::Failed(FailureKind::BadFile(bad)));
        }
        let path = dir.join("debuginfo");
        partial.persist(&path)?;
        if self.interruptible {
            // The file is in place: a signal from now on has nothing to remove.
            interrupt::publish(&request, None, None, false);
        }
        Ok((path, got))
    }

    /// What a ureq error means for this server, `when` it came.
    fn transfer_error(&self, e: ureq::Error, when: Received) -> Attempt {
        Attempt::Failed(match e {
            ureq::Error::Timeout(ureq::Timeout::Global) => FailureKind::Deadline {
                deadline: self.deadline,
                when,
            },
            ureq::Error::Timeout(ureq::Timeout::Connect) => FailureKind::Connect {
                timeout: self.connect_timeout,
            },
            ureq::Error::Timeout(ureq::Timeout::PerRead) => FailureKind::Stalled {
                timeout: self.stall_timeout,
                when,
            },
            e if when != Received::Nothing => FailureKind::BrokeOff {
                when,
                source: Box::new(e),
            },
            e => FailureKind::Transfer(e),
        })
    }

    /// A failed read of the body: ureq's own error (a timeout among them) when it wraps one.
    fn read_error(&self, e: io::Error, when: Received) -> Attempt {
        match e.downcast::<ureq::Error>() {
            Ok(u) => self.transfer_error(u, when),
            Err(e) => Attempt::Failed(FailureKind::BrokeOff {
                when,
                source: Box::new(e),
            }),
        }
    }
}

/// The servers in a `DEBUGINFOD_URLS` value: space-separated URL prefixes. elfutils' `ima:` policy tags
/// are not servers and are skipped.
pub fn parse_urls(value: &str) -> Vec<String> {
    value
        .split_whitespace()
        .filter(|u| !u.starts_with("ima:"))
        .map(str::to_string)
        .collect()
}

/// [`Debuginfod::default_cache_dir`] with the environment and the file system passed in (for tests).
fn cache_dir_from(
    env: impl Fn(&str) -> Option<OsString>,
    is_dir: impl Fn(&Path) -> bool,
) -> Option<PathBuf> {
    let var = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(p) = var(CACHE_ENV) {
        return Some(p);
    }
    let home = var("HOME");
    if let Some(old) = home.as_ref().map(|h| h.join(".debuginfod_client_cache")) {
        if is_dir(&old) {
            return Some(old);
        }
    }
    if let Some(xdg) = var("XDG_CACHE_HOME") {
        return Some(xdg.join("debuginfod_client"));
    }
    home.map(|h| h.join(".cache/debuginfod_client"))
}

fn check_cache(cache_dir: &Path, id: &BuildId) -> Cached {
    let path = cache_dir.join(id.to_string()).join("debuginfo");
    match fs::metadata(&path) {
        // elfutils marks a lookup that failed with an empty file (its negative cache): no file to use.
        Ok(m) if m.is_file() && m.len() == 0 => return Cached::Missing,
        Ok(_) => {}
        Err(_) => return Cached::Missing,
    }
    match bad_file(&path, id) {
        None => Cached::Hit(path),
        Some(problem) => Cached::Unusable(UnusableCache { path, problem }),
    }
}

/// What keeps the ELF file at `path` from standing in for build-id `id`; `None` when nothing does.
fn bad_file(path: &Path, id: &BuildId) -> Option<BadFile> {
    match Vmlinux::open(path) {
        Ok(vm) => match vm.build_id() {
            Some(b) if b == id => None,
            Some(b) => Some(BadFile::OtherBuild {
                found: b.clone(),
                wanted: id.clone(),
            }),
            None => Some(BadFile::NoBuildId),
        },
        Err(e) => Some(BadFile::Unreadable(Box::new(e))),
    }
}

/// Bytes available to this user on the file system holding `dir`, or `None` when it cannot be told.
fn free_bytes(dir: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str())).ok()?;
    // SAFETY: statvfs is plain data, written by the call; `c` is a NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Whether `more` bytes fit beside the [`RESERVE`] when `free` are available.
fn fits(free: u64, more: u64) -> bool {
    more.checked_add(RESERVE).is_some_and(|need| need <= free)
}

/// Refuses (as a cache error: no other server can help) to write `more` bytes into `dir` when that
/// would leave less than [`RESERVE`] free.
fn check_room(dir: &Path, more: u64) -> Result<(), Attempt> {
    match free_bytes(dir) {
        Some(free) if !fits(free, more) => Err(cache_error(
            dir,
            io::Error::new(
                io::ErrorKind::StorageFull,
                format!(
                    "{more} more bytes would leave less than {} MiB of the {free} bytes free",
                    RESERVE >> 20
                ),
            ),
        )),
        _ => Ok(()),
    }
}

/// Removes what a download killed outright (SIGKILL, a crash: nothing could clean up) left in `dir`:
/// temporary files named after a process that no longer exists.
fn remove_stale(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(".debuginfo.ksymwatch-"))
            .filter(|n| n.ends_with(".tmp"))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<libc::pid_t>().ok())
            .filter(|&p| p > 0)
        else {
            continue;
        };
        // SAFETY: signal 0 only checks whether the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// A download in progress: a temporary file in the directory the result goes to (so the final rename
/// cannot cross file systems), removed on drop unless persisted, together with that directory when this
/// download created it.
struct Partial {
    path: PathBuf,
    file: File,
    made_dir: Option<PathBuf>,
    done: bool,
}

impl Partial {
    fn create(dir: &Path) -> Result<Partial, Attempt> {
        let made_dir = (!dir.is_dir()).then(|| dir.to_path_buf());
        fs::create_dir_all(dir).map_err(|e| cache_error(dir, e))?;
        remove_stale(dir);
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let mut last = None;
        for _ in 0..16 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let name = format!(
                ".debuginfo.ksymwatch-{}-{}-{nanos}.tmp",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            );
            let path = dir.join(name);
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(file) => {
                    return Ok(Partial {
                        path,
                        file,
                        made_dir,
                        done: false,
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => {
                    remove_made_dir(made_dir.as_deref());
                    return Err(cache_error(&path, e));
                }
            }
        }
        remove_made_dir(made_dir.as_deref());
        Err(cache_error(
            dir,
            last.unwrap_or_else(|| io::Error::other("no unique temporary name")),
        ))
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), Attempt> {
        self.file
            .write_all(bytes)
            .map_err(|e| cache_error(&self.path, e))
    }

    fn sync(&mut self) -> Result<(), Attempt> {
        self.file.sync_all().map_err(|e| cache_error(&self.path, e))
    }

    /// Renames the finished file to `to` and syncs the directory, so the name survives a crash too.
    fn persist(mut self, to: &Path) -> Result<(), Attempt> {
        fs::rename(&self.path, to).map_err(|e| cache_error(to, e))?;
        self.done = true;
        if let Some(dir) = to.parent() {
            // Best effort: the file itself is already synced, and some file systems refuse to sync a
            // directory.
            let _ = File::open(dir).and_then(|d| d.sync_all());
        }
        Ok(())
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if !self.done {
            let _ = fs::remove_file(&self.path);
            remove_made_dir(self.made_dir.as_deref());
        }
    }
}

/// Removes a directory this client created, if it is still empty (another client may have put a file
/// there meanwhile, which stays).
fn remove_made_dir(dir: Option<&Path>) {
    if let Some(d) = dir {
        let _ = fs::remove_dir(d);
    }
}

fn cache_error(path: &Path, source: io::Error) -> Attempt {
    Attempt::Cache(Error::DebuginfodCache {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env<'a>(vars: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        let m: HashMap<&str, &str> = vars.iter().copied().collect();
        move |k| m.get(k).map(OsString::from)
    }

    #[test]
    fn cache_dir_follows_elfutils_rule() {
        let none = |_: &Path| false;
        let dir = |p: &str| Some(PathBuf::from(p));
        let all = [(CACHE_ENV, "/c"), ("XDG_CACHE_HOME", "/x"), ("HOME", "/h")];
        assert_eq!(cache_dir_from(env(&all), none), dir("/c"));
        // The old directory wins over XDG only when it exists, and never over DEBUGINFOD_CACHE_PATH.
        let old = |p: &Path| p == Path::new("/h/.debuginfod_client_cache");
        assert_eq!(cache_dir_from(env(&all), old), dir("/c"));
        assert_eq!(
            cache_dir_from(env(&all[1..]), old),
            dir("/h/.debuginfod_client_cache")
        );
        assert_eq!(
            cache_dir_from(env(&all[1..]), none),
            dir("/x/debuginfod_client")
        );
        assert_eq!(
            cache_dir_from(
                env(&[(CACHE_ENV, ""), ("XDG_CACHE_HOME", ""), ("HOME", "/h")]),
                none
            ),
            dir("/h/.cache/debuginfod_client")
        );
        assert_eq!(cache_dir_from(env(&[]), none), None);
    }

    #[test]
    fn urls_are_space_separated_and_skip_policy_tags() {
        assert_eq!(
            parse_urls("  https://a.example/ ima:enforcing http://b:8002  "),
            vec!["https://a.example/", "http://b:8002"]
        );
        assert!(parse_urls("   ").is_empty());
    }

    #[test]
    fn a_download_leaves_the_reserve_free() {
        assert!(fits(RESERVE + 10, 10));
        assert!(!fits(RESERVE + 10, 11));
        assert!(!fits(RESERVE - 1, 0));
        assert!(!fits(u64::MAX, u64::MAX));
    }

    #[test]
    fn temp_files_of_dead_processes_are_removed_live_ones_kept() {
        let dir = std::env::temp_dir().join(format!("ksymwatch-dbgd-stale-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        // A pid that cannot exist (above pid_max's largest value), ours, and files of other tools.
        let dead = dir.join(".debuginfo.ksymwatch-2147483647-0-1.tmp");
        let ours = dir.join(format!(
            ".debuginfo.ksymwatch-{}-0-1.tmp",
            std::process::id()
        ));
        let other = dir.join(".debuginfo.gdb-1.tmp");
        let done = dir.join("debuginfo");
        for f in [&dead, &ours, &other, &done] {
            fs::write(f, b"x").unwrap();
        }
        remove_stale(&dir);
        assert!(!dead.exists());
        assert!(ours.exists() && other.exists() && done.exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_download_leaves_no_temp_file_or_dir() {
        let root =
            std::env::temp_dir().join(format!("ksymwatch-dbgd-partial-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        let dir = root.join("abcd");
        {
            let mut p = Partial::create(&dir).ok().unwrap();
            p.write(b"half").ok().unwrap();
            assert!(p.path.exists());
        }
        assert!(!dir.exists(), "the directory this download made is gone");
        // A panic mid-download unwinds through the guard too.
        let d2 = dir.clone();
        let r = std::panic::catch_unwind(move || {
            let _p = Partial::create(&d2).ok().unwrap();
            panic!("mid-download");
        });
        assert!(r.is_err());
        assert_eq!(fs::read_dir(&root).unwrap().count(), 0);
        fs::remove_dir_all(&root).unwrap();
    }
}
