//! The gcc-built "vmlinux" fixture: symbols/tests/fixture/{a,b}.c compiled like kernel code and linked
//! with vmlinux.ld at the kernel base with a build-id. The one builder for the test suites of both crates
//! (`ksymwatch_symbols::testing::fixture`); the sources are found from this crate's manifest directory.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::{have, skip};

pub struct Fixture {
    /// A directory of this test process's own, for files the tests derive from the fixture.
    pub dir: PathBuf,
    pub vmlinux: PathBuf,
}

impl Fixture {
    /// The fixture vmlinux's GNU build-id.
    pub fn build_id(&self) -> crate::BuildId {
        build_id_of(&self.vmlinux)
    }
}

/// The GNU build-id of the vmlinux at `path` (one the tests built, which has one).
pub fn build_id_of(path: &Path) -> crate::BuildId {
    crate::Vmlinux::open(path)
        .expect("open the vmlinux")
        .build_id()
        .expect("the vmlinux has a build-id")
        .clone()
}

/// symbols/tests/fixture: the C sources and linker script.
pub fn sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixture")
}

/// Builds the fixture once per test process; `None` when gcc is missing, after a SKIP line for the
/// running test (every test that asks for it is skipped visibly, not only the first).
pub fn build() -> Option<&'static Fixture> {
    static F: OnceLock<Option<Fixture>> = OnceLock::new();
    let built = F
        .get_or_init(|| {
            if !have("gcc") {
                return None;
            }
            let src = sources();
            let dir = std::env::temp_dir()
                .join(format!("ksymwatch-vmlinux-fixture-{}", std::process::id()));
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
        .as_ref();
    if built.is_none() {
        skip("gcc not found; the vmlinux fixture cannot be built");
    }
    built
}
