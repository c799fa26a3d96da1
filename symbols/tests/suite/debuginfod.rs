//! The debuginfod client against a real `debuginfod` (Debian's package) serving the gcc-built vmlinux
//! fixture on a local port, and against tiny canned servers for what a real one does not do on demand: a
//! connection closed halfway, a file with the wrong build-id, a redirect. Every failure must leave the
//! cache directory exactly as it was.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use ksymwatch_symbols::testing::debuginfod::{Canned, Server};
use ksymwatch_symbols::testing::fixture;
use ksymwatch_symbols::{BuildId, Debuginfod, Error, Fetched, Vmlinux};

/// A fresh directory of this test's own, removed with everything in it when the test ends (also when
/// it fails or skips).
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(name: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!("ksymwatch-dbgd-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Scratch(d)
}

/// [`scratch`] `name`, and the debuginfod cache to be in it (not made yet).
fn scratch_and_cache(name: &str) -> (Scratch, PathBuf) {
    let dir = scratch(name);
    let cache = dir.join("cache");
    (dir, cache)
}

/// Every path under `dir`, for "nothing was left behind" checks.
fn contents(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out
}

/// A real debuginfod serving `vmlinux` from `dir/serve`, its database in `dir/server`, scanned and ready.
fn serve(vmlinux: &Path, dir: &Path) -> Option<Server> {
    let serve = dir.join("serve");
    std::fs::create_dir_all(&serve).unwrap();
    std::fs::copy(vmlinux, serve.join("vmlinux")).unwrap();
    Server::start(&serve, &dir.join("server"), 1)
}

/// The vmlinux fixture, [`scratch`] `name`, and a real debuginfod [`serve`]ing the fixture from it (`None`:
/// the fixture or the server cannot be had, already said).
fn fixture_served(name: &str) -> Option<(&'static fixture::Fixture, Scratch, Server)> {
    let f = fixture::build()?;
    let dir = scratch(name);
    let server = serve(&f.vmlinux, &dir)?;
    Some((f, dir, server))
}

fn fixture_id(vmlinux: &Path) -> BuildId {
    Vmlinux::open(vmlinux)
        .unwrap()
        .build_id()
        .cloned()
        .expect("the fixture is linked with --build-id")
}

/// The fixture's bytes (what a canned server sends) and its build-id.
fn fixture_bytes() -> Option<(Vec<u8>, BuildId)> {
    let f = fixture::build()?;
    Some((std::fs::read(&f.vmlinux).unwrap(), fixture_id(&f.vmlinux)))
}

fn build_id_of(path: &Path) -> Option<BuildId> {
    Vmlinux::open(path).ok()?.build_id().cloned()
}

/// A port nothing listens on: one the kernel just handed out and took back.
fn closed_port_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    format!("http://127.0.0.1:{port}")
}

#[test]
fn fetches_from_a_real_server_then_reuses_the_cache_without_asking() {
    let Some((f, dir, mut server)) = fixture_served("real") else {
        return;
    };
    let id = fixture_id(&f.vmlinux);
    let cache = dir.join("cache");
    let size = std::fs::metadata(&f.vmlinux).unwrap().len();

    // A server that does not have it comes first: the client goes on to the next.
    let empty = Canned::start(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec());
    let client = Debuginfod::new(vec![empty.url.clone(), server.url.clone()], cache.clone());
    let got = client.fetch(&id).unwrap();
    let want = cache.join(id.to_string()).join("debuginfo");
    assert_eq!(
        got,
        Fetched::Downloaded {
            path: want.clone(),
            bytes: size,
            from: server.url.clone()
        }
    );
    assert_eq!(empty.requests.load(Ordering::SeqCst), 1);
    assert_eq!(build_id_of(&want), Some(id.clone()));
    assert_eq!(
        std::fs::read(&want).unwrap(),
        std::fs::read(&f.vmlinux).unwrap()
    );
    assert_eq!(contents(&cache).len(), 2, "only ID/ and ID/debuginfo");
    assert_eq!(Debuginfod::cached(&cache, &id), Some(want.clone()));

    // With the server gone, the second fetch cannot have asked it: the cache answered.
    server.stop();
    let again = client.fetch(&id).unwrap();
    assert_eq!(again, Fetched::Cached(want.clone()));
    assert_eq!(empty.requests.load(Ordering::SeqCst), 1, "no request");
}

