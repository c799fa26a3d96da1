//! Live tests of the kallsyms cache (`KSYMWATCH_CACHE_DIR`, `--no-symbol-cache`): a run that loads its
//! symbols from a warm cache, from a corrupt one, or with the cache off resolves a kernel target to the
//! same address and names kernel frames the same way as one that parsed kallsyms. Each test uses a private
//! cache directory, never the system one. The kernel target is resolved by a dry run (nothing armed); the
//! frames come from a live watch on a helper's global that the kernel writes (`read()` from /dev/zero), so
//! the tests run alike where the kernel refuses breakpoints on kernel addresses.

use crate::util;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use util::{kernel_frames, parse_hits, Tracer, Writer};

const KERNEL_TARGET: &str = "__start_init_stack+0x3e00";

fn cache_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "ksymwatch-live-cache-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// With the cache in `dir` and `extra` flags: `write KERNEL_TARGET --dry-run` (its plan's `#` lines: the
/// target's address and the symbol source), then `write HELPER --count 3` while the helper `read()`s
/// /dev/zero into its global. Returns (the plan, the hits' kernel frames with their ips, stderr of both).
fn watch(dir: &Path, extra: &[&str]) -> (String, Vec<Vec<String>>, String) {
    let out = Command::new(util::BIN)
        .args(["write", KERNEL_TARGET, "--dry-run"])
        .args(extra)
        .env("KSYMWATCH_CACHE_DIR", dir)
        .output()
        .expect("run ksymwatch");
    let plan = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut plan_err = String::from_utf8_lossy(&out.stderr).into_owned();
    // The plan is printed all the same; the dry run ends as the run would on a kernel address: where the
    // kernel refuses one, with the run's refusal as its last line (the kernel's word, not the cache's).
    assert_eq!(
        out.status.code(),
        Some(util::kernel_dry_run_code()),
        "stderr: {plan_err}"
    );
    if util::kernel_dry_run_code() != 0 {
        let refusal = plan_err.lines().last().unwrap_or_default().to_string();
        assert!(
            refusal.starts_with("ksymwatch: error: ") && refusal.contains("kernel address"),
            "{plan_err}"
        );
        plan_err.truncate(plan_err.len() - refusal.len() - 1);
    }
    assert!(
        plan.contains(&format!("# target: {KERNEL_TARGET} addr=0xffff")),
        "{plan}"
    );

    let w = Writer::start(&["read", "100", "0"]);
    let mut args = vec![
        "write".to_string(),
        w.target(),
        "--count".into(),
        "3".into(),
        "--duration".into(),
        "60s".into(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let t = Tracer::start_with_env(&args, &[("KSYMWATCH_CACHE_DIR", dir)]);
    w.go_and_finish();
    let (code, stdout, stderr) = t.wait(Duration::from_secs(60));
    assert_eq!(code, 0, "stderr: {stderr}");
    let hits = parse_hits(&stdout);
    assert_eq!(hits.len(), 3, "{stdout}\n{stderr}");
    let mut frames = Vec::new();
    for h in hits {
        let mut f = vec![h.ip.clone()];
        f.extend(kernel_frames(&h.chain).iter().cloned());
        assert!(f.len() > 1, "a kernel write has kernel frames: {h:?}");
        frames.push(f);
    }
    (plan, frames, format!("{plan_err}{stderr}"))
}

/// Every frame is `func+0xOFF/0xSIZE` with `func` a kallsyms text symbol: what the table said, not an
/// address the cache failed to name.
fn assert_named(frames: &[Vec<String>], what: &str) {
    let names = crate::live_watch::kallsyms_text_names();
    for f in frames.iter().flatten() {
        let name = f.split('+').next().unwrap_or(f);
        assert!(
            names.contains(name) && f.contains("+0x") && f.contains("/0x"),
            "{what}: frame `{f}` is not a kallsyms function+offset/size"
        );
    }
}

fn cache_file(dir: &Path) -> PathBuf {
    dir.join("kallsyms.bin")
}

live_test!(warm_cache_resolves_and_names_frames_as_kallsyms_does, {
    let dir = cache_dir("warm");
    let (cold_plan, cold, _) = watch(&dir, &[]);
    let file = cache_file(&dir);
    let meta = std::fs::metadata(&file).expect("the first run writes the cache");
    assert_eq!(
        meta.permissions().mode() & 0o777,
        0o600,
        "kallsyms addresses are secret"
    );
    let dir_mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(dir_mode, 0o700);
    let written = std::fs::read(&file).unwrap();
    let (warm_plan, warm, _) = watch(&dir, &[]);
    assert_eq!(
        warm_plan, cold_plan,
        "same target, address and symbol source"
    );
    assert_named(&cold, "cold");
    assert_named(&warm, "warm");
    assert_eq!(
        std::fs::read(&file).unwrap(),
        written,
        "a warm run does not rewrite the cache"
    );
    std::fs::remove_dir_all(&dir).unwrap();
});

live_test!(corrupt_cache_falls_back_to_kallsyms_and_is_rewritten, {
    let dir = cache_dir("corrupt");
    let (header, _, _) = watch(&dir, &[]);
    let file = cache_file(&dir);
    let mut bytes = std::fs::read(&file).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    bytes.truncate(bytes.len() - 7);
    std::fs::write(&file, &bytes).unwrap();
    let (again, frames, err) = watch(&dir, &[]);
    assert_eq!(again, header, "{err}");
    assert_named(&frames, "after a corrupt cache");
    let rewritten = std::fs::read(&file).unwrap();
    assert_ne!(rewritten, bytes, "the corrupt file was replaced");
    std::fs::remove_dir_all(&dir).unwrap();
});

live_test!(no_symbol_cache_neither_reads_nor_writes_it, {
    let dir = cache_dir("off");
    let (fresh_header, frames, _) = watch(&dir, &["--no-symbol-cache"]);
    assert!(!dir.exists(), "--no-symbol-cache created {}", dir.display());
    assert_named(&frames, "--no-symbol-cache");
    // A cache whose content is wrong but valid-looking is not consulted with the flag: plant one written
    // by a run, then make it unreadable as a cache (but still ours and private), and compare.
    let (cached_header, _, _) = watch(&dir, &[]);
    assert_eq!(cached_header, fresh_header);
    std::fs::write(cache_file(&dir), b"not a cache").unwrap();
    let (off_header, _, _) = watch(&dir, &["--no-symbol-cache"]);
    assert_eq!(off_header, fresh_header);
    assert_eq!(
        std::fs::read(cache_file(&dir)).unwrap(),
        b"not a cache",
        "--no-symbol-cache must not write the cache"
    );
    std::fs::remove_dir_all(&dir).unwrap();
});

live_test!(group_writable_cache_dir_is_not_used, {
    let dir = cache_dir("perms");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o770)).unwrap();
    let (_, frames, err) = watch(&dir, &[]);
    assert_named(&frames, "untrusted cache dir");
    assert!(
        !err.contains("error"),
        "an untrusted cache is skipped silently: {err}"
    );
    assert!(
        !cache_file(&dir).exists(),
        "nothing is written into a group-writable directory"
    );
    std::fs::remove_dir_all(&dir).unwrap();
});
