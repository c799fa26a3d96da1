//! `resolve` and `write` with DEBUGINFOD_URLS, run as the real binary: a made-up running kernel (the
//! fixture's notes and a KASLR-moved kallsyms, `resolve_cli`'s) whose vmlinux only a real `debuginfod`
//! (Debian's package, on a free local port) has. A member path fetches it into DEBUGINFOD_CACHE_PATH and
//! resolves through it; the next run takes it from the cache with the server gone; `--offline` and an
//! absent server are one-line errors that leave the cache empty. SKIP without gcc, nm/objcopy or
//! debuginfod.

use std::path::{Path, PathBuf};
use std::process::Command;

use ksymwatch_symbols::testing::debuginfod::{Canned, Server, Then};

use crate::resolve_cli::{fixture, Fixture, LINK_TEXT, RUNTIME_TEXT};
use crate::util::BIN;

const TARGET: &str = "sym.field[3].pts[2].y";

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A fresh directory of this test's own.
/// The fixture's build-id, as debuginfod's URLs and cache spell it.
fn fixture_id(f: &Fixture) -> String {
    ksymwatch_symbols::testing::fixture::build_id_of(&f.vmlinux).to_string()
}

fn scratch(f: &Fixture, name: &str) -> PathBuf {
    let d = f.dir.join(format!("debuginfod-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs ksymwatch with the debuginfod variables set as given (`None`: removed); returns (exit code,
/// stdout, stderr).
fn run(args: &[&str], urls: Option<&str>, cache: &Path) -> (i32, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args).env("DEBUGINFOD_CACHE_PATH", cache);
    match urls {
        Some(u) => cmd.env("DEBUGINFOD_URLS", u),
        None => cmd.env_remove("DEBUGINFOD_URLS"),
    };
    let out = cmd.output().expect("run ksymwatch");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `resolve TARGET --json` on the made-up running kernel.
fn resolve_args<'a>(f: &'a Fixture, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = f.running(&["resolve", TARGET, "--json"]);
    a.extend_from_slice(extra);
    a
}

/// The one error line of a run, which must exit 2 and say nothing else but the fetch's progress lines.
fn one_error(code: i32, err: &str) -> String {
    assert_eq!(code, 2, "{err}");
    let lines: Vec<&str> = err.lines().collect();
    let Some((last, before)) = lines.split_last() else {
        panic!("nothing on stderr");
    };
    for l in before {
        assert!(
            l.starts_with("ksymwatch: debuginfod: connecting to ")
                || l.starts_with("ksymwatch: debuginfod: receiving "),
            "{err}"
        );
    }
    assert!(last.starts_with("ksymwatch: error: "), "{err}");
    last.to_string()
}

/// The progress lines of a fetch of the fixture (build-id `id`, `size` bytes) from `url` into `cached`.
fn fetched(url: &str, id: &str, size: u64, cached: &Path) -> [String; 3] {
    [
        format!("ksymwatch: debuginfod: connecting to {url}/buildid/{id}/debuginfo ..."),
        format!("ksymwatch: debuginfod: receiving {size} bytes from {url}"),
        format!(
            "ksymwatch: debuginfod: fetched the running kernel's vmlinux (build-id {id}, {size} bytes) from \
             {url} into {}",
            cached.display()
        ),
    ]
}

/// A server address where nothing listens (a port bound and let go again).
fn closed_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://127.0.0.1:{}", l.local_addr().unwrap().port())
}

/// A directory `serve` under `dir` holding the fixture as `vmlinux`, for a real debuginfod to serve.
fn serve_dir(f: &Fixture, dir: &Path) -> PathBuf {
    let serve = dir.join("serve");
    std::fs::create_dir_all(&serve).unwrap();
    std::fs::copy(&f.vmlinux, serve.join("vmlinux")).unwrap();
    serve
}

/// Runs `resolve TARGET --json` on the fixture with `extra` against the server at `url`: its one error
/// line and all its stderr, once it is checked that the failed fetch left nothing in `cache`.
fn failed_fetch(f: &Fixture, extra: &[&str], url: &str, cache: &Path) -> (String, String) {
    let (code, _, err) = run(&resolve_args(f, extra), Some(url), cache);
    let line = one_error(code, &err);
    assert!(is_empty_dir(cache), "nothing half-written is left: {line}");
    (line, err)
}

fn is_empty_dir(d: &Path) -> bool {
    std::fs::read_dir(d).map_or(true, |mut r| r.next().is_none())
}

fn runtime_addr(out: &str) -> u64 {
    let j: serde_json::Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(j["kernel_match"], "match", "{out}");
    let hex =
        |k: &str| u64::from_str_radix(j[k].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    assert_eq!(
        hex("runtime_addr"),
        hex("link_addr") - LINK_TEXT + RUNTIME_TEXT
    );
    hex("runtime_addr")
}

#[test]
fn a_member_path_fetches_the_running_kernels_vmlinux_then_uses_the_cache() {
    let Some(f) = fixture() else { return };
    let dir = scratch(f, "fetch");
    let serve = serve_dir(f, &dir);
    let Some(mut server) = Server::start(&serve, &dir.join("server"), 1) else {
        return;
    };
    let cache = dir.join("cache");
    let id = fixture_id(f);
    let cached = cache.join(&id).join("debuginfo");

    // `--offline` with nothing cached: a one-line error, and nothing fetched.
    let (line, _) = failed_fetch(f, &["--offline"], &server.url, &cache);
    assert!(
        line.contains(&format!(
            "--offline forbids fetching the running kernel's vmlinux (build-id {id})"
        )) && line.contains("pass --vmlinux FILE"),
        "{line}"
    );

    let (code, out, err) = run(&resolve_args(f, &[]), Some(&server.url), &cache);
    assert_eq!(code, 0, "{err}");
    let size = std::fs::metadata(&f.vmlinux).unwrap().len();
    // Progress from the start (a plain line where stderr is no terminal), then where the file came from.
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        fetched(&server.url, &id, size, &cached)
    );
    let addr = runtime_addr(&out);
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(j["source"].to_string().contains(p(&cached)), "{out}");

    // The server is gone: the second run, and an --offline one, are answered by the cache.
    server.stop();
    for extra in [&[][..], &["--offline"][..]] {
        let (code, out, err) = run(&resolve_args(f, extra), Some(&server.url), &cache);
        assert_eq!(code, 0, "{extra:?}: {err}");
        assert_eq!(
            err.trim_end(),
            format!(
                "ksymwatch: debuginfod: the running kernel's vmlinux (build-id {id}) from the cache: {}",
                cached.display()
            )
        );
        assert_eq!(runtime_addr(&out), addr);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_absent_server_or_no_server_is_a_one_line_error() {
    let Some(f) = fixture() else { return };
    let dir = scratch(f, "absent");
    let cache = dir.join("cache");
    let closed = closed_url();
    let (line, _) = failed_fetch(f, &[], &closed, &cache);
    assert!(
        line.contains("cannot fetch debug info for build-id ")
            && line.contains(&closed)
            && line.ends_with("; or pass --vmlinux FILE, or --offline"),
        "{line}"
    );

    // Without DEBUGINFOD_URLS the DWARF error names it as a way out.
    let (code, _, err) = run(&resolve_args(f, &[]), None, &cache);
    let line = one_error(code, &err);
    assert!(line.contains("set DEBUGINFOD_URLS to fetch it"), "{line}");

    // A server but nowhere to keep what it sends: said so, nothing fetched.
    let out = Command::new(BIN)
        .args(resolve_args(f, &[]))
        .env("DEBUGINFOD_URLS", &closed)
        .env_remove("DEBUGINFOD_CACHE_PATH")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("HOME")
        .output()
        .unwrap();
    let line = one_error(
        out.status.code().unwrap_or(-1),
        &String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        line.contains("no debuginfod cache to fetch into")
            && line.contains("set DEBUGINFOD_CACHE_PATH"),
        "{line}"
    );

    // A plain symbol needs no DWARF: no fetch is tried, even with a server that is not there.
    let args = f.running(&["resolve", "use_a"]);
    let (code, _, err) = run(&args, Some(&closed), &cache);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("debuginfod"), "{err}");

    // `write` decides the same way, before arming anything.
    let args = f.running(&["write", TARGET, "--offline"]);
    let (code, out, err) = run(&args, Some(&closed), &cache);
    if code == 4 {
        crate::util::skip(format_args!("write is not permitted here: {err}"));
        return;
    }
    let line = one_error(code, &err);
    assert!(line.contains("--offline forbids fetching"), "{line}");
    assert!(!out.contains("# armed"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[ignore = "live: arms hardware breakpoints (run by scripts/test as root)"]
fn check_shows_the_servers_and_the_cache() {
    // `check` probes the debug registers: under the live lock like every other run that does.
    let Some(_lock) = crate::util::live() else {
        return;
    };
    let cache = std::env::temp_dir().join(format!("ksymwatch-dbgd-check-{}", std::process::id()));
    let (_, out, err) = run(
        &["check", "--json"],
        Some("http://a.invalid ima:enforcing http://b.invalid/"),
        &cache,
    );
    let j: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    assert_eq!(
        j["debuginfod_urls"],
        serde_json::json!(["http://a.invalid", "http://b.invalid/"])
    );
    assert_eq!(j["debuginfod_cache"], p(&cache));
    assert_eq!(j["debuginfod_cached"], false);
    let (_, out, _) = run(&["check"], None, &cache);
    assert!(
        out.contains(&format!(
            "DEBUGINFOD_URLS not set: member paths need --vmlinux; cache {}",
            cache.display()
        )),
        "{out}"
    );
}

/// `cmd` with the debuginfod variables set; stdout and stderr piped.
fn spawn(args: &[&str], urls: &str, cache: &Path) -> std::process::Child {
    Command::new(BIN)
        .args(args)
        .env("DEBUGINFOD_URLS", urls)
        .env("DEBUGINFOD_CACHE_PATH", cache)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start ksymwatch")
}

/// Waits (at most 60 s, a hang guard only) until `ready()`; `false` if the child exited first.
fn wait_until(child: &mut std::process::Child, ready: impl Fn() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(60) {
        if ready() {
            return true;
        }
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.kill();
    panic!("ksymwatch never reached the expected point of its fetch");
}

/// A server that announces the whole fixture, sends its first 100 bytes and then nothing.
fn stalls_mid_body(f: &Fixture) -> Canned {
    let bytes = std::fs::read(&f.vmlinux).unwrap();
    Canned::start_then(Canned::ok(&bytes[..100], bytes.len()), Then::Hold)
}

/// The temporary files of downloads in progress under `cache`.
fn temp_files(cache: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in std::fs::read_dir(cache).into_iter().flatten().flatten() {
        for e in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().ends_with(".tmp") {
                out.push(e.path());
            }
        }
    }
    out
}

#[test]
fn a_stop_signal_during_a_fetch_leaves_nothing_in_the_cache() {
    use std::os::unix::process::ExitStatusExt;
    let Some(f) = fixture() else { return };
    let id = fixture_id(f);
    // Two slow servers: one that sends the first 100 bytes of the file and then nothing (a temporary
    // file exists), one that never answers (no temporary file yet, only the made-up build-id's wait).
    let mid_body = stalls_mid_body(f);
    let no_headers = Canned::start_then(Vec::new(), Then::Hold);
    let resolve = resolve_args(f, &[]);
    let member = resolve.clone();
    // `banner` is not in the fixture's kallsyms, which has no data symbols: the plain-symbol fetch.
    let plain = f.running(&["resolve", "banner"]);
    for (sig, name) in [
        (libc::SIGINT, "SIGINT"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGHUP, "SIGHUP"),
    ] {
        for (server, args, body) in [
            (&mid_body, &member[..], true),
            (&no_headers, &member[..], false),
            (&mid_body, &plain[..], true),
        ] {
            let dir = scratch(f, &format!("signal-{name}"));
            let cache = dir.join("cache");
            let seen = server.requests.load(std::sync::atomic::Ordering::SeqCst);
            let mut child = spawn(args, &server.url, &cache);
            let reached = wait_until(&mut child, || {
                if body {
                    !temp_files(&cache).is_empty()
                } else {
                    server.requests.load(std::sync::atomic::Ordering::SeqCst) > seen
                }
            });
            assert!(
                reached,
                "exited before the fetch: {:?}",
                child.wait_with_output()
            );
            // SAFETY: kill(2) on our own child's pid.
            assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
            let out = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.signal(), Some(sig), "{name}: {err}");
            assert_eq!(
                err.lines().last(),
                Some(
                    format!(
                        "ksymwatch: debuginfod: {name}: stopped fetching {}/buildid/{id}/debuginfo; \
                         nothing was cached",
                        server.url
                    )
                    .as_str()
                ),
                "{name} {args:?}: {err}"
            );
            assert!(
                is_empty_dir(&cache),
                "{name} {args:?}: left {:?}",
                std::fs::read_dir(&cache)
                    .map(|r| r.flatten().map(|e| e.path()).collect::<Vec<_>>())
            );
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

#[test]
#[ignore = "live: arms hardware breakpoints (run by scripts/test as root)"]
fn a_stop_signal_during_writes_fetch_leaves_nothing_either() {
    // `write` has a second thread by then (the perf warm-up), which may be the one the signal lands on.
    use std::os::unix::process::ExitStatusExt;
    let Some(f) = fixture() else { return };
    let Some(_lock) = crate::util::live() else {
        return;
    };
    let server = stalls_mid_body(f);
    for (sig, name) in [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM")] {
        let dir = scratch(f, &format!("write-signal-{name}"));
        let cache = dir.join("cache");
        let args = f.running(&["write", "banner"]);
        let mut child = spawn(&args, &server.url, &cache);
        if !wait_until(&mut child, || !temp_files(&cache).is_empty()) {
            let out = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(4), "{err}");
            crate::util::skip(format_args!("write is not permitted here: {err}"));
            return;
        }
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.signal(), Some(sig), "{name}: {err}");
        assert!(
            err.trim_end().ends_with("nothing was cached"),
            "{name}: {err}"
        );
        assert!(!String::from_utf8_lossy(&out.stdout).contains("armed"));
        assert!(is_empty_dir(&cache), "{name}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn the_size_limit_and_the_deadline_are_options_and_their_errors_name_them() {
    let Some(f) = fixture() else { return };
    let bytes = std::fs::read(&f.vmlinux).unwrap();
    let dir = scratch(f, "limits");
    let cache = dir.join("cache");

    let whole = Canned::start(Canned::ok(&bytes, bytes.len()));
    let (line, _) = failed_fetch(f, &["--debuginfod-max-size", "4K"], &whole.url, &cache);
    assert!(
        line.contains(&format!(
            "{}: it offers {} bytes, over the limit of 4096 bytes; nothing was downloaded",
            whole.url,
            bytes.len()
        )) && line.ends_with(
            "; raise the limit with --debuginfod-max-size SIZE; or pass --vmlinux FILE, or --offline"
        ),
        "{line}"
    );

    let junk = Canned::start_then(
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_vec(),
        Then::Repeat(b"junk".repeat(4096)),
    );
    let (line, _) = failed_fetch(f, &[], &junk.url, &cache);
    assert!(
        line.contains(&format!(
            "{}: it sent something that is not an ELF file (no ELF magic; it starts with \"junkjunk",
            junk.url
        )),
        "{line}"
    );

    let silent = Canned::start_then(Vec::new(), Then::Hold);
    let (line, err) = failed_fetch(f, &["--debuginfod-timeout", "1s"], &silent.url, &cache);
    assert!(
        line.contains(&format!(
            "{}: the 1 s deadline passed before the response headers",
            silent.url
        )) && line.ends_with(
            "; allow longer with --debuginfod-timeout DUR; or pass --vmlinux FILE, or --offline"
        ),
        "{line}"
    );
    // What was printed first says what it was waiting for.
    assert_eq!(
        err.lines().next().unwrap_or_default(),
        format!(
            "ksymwatch: debuginfod: connecting to {}/buildid/{}/debuginfo ...",
            silent.url,
            fixture_id(f)
        )
    );
    assert!(is_empty_dir(&cache));

    for bad in [
        &["--debuginfod-max-size", "0"][..],
        &["--debuginfod-max-size", "lots"][..],
        &["--debuginfod-timeout", "0"][..],
    ] {
        let (code, _, err) = run(&resolve_args(f, bad), Some(&silent.url), &cache);
        assert_eq!(code, 2, "{bad:?}: {err}");
        assert!(err.contains(bad[0]), "{bad:?}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[ignore = "live: arms hardware breakpoints (run by scripts/test as root)"]
fn a_plain_symbol_kallsyms_lacks_is_fetched_or_the_error_names_every_way_out() {
    let Some(f) = fixture() else { return };
    let dir = scratch(f, "plain");
    let serve = serve_dir(f, &dir);
    let cache = dir.join("cache");
    let id = fixture_id(f);
    let cached = cache.join(&id).join("debuginfo");
    // The made-up running kernel's kallsyms has text symbols only, like this machine's.
    let resolve = |name: &'static str, extra: &[&'static str]| {
        [f.running(&["resolve", name, "--json"]), extra.to_vec()].concat()
    };

    // No DEBUGINFOD_URLS: the error names every way out, the exact flags and the variable.
    for name in ["banner", "sym"] {
        let args = resolve(name, &[]);
        let (code, _, err) = run(&args, None, &cache);
        let line = one_error(code, &err);
        assert!(
            line.contains(&format!("symbol `{name}` not found"))
                && line.contains("pass --vmlinux FILE or --system-map FILE for this kernel")
                && line.contains("set DEBUGINFOD_URLS=URL (e.g. https://debuginfod.debian.net) to fetch its vmlinux"),
            "{line}"
        );
    }

    let Some(mut server) = Server::start(&serve, &dir.join("server"), 1) else {
        return;
    };
    // --offline with nothing cached: says so, fetches nothing.
    let args = resolve("banner", &["--offline"]);
    let (code, _, err) = run(&args, Some(&server.url), &cache);
    let line = one_error(code, &err);
    assert!(
        line.contains("symbol `banner` is not in kallsyms")
            && line.contains("--offline forbids fetching the running kernel's vmlinux"),
        "{line}"
    );

    // With a server: fetched by build-id, said where it came from, resolved in it.
    let args = resolve("banner", &[]);
    let (code, out, err) = run(&args, Some(&server.url), &cache);
    assert_eq!(code, 0, "{}: {err}", args.join("\u{0}"));
    let size = std::fs::metadata(&f.vmlinux).unwrap().len();
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        fetched(&server.url, &id, size, &cached),
        "{err}"
    );
    let addr = runtime_addr(&out);
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["symbol"], "banner");
    assert!(j["source"].to_string().contains(p(&cached)), "{out}");

    // Later runs take it from the cache, the server gone; `write` too, and it arms where resolve said.
    server.stop();
    let (code, out, err) = run(&args, Some(&server.url), &cache);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("from the cache"), "{err}");
    assert_eq!(runtime_addr(&out), addr);
    // A typed target's symbol base the same way (its type from the kernel's BTF).
    if std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        let typed = f.running(&["resolve", "(char)banner"]);
        let (code, out, err) = run(&typed, Some(&server.url), &cache);
        assert_eq!(code, 0, "{err}");
        assert!(err.contains("from the cache"), "{err}");
        assert!(
            out.contains(&format!("runtime addr: 0x{addr:016x}"))
                && out.contains(&format!("source:       vmlinux {}", cached.display())),
            "{out}"
        );
    }
    // A server that cannot deliver: the error says why the vmlinux was wanted.
    let closed = closed_url();
    let empty = dir.join("empty-cache");
    let (code, _, err) = run(&args, Some(&closed), &empty);
    let line = one_error(code, &err);
    assert!(
        line.contains(&format!(
            "symbol `banner` is not in kallsyms {}, which has no data symbols (CONFIG_KALLSYMS_ALL is off): \
             cannot fetch debug info for build-id {id}: {closed}: ",
            f.kallsyms.display()
        )),
        "{line}"
    );
    assert!(is_empty_dir(&empty));
    let Some(_lock) = crate::util::live() else {
        return;
    };
    let write = f.running(&["write", "banner", "--duration", "100ms"]);
    // `banner` is a kernel address: where the kernel refuses one, the fetch and the plan are checked with
    // a dry run, and the watch itself is skipped.
    let refused = crate::util::kernel_breakpoints().is_err();
    let dry_run = [&write[..], &["--dry-run"]].concat();
    let (code, out, err) = run(
        if refused { &dry_run } else { &write },
        Some(&server.url),
        &cache,
    );
    // A dry run of a kernel address ends as the run would where the kernel refuses one (exit 4).
    assert_eq!(code, if refused { 4 } else { 0 }, "{err}");
    assert!(
        err.contains(&format!(
            "the running kernel's vmlinux (build-id {id}) from the cache: {}",
            cached.display()
        )),
        "{err}"
    );
    assert!(out.contains(&format!("{addr:x}")), "{out}");
    if refused {
        crate::util::kernel_part_skipped("the watch on `banner`");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn what_a_killed_fetch_left_is_removed_by_the_next_one() {
    // SIGKILL cannot be caught: its temporary file stays, until the next fetch of that build-id.
    let Some(f) = fixture() else { return };
    let id = fixture_id(f);
    let stalled = stalls_mid_body(f);
    let bytes = std::fs::read(&f.vmlinux).unwrap();
    let whole = Canned::start(Canned::ok(&bytes, bytes.len()));
    let dir = scratch(f, "killed");
    let cache = dir.join("cache");
    let mut child = spawn(&resolve_args(f, &[]), &stalled.url, &cache);
    assert!(wait_until(&mut child, || !temp_files(&cache).is_empty()));
    child.kill().unwrap();
    child.wait().unwrap();
    let left = temp_files(&cache);
    assert_eq!(left.len(), 1, "{left:?}");

    let (code, _, err) = run(&resolve_args(f, &[]), Some(&whole.url), &cache);
    assert_eq!(code, 0, "{err}");
    let names: Vec<String> = std::fs::read_dir(cache.join(&id))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["debuginfo"], "{left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
