//! The gcc-built "vmlinux" fixture: symbols/tests/fixture/{a,b}.c compiled like kernel code and linked
//! with vmlinux.ld at the kernel base with a build-id. One copy of this file serves the test crates of
//! both the symbols crate and the workspace root, which include it with `#[path = "..."] mod fixture;`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub struct Fixture {
    /// A directory of this test binary's own, for files the tests derive from the fixture.
    pub dir: PathBuf,
    pub vmlinux: PathBuf,
}

/// Whether `tool --version` runs and succeeds.
pub fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs `cmd args`, panicking with its stderr if it fails; returns its stdout.
pub fn tool(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Builds the fixture once per test binary; `None` (after a SKIP line) when gcc is missing.
pub fn build() -> Option<&'static Fixture> {
    static F: OnceLock<Option<Fixture>> = OnceLock::new();
    F.get_or_init(|| {
        if !have("gcc") {
            // On stderr directly (past libtest's capture), so the skip shows in a plain `cargo test`.
            let _ = writeln!(
                std::io::stderr(),
                "SKIP: gcc not found; the vmlinux fixture cannot be built"
            );
            return None;
        }
        let src = sources();
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("vmlinux-fixture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cflags = [
            "-g",
            "-O0",
            "-mcmodel=kernel",
            "-fno-pie",
            "-fno-asynchronous-unwind-tables",
            "-fcf-protection=none",
            "-fno-stack-protector",
            "-c",
        ];
        for f in ["a", "b"] {
            let st = Command::new("gcc")
                .args(cflags)
                .arg(src.join(format!("{f}.c")))
                .arg("-o")
                .arg(dir.join(format!("{f}.o")))
                .status()
                .unwrap();
            assert!(st.success(), "gcc -c {f}.c failed");
        }
        let vmlinux = dir.join("vmlinux");
        let st = Command::new("gcc")
            .args([
                "-nostdlib",
                "-static",
                "-no-pie",
                "-Wl,--build-id=sha1",
                "-Wl,--no-warn-rwx-segments",
            ])
            .arg(format!("-Wl,-T,{}", src.join("vmlinux.ld").display()))
            .arg(dir.join("a.o"))
            .arg(dir.join("b.o"))
            .arg("-o")
            .arg(&vmlinux)
            .status()
            .unwrap();
        assert!(st.success(), "linking the fixture failed");
        Some(Fixture { dir, vmlinux })
    })
    .as_ref()
}

/// symbols/tests/fixture, from whichever crate this file is compiled into.
fn sources() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    if env!("CARGO_PKG_NAME") == "ksymwatch-symbols" {
        manifest.join("tests/fixture")
    } else {
        manifest.join("symbols/tests/fixture")
    }
}
