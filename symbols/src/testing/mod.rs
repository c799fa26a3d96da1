//! Test support shared by the test suites of both crates of the workspace (behind the `testing` feature,
//! which only dev-dependencies enable, so none of it is in a release build of the tool): the gcc-built
//! "vmlinux" [`fixture`], tiny hand-laid user ELF files ([`elf`]) and a made-up `/proc` to map them in
//! ([`fake_proc`]), the gcc-built user program whose variables tests look up in a live process
//! ([`procsym`]), servers for the debuginfod client ([`debuginfod`]), a made-up kallsyms with kernel modules
//! ([`MODULES_KALLSYMS`]), and the one way a test says it is skipped.

pub mod debuginfod;
pub mod elf;
pub mod fake_proc;
pub mod fixture;
pub mod procsym;

/// A kallsyms with two modules, for module-symbol tests (this machine's kernel has no module support):
/// `counter` in vmlinux, `foo` and `bar`; `foo_dup` twice in `foo`; sizes end at each module's last symbol.
pub const MODULES_KALLSYMS: &str = "\
ffffffff81000000 T _text
ffffffff81000040 T do_thing
ffffffff83000000 D counter
ffffffffc0001000 t foo_init\t[foo]
ffffffffc0001080 d counter\t[foo]
ffffffffc0001088 d foo_flags\t[foo]
ffffffffc0001090 d foo_dup\t[foo]
ffffffffc00010a0 d foo_dup\t[foo]
ffffffffc0002000 t bar_fn\t[bar]
ffffffffc0002040 d counter\t[bar]
ffffffffc0002048 d bar_end\t[bar]
";

use std::fmt::Display;
use std::io::Write as _;
use std::process::Command;

/// `a.b[3][1].c` as member path elements, the way the CLI's target grammar reads a path after a base (a
/// leading `.` is optional). Panics on a malformed index: only tests and examples write these.
pub fn member_path(s: &str) -> Vec<crate::path::PathElem> {
    use crate::path::PathElem;
    let mut out = Vec::new();
    for part in s.split('.').filter(|p| !p.is_empty()) {
        let (name, rest) = part.split_once('[').unwrap_or((part, ""));
        if !name.is_empty() {
            out.push(PathElem::Field(name.into()));
        }
        for i in rest.split('[').filter(|i| !i.is_empty()) {
            out.push(PathElem::Index(
                i.trim_end_matches(']').parse().expect("a decimal index"),
            ));
        }
    }
    out
}

/// Says that the running test is skipped and why, as one `SKIP: <test>: <why>` line on stderr directly
/// (past libtest's capture), so every skip shows in a plain `cargo test` run and `scripts/test` can count
/// them. The test's name is the one libtest gave the thread it runs the test on.
pub fn skip(why: impl Display) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("<unnamed test>");
    // One write of the whole line, so a concurrent test's output cannot split it.
    let line = format!("SKIP: {test}: {why}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// Whether `tool --version` runs and succeeds.
pub fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether `tool` is installed; if not, the running test is [`skip`]ped with "`tool` not found".
pub fn require(tool: &str) -> bool {
    let ok = have(tool);
    if !ok {
        skip(format_args!("{tool} not found"));
    }
    ok
}

/// Asserts that `text` holds every one of `parts` (an error message's facts and its way out), naming the
/// first one missing.
#[track_caller]
pub fn assert_mentions(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "`{part}` missing from: {text}");
    }
}

/// One little-endian ELF note (as in `/sys/kernel/notes` or a `.notes` section on x86-64): namesz,
/// descsz, type, then the name and the descriptor, each padded to 4 bytes.
pub fn note(name: &[u8], ntype: u32, desc: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&(name.len() as u32).to_le_bytes());
    v.extend_from_slice(&(desc.len() as u32).to_le_bytes());
    v.extend_from_slice(&ntype.to_le_bytes());
    v.extend_from_slice(name);
    v.resize(v.len().next_multiple_of(4), 0);
    v.extend_from_slice(desc);
    v.resize(v.len().next_multiple_of(4), 0);
    v
}

/// What gdb says of C expression `expr` in the ELF file `elf`: its address (`p/x &EXPR`) and size
/// (`p sizeof(EXPR)`), the reference the member-path arithmetic is checked against. Needs gdb
/// ([`require`] it first).
pub fn gdb_addr_and_size(elf: &std::path::Path, expr: &str) -> (u64, u64) {
    let out = tool(
        "gdb",
        &[
            "-nx",
            "-batch",
            "-ex",
            &format!("p/x &{expr}"),
            "-ex",
            &format!("p sizeof({expr})"),
            elf.to_str().expect("utf-8 path"),
        ],
    );
    let vals: Vec<&str> = out.lines().filter_map(|l| l.split(" = ").nth(1)).collect();
    let addr = vals[0].rsplit(' ').next().unwrap_or_default();
    let addr = u64::from_str_radix(addr.trim_start_matches("0x"), 16)
        .unwrap_or_else(|e| panic!("gdb's address of {expr}: {e}: {out}"));
    let size = vals[1]
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("gdb's size of {expr}: {e}: {out}"));
    (addr, size)
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