#[test]
fn follows_a_redirect_to_the_server_that_has_it() {
    let Some((f, dir, server)) = fixture_served("redirect") else {
        return;
    };
    let id = fixture_id(&f.vmlinux);
    let redirect = Canned::start(
        format!(
            "HTTP/1.1 302 Found\r\nLocation: {}/buildid/{id}/debuginfo\r\nContent-Length: 0\r\n\r\n",
            server.url
        )
        .into_bytes(),
    );
    let cache = dir.join("cache");
    let got = Debuginfod::new(vec![redirect.url.clone()], cache.clone())
        .fetch(&id)
        .unwrap();
    assert!(
        matches!(&got, Fetched::Downloaded { from, .. } if *from == redirect.url),
        "{got:?}"
    );
    assert_eq!(build_id_of(got.path()), Some(id));
    drop(server);
}

#[test]
fn not_found_everywhere_names_the_build_id_and_the_servers() {
    let Some((_, dir, server)) = fixture_served("notfound") else {
        return;
    };
    let cache = dir.join("cache");
    let id = BuildId(vec![0x5a; 20]);
    let e = Debuginfod::new(vec![server.url.clone()], cache.clone())
        .fetch(&id)
        .unwrap_err();
    assert!(matches!(e, Error::DebuginfodNotFound { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!(
            "no server in DEBUGINFOD_URLS has debug info for build-id {id} (tried: {})",
            server.url
        )),
        "{msg}"
    );
    assert!(contents(&cache).is_empty(), "{:?}", contents(&cache));
}

#[test]
fn an_absent_server_is_a_clear_error() {
    let (_dir, cache) = scratch_and_cache("absent");
    let url = closed_port_url();
    let e = Debuginfod::new(vec![url.clone()], cache.clone())
        .fetch(&BuildId(vec![1; 20]))
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::DebuginfodFailed { .. }), "{e:?}");
    assert!(
        msg.starts_with(&format!(
            "cannot fetch debug info for build-id {}: {url}: ",
            "01".repeat(20)
        )) && msg.contains("check the network"),
        "{msg}"
    );
    assert!(!msg.contains('\n'), "{msg}");
    assert!(contents(&cache).is_empty());
}

#[test]
fn a_connection_closed_halfway_leaves_nothing_in_the_cache() {
    let Some(f) = fixture::build() else { return };
    let bytes = std::fs::read(&f.vmlinux).unwrap();
    let half = bytes.len() / 2;
    let server = Canned::start(Canned::ok(&bytes[..half], bytes.len()));
    let (_dir, cache) = scratch_and_cache("halfway");
    let id = fixture_id(&f.vmlinux);
    let (e, msg) = failure(&[&server.url], &id, &cache, |c| {
        c.with_stall_timeout(Duration::from_secs(5))
    });
    assert!(matches!(e, Error::DebuginfodFailed { .. }), "{e:?}");
    assert!(
        msg.contains(&format!("{half} of {} bytes", bytes.len())),
        "names what arrived of what was promised: {msg}"
    );
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
    assert!(contents(&cache).is_empty(), "{:?}", contents(&cache));
    assert_eq!(Debuginfod::cached(&cache, &id), None);
}

#[test]
fn a_server_that_stalls_is_given_up_on_and_leaves_nothing() {
    let Some(f) = fixture::build() else { return };
    let bytes = std::fs::read(&f.vmlinux).unwrap();
    let part = 100;
    let server = Canned::start_holding(Canned::ok(&bytes[..part], bytes.len()), true);
    let (_dir, cache) = scratch_and_cache("stall");
    let e = Debuginfod::new(vec![server.url.clone()], cache.clone())
        .with_stall_timeout(Duration::from_millis(500))
        .fetch(&fixture_id(&f.vmlinux))
        .unwrap_err();
    assert!(
        e.to_string().contains(&format!(
            "it sent nothing for 0.5 s after {part} of {} bytes",
            bytes.len()
        )),
        "{e}"
    );
    assert!(contents(&cache).is_empty(), "{:?}", contents(&cache));
}

