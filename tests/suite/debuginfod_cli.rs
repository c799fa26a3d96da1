//! `resolve` and `write` with DEBUGINFOD_URLS, run as the real binary: a made-up running kernel (the
//! fixture's notes and a KASLR-moved kallsyms, `resolve_cli`'s) whose vmlinux only a real `debuginfod`
//! (Debian's package, on a free local port) has. A member path fetches it into DEBUGINFOD_CACHE_PATH and
//! resolves through it; the next run takes it from the cache with the server gone; `--offline` and an
//! absent server are one-line errors that leave the cache empty. SKIP without gcc, nm/objcopy or
//! debuginfod.

use std::path::{Path, PathBuf};
use std::process::Command;

use ksymwatch_symbols::testing::debuginfod::Server;
use ksymwatch_symbols::Vmlinux;

use crate::resolve_cli::{fixture, Fixture, LINK_TEXT, RUNTIME_TEXT};
use crate::util::BIN;

const TARGET: &str = "sym.field[3].pts[2].y";

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A fresh directory of this test's own.
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
    let mut a = vec![
        "resolve",
        TARGET,
        "--json",
        "--kallsyms",
        p(&f.kallsyms),
        "--kernel-notes",
        p(&f.notes),
    ];
    a.extend_from_slice(extra);
    a
}

/// The one line of an error run, which must exit 2 and say nothing else.
fn one_error(code: i32, err: &str) -> String {
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("ksymwatch: error: "), "{err}");
    err.trim_end().to_string()
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
    let serve = dir.join("serve");
    std::fs::create_dir_all(&serve).unwrap();
    std::fs::copy(&f.vmlinux, serve.join("vmlinux")).unwrap();
    let Some(mut server) = Server::start(&serve, &dir.join("server"), 1) else {
        return;
    };
    let cache = dir.join("cache");
    let id = Vmlinux::open(&f.vmlinux)
        .unwrap()
        .build_id()
        .unwrap()
        .to_string();
    let cached = cache.join(&id).join("debuginfo");

    // `--offline` with nothing cached: a one-line error, and nothing fetched.
    let (code, _, err) = run(&resolve_args(f, &["--offline"]), Some(&server.url), &cache);
    let line = one_error(code, &err);
    assert!(
        line.contains(&format!(
            "--offline forbids fetching the running kernel's vmlinux (build-id {id})"
        )) && line.contains("pass --vmlinux FILE"),
        "{line}"
    );
    assert!(is_empty_dir(&cache));

    let (code, out, err) = run(&resolve_args(f, &[]), Some(&server.url), &cache);
    assert_eq!(code, 0, "{err}");
    let size = std::fs::metadata(&f.vmlinux).unwrap().len();
    assert_eq!(
        err.trim_end(),
        format!(
            "ksymwatch: debuginfod: fetched the running kernel's vmlinux (build-id {id}, {size} bytes) from {} into {}",
            server.url,
            cached.display()
        )
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
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://127.0.0.1:{}", l.local_addr().unwrap().port())
    };
    let (code, _, err) = run(&resolve_args(f, &[]), Some(&closed), &cache);
    let line = one_error(code, &err);
    assert!(
        line.contains("cannot fetch debug info for build-id ")
            && line.contains(&closed)
            && line.ends_with("; or pass --vmlinux FILE, or --offline"),
        "{line}"
    );
    assert!(is_empty_dir(&cache), "nothing half-written is left");

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
    let args = [
        "resolve",
        "use_a",
        "--kallsyms",
        p(&f.kallsyms),
        "--kernel-notes",
        p(&f.notes),
    ];
    let (code, _, err) = run(&args, Some(&closed), &cache);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("debuginfod"), "{err}");

    // `write` decides the same way, before arming anything.
    let args = [
        "write",
        TARGET,
        "--offline",
        "--kallsyms",
        p(&f.kallsyms),
        "--kernel-notes",
        p(&f.notes),
    ];
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