#[test]
fn a_file_with_another_build_id_or_no_elf_is_not_cached() {
    let Some(f) = fixture::build() else { return };
    let id = fixture_id(&f.vmlinux);
    let (_dir, cache) = scratch_and_cache("corrupt");
    // The fixture with one byte of its build-id flipped: a whole, valid ELF of some other build.
    let mut other = std::fs::read(&f.vmlinux).unwrap();
    let at = other
        .windows(id.0.len())
        .position(|w| w == id.0.as_slice())
        .expect("build-id bytes in the file");
    other[at] ^= 0xff;
    let mut other_id = id.clone();
    other_id.0[0] ^= 0xff;
    let wrong = Canned::start(Canned::ok(&other, other.len()));
    let e = Debuginfod::new(vec![wrong.url.clone()], cache.clone())
        .fetch(&id)
        .unwrap_err();
    assert!(
        e.to_string().contains(&format!(
            "it sent a file with build-id {other_id}, not {id}"
        )),
        "{e}"
    );
    assert!(contents(&cache).is_empty(), "{:?}", contents(&cache));

    let junk = b"<html>not here</html>";
    let html = Canned::start(Canned::ok(junk, junk.len()));
    let e = Debuginfod::new(vec![html.url.clone()], cache.clone())
        .fetch(&id)
        .unwrap_err();
    assert!(
        e.to_string().contains(
            "it sent something that is not an ELF file (no ELF magic; it starts with \"<html>not here</\"); \
             stopped after 21 bytes"
        ),
        "{e}"
    );
    assert!(contents(&cache).is_empty(), "{:?}", contents(&cache));
}

#[test]
fn a_cached_file_of_another_build_is_not_used_and_the_error_says_so() {
    let Some(f) = fixture::build() else { return };
    let id = BuildId(vec![0x77; 20]);
    let (_dir, cache) = scratch_and_cache("stale");
    let slot = cache.join(id.to_string());
    std::fs::create_dir_all(&slot).unwrap();
    std::fs::copy(&f.vmlinux, slot.join("debuginfo")).unwrap();
    assert_eq!(Debuginfod::cached(&cache, &id), None);
    let none = Canned::start(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec());
    let e = Debuginfod::new(vec![none.url.clone()], cache.clone())
        .fetch(&id)
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(&format!(
            "has build-id {}, not {id}: not used",
            fixture_id(&f.vmlinux)
        )),
        "{msg}"
    );
    // What was there stays: it may be some other tool's, and the check is all this client needs.
    assert_eq!(
        build_id_of(&slot.join("debuginfo")),
        Some(fixture_id(&f.vmlinux))
    );
}

/// `200 OK` without `Content-Length` (the body ends when the connection closes, or never).
fn ok_unsized() -> Vec<u8> {
    b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n"
        .to_vec()
}

/// `200 OK` in chunked encoding: the head, and one chunk of `body`.
fn chunked(body: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let mut chunk = format!("{:x}\r\n", body.len()).into_bytes();
    chunk.extend_from_slice(body);
    chunk.extend_from_slice(b"\r\n");
    (head, chunk)
}

/// A client of `servers` with `cache`, set up by `client`, fails to fetch `id`: the error and its
/// message, one line, the cache left as it was (no temporary file, no build-id directory).
fn failure(
    servers: &[&String],
    id: &BuildId,
    cache: &Path,
    client: impl FnOnce(Debuginfod) -> Debuginfod,
) -> (Error, String) {
    let urls = servers.iter().map(|u| u.to_string()).collect();
    let e = client(Debuginfod::new(urls, cache.to_path_buf()))
        .fetch(id)
        .unwrap_err();
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "{msg}");
    assert!(contents(cache).is_empty(), "{msg}: {:?}", contents(cache));
    (e, msg)
}

/// The failure `e` (its message `msg`) is of `limit` and says `want`; `what` names the case.
fn says(
    what: &str,
    e: &Error,
    msg: &str,
    limit: Option<ksymwatch_symbols::debuginfod::Limit>,
    want: &str,
) {
    assert_eq!(limit_of(e), limit, "{what}: {msg}");
    assert!(msg.contains(want), "{what}: {msg}");
}

fn limit_of(e: &Error) -> Option<ksymwatch_symbols::debuginfod::Limit> {
    match e {
        Error::DebuginfodFailed { .. } => e.limit(),
        _ => panic!("not DebuginfodFailed: {e:?}"),
    }
}

#[test]
fn junk_is_refused_at_its_first_bad_byte_however_it_is_sent() {
    use ksymwatch_symbols::testing::debuginfod::Then;
    let (_dir, cache) = scratch_and_cache("junk");
    let id = BuildId(vec![0x42; 20]);
    // Each server sends junk that would never end (or end only after a long trickle): the client must
    // stop on the first bytes, not when the junk ends. A deadline far beyond what the check needs turns
    // a regression into a failure instead of a hang.
    let zeros = vec![0u8; 64 * 1024];
    let (chunk_head, chunk) = chunked(&zeros);
    let cases: Vec<(&str, Vec<u8>, Then, String)> = vec![
        (
            "endless zeros, no Content-Length",
            ok_unsized(),
            Then::Repeat(zeros.clone()),
            "it starts with \"\\x00".into(),
        ),
        (
            "endless zeros, chunked",
            chunk_head,
            Then::Repeat(chunk),
            "it starts with \"\\x00".into(),
        ),
        (
            "a huge Content-Length of junk",
            Canned::ok(b"", 1 << 30),
            Then::Repeat(b"<html>".repeat(1000)),
            "it starts with \"<html>".into(),
        ),
        (
            // Right for three bytes, then wrong: stopped at the fourth, trickled one at a time.
            "a trickle that goes wrong at the fourth byte",
            Canned::ok(b"", 1 << 20),
            Then::Trickle(b"\x7fELx and more".to_vec(), Duration::from_millis(50)),
            "it starts with \"x\"); stopped after 4 bytes".into(),
        ),
        (
            "a trickle that goes wrong at the first byte",
            ok_unsized(),
            Then::Trickle(b"ELF".to_vec(), Duration::from_millis(50)),
            "it starts with \"E\"); stopped after 1 bytes".into(),
        ),
    ];
    for (what, head, then, want) in cases {
        let server = Canned::start_then(head, then);
        let (e, msg) = failure(&[&server.url], &id, &cache, |c| {
            c.with_deadline(Duration::from_secs(60))
        });
        assert_eq!(limit_of(&e), None, "{what}: {msg}");
        assert!(
            msg.contains(&format!(
                "{}: it sent something that is not an ELF file (no ELF magic; ",
                server.url
            )) && msg.contains(&want),
            "{what}: {msg}"
        );
    }
}

#[test]
fn a_size_over_the_limit_is_refused_before_reading_or_stopped_at_the_limit() {
    use ksymwatch_symbols::debuginfod::{Limit, DEFAULT_MAX_SIZE};
    use ksymwatch_symbols::testing::debuginfod::Then;
    let Some((bytes, id)) = fixture_bytes() else {
        return;
    };
    let (_dir, cache) = scratch_and_cache("maxsize");
    assert_eq!(DEFAULT_MAX_SIZE, 2 << 30);

    // Content-Length over the default limit: refused from the header alone. The server then stalls,
    // so a client that read on would hang until the deadline, and say so.
    let huge = DEFAULT_MAX_SIZE + 1;
    let server = Canned::start_then(Canned::ok(&bytes[..64], huge as usize), Then::Hold);
    let (e, msg) = failure(&[&server.url], &id, &cache, |c| {
        c.with_deadline(Duration::from_secs(60))
    });
    let want = format!(
        "{}: it offers {huge} bytes, over the limit of {DEFAULT_MAX_SIZE} bytes; nothing was downloaded",
        server.url
    );
    says("offered", &e, &msg, Some(Limit::Size), &want);
    assert!(!msg.contains("check the network"), "{msg}");

    // A smaller limit, and the real file over it: with Content-Length, refused the same way; without,
    // and endless, stopped once the limit is passed.
    let limit = 4096u64;
    let cases: Vec<(Vec<u8>, Then, String)> = vec![
        (
            Canned::ok(&bytes, bytes.len()),
            Then::Close,
            format!(
                "it offers {} bytes, over the limit of {limit} bytes",
                bytes.len()
            ),
        ),
        (
            [ok_unsized(), bytes[..64].to_vec()].concat(),
            Then::Repeat(vec![0u8; 1024]),
            format!("it sent more than the limit of {limit} bytes; stopped there"),
        ),
    ];
    for (head, then, want) in cases {
        let server = Canned::start_then(head, then);
        let (e, msg) = failure(&[&server.url], &id, &cache, |c| {
            c.with_max_size(limit)
                .with_deadline(Duration::from_secs(60))
        });
        says("sent", &e, &msg, Some(Limit::Size), &want);
    }

    // Under the limit but more than the cache's file system has free: refused before reading too, as a
    // cache problem (no other server could help).
    let petabyte = 1u64 << 50;
    let server = Canned::start_then(
        [
            format!("HTTP/1.1 200 OK\r\nContent-Length: {petabyte}\r\n\r\n").into_bytes(),
            bytes[..64].to_vec(),
        ]
        .concat(),
        Then::Hold,
    );
    let (e, msg) = failure(&[&server.url], &id, &cache, |c| {
        c.with_max_size(u64::MAX)
            .with_deadline(Duration::from_secs(60))
    });
    assert!(matches!(e, Error::DebuginfodCache { .. }), "{e:?}");
    assert!(
        msg.contains(&format!(
            "{petabyte} more bytes would leave less than 64 MiB"
        )) && msg.contains("free some space there, or set DEBUGINFOD_CACHE_PATH"),
        "{msg}"
    );
    assert!(contents(&cache).is_empty(), "{:?}", contents(&cache));

    // Exactly at the limit is allowed.
    let server = Canned::start(Canned::ok(&bytes, bytes.len()));
    let got = Debuginfod::new(vec![server.url.clone()], cache.clone())
        .with_max_size(bytes.len() as u64)
        .fetch(&id)
        .unwrap();
    assert_eq!(build_id_of(got.path()), Some(id));
}

#[test]
fn one_deadline_ends_the_whole_fetch_however_slowly_a_server_sends() {
    use ksymwatch_symbols::debuginfod::{Limit, DEFAULT_DEADLINE};
    use ksymwatch_symbols::testing::debuginfod::Then;
    let Some((bytes, id)) = fixture_bytes() else {
        return;
    };
    let (_dir, cache) = scratch_and_cache("deadline");
    assert_eq!(DEFAULT_DEADLINE, Duration::from_secs(600));
    let every = Duration::from_millis(100);
    let deadline = Duration::from_millis(1500);
    // Each sends a byte now and then, so no read ever waits the stall timeout (left at its default):
    // only the deadline can end them.
    let cases: Vec<(&str, Vec<u8>, Then, String)> = vec![
        (
            "no headers at all",
            Vec::new(),
            Then::Hold,
            "the 1.5 s deadline passed before the response headers".into(),
        ),
        (
            "headers trickled",
            Vec::new(),
            Then::Trickle(
                b"HTTP/1.1 200 OK\r\nX-Slow: "
                    .iter()
                    .chain(&[b'a'; 4096])
                    .copied()
                    .collect(),
                every,
            ),
            "the 1.5 s deadline passed before the response headers".into(),
        ),
        (
            "the body trickled",
            Canned::ok(b"", bytes.len()),
            Then::Trickle(bytes.clone(), every),
            "the 1.5 s deadline passed after ".into(),
        ),
    ];
    for (what, head, then, want) in cases {
        let server = Canned::start_then(head, then);
        let (e, msg) = failure(&[&server.url], &id, &cache, |c| c.with_deadline(deadline));
        let want = format!("{}: {want}", server.url);
        says(what, &e, &msg, Some(Limit::Deadline), &want);
        assert!(!msg.contains("check the network"), "{what}: {msg}");
    }

    // The deadline is the whole fetch's, not each server's: a second server is not given a fresh one.
    let slow = Canned::start_then(Vec::new(), Then::Hold);
    let second = Canned::start(Canned::ok(&bytes, bytes.len()));
    let (e, msg) = failure(&[&slow.url, &second.url], &id, &cache, |c| {
        c.with_deadline(deadline)
    });
    let want = format!("{}: not asked, the 1.5 s deadline had passed", second.url);
    says("second", &e, &msg, Some(Limit::Deadline), &want);
    assert_eq!(second.requests.load(Ordering::SeqCst), 0);

    // A silent server is also given up on by the stall timeout, headers included, when that comes first.
    let silent = Canned::start_then(Vec::new(), Then::Hold);
    let (e, msg) = failure(&[&silent.url], &id, &cache, |c| {
        c.with_stall_timeout(Duration::from_millis(300))
            .with_deadline(Duration::from_secs(60))
    });
    let want = "it sent nothing for 0.3 s before the response headers";
    says("silent", &e, &msg, None, want);
}
