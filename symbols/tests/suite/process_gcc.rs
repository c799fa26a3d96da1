//! `process::resolve` on live gcc-built programs (`ksymwatch_symbols::testing::procsym`): member paths
//! through the program's own DWARF, through a separate debug file found by build-id, and the refusals
//! around them. What the program prints about its own variables is the ground truth. Without gcc (or
//! objcopy and readelf for the debug-file tests) tests print SKIP.

use std::path::Path;

use ksymwatch_symbols::process::{resolve, ProcessError, ProcessTarget};
use ksymwatch_symbols::testing::procsym::{self, Running};
use ksymwatch_symbols::testing::{require, tool};
use ksymwatch_symbols::PathElem;

/// `counters.pts[2].y` as a member path.
fn path(text: &str) -> Vec<PathElem> {
    let mut out = Vec::new();
    for part in text.split('.').filter(|p| !p.is_empty()) {
        let (field, indices) = part.split_once('[').unwrap_or((part, ""));
        out.push(PathElem::Field(field.to_string()));
        for i in indices.split('[') {
            if let Some(n) = i.strip_suffix(']') {
                out.push(PathElem::Index(n.parse().unwrap()));
            }
        }
    }
    out
}

fn live(
    proc_root: &Path,
    p: &Running,
    name: &str,
    member: &str,
) -> Result<ProcessTarget, ProcessError> {
    resolve(proc_root, p.pid, None, name, None, &path(member))
}

#[test]
fn member_paths_in_a_live_pie_match_what_it_prints() {
    let Some(prog) = procsym::build("pie", procsym::PIE) else {
        return;
    };
    let p = Running::start(&prog, &[]);
    let proc_root = Path::new("/proc");
    let t = live(proc_root, &p, "counters", ".pts[2].y").unwrap();
    assert_eq!(t.addr, p.addr("counters.pts[2].y"));
    assert_eq!((t.size, t.type_name.as_deref()), (Some(4), Some("int")));
    assert_eq!(
        t.member.as_ref().map(|m| m.path.as_str()),
        Some(".pts[2].y")
    );
    assert_eq!(t.debug_file.as_deref(), Some(prog.as_path()));
    assert_eq!(t.symbol_addr(), p.addr("counters"));
    let t = live(proc_root, &p, "counters", ".name").unwrap();
    assert_eq!(
        (t.addr, t.size, t.type_name.as_deref()),
        (p.addr("counters.name"), Some(16), Some("char[16]"))
    );
    // A bare name gets its type too, and the size DWARF gives.
    let t = live(proc_root, &p, "counters", "").unwrap();
    assert_eq!(
        (t.size, t.type_name.as_deref(), t.member.is_none()),
        (Some(56), Some("struct counters"), true)
    );
    let e = live(proc_root, &p, "counters", ".pts[3]").unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
}

/// A stripped program and its debug file: a fixture /proc whose process root holds the debug file where a
/// distribution installs it, `/usr/lib/debug/.build-id/xx/yyyy.debug`.
#[test]
fn a_separate_debug_file_is_found_by_build_id() {
    let pie = ("pie", procsym::PIE);
    let Some((prog, other)) = procsym::build_two(pie, ("no-pie", procsym::NO_PIE)) else {
        return;
    };
    if !require("objcopy") || !require("readelf") {
        return;
    }
    let dir = prog.with_file_name("debuglink");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let debug = dir.join("procsym.debug");
    let stripped = dir.join("procsym-stripped");
    tool("objcopy", &["--only-keep-debug", &s(&prog), &s(&debug)]);
    tool("objcopy", &["--strip-debug", &s(&prog), &s(&stripped)]);
    let id = build_id(&prog);
    let p = Running::start(&stripped, &[]);
    // The fixture /proc: the live process's maps and exe, and a root with the debug file.
    let fake = dir.join("proc");
    let pid_dir = fake.join(p.pid.to_string());
    let in_root = pid_dir.join(format!("root/usr/lib/debug/.build-id/{}", &id[..2]));
    std::fs::create_dir_all(&in_root).unwrap();
    std::fs::copy(format!("/proc/{}/maps", p.pid), pid_dir.join("maps")).unwrap();
    std::os::unix::fs::symlink(
        std::fs::read_link(format!("/proc/{}/exe", p.pid)).unwrap(),
        pid_dir.join("exe"),
    )
    .unwrap();
    let installed = in_root.join(format!("{}.debug", &id[2..]));

    // Without it, a member path names the fix; a bare name still resolves.
    let e = live(&fake, &p, "counters", ".pts[2].y").unwrap_err();
    assert!(matches!(e, ProcessError::NoDebugInfo { .. }), "{e:?}");
    assert!(e.to_string().contains("rebuild it with -g"), "{e}");
    assert_eq!(
        live(&fake, &p, "counters", "").unwrap().addr,
        p.addr("counters")
    );

    std::fs::copy(&debug, &installed).unwrap();
    let t = live(&fake, &p, "counters", ".pts[2].y").unwrap();
    assert_eq!(t.addr, p.addr("counters.pts[2].y"));
    assert_eq!(t.type_name.as_deref(), Some("int"));
    assert_eq!(t.debug_file.as_deref(), Some(installed.as_path()));

    // A debug file of another build at that path is not believed.
    std::fs::copy(&other, &installed).unwrap();
    let e = live(&fake, &p, "counters", ".pts[2].y").unwrap_err();
    assert!(matches!(e, ProcessError::NoDebugInfo { .. }), "{e:?}");
    drop(p);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn compressed_debug_info_is_refused_with_the_fix() {
    let Some(prog) = procsym::build("compressed", procsym::COMPRESSED) else {
        return;
    };
    let p = Running::start(&prog, &[]);
    let e = live(Path::new("/proc"), &p, "counters", ".hits").unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(e, ProcessError::DebugInfo { .. })
            && text.contains("compressed")
            && text.contains("objcopy --decompress-debug-sections"),
        "{text}"
    );
    // A bare name needs no DWARF.
    let t = live(Path::new("/proc"), &p, "counters", "").unwrap();
    assert_eq!((t.addr, t.type_name), (p.addr("counters"), None));
}

/// The GNU build-id of `file`, as readelf prints it.
fn build_id(file: &Path) -> String {
    let notes = tool("readelf", &["-n", file.to_str().unwrap()]);
    notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("no build-id in {}: {notes}", file.display()))
        .trim()
        .to_string()
}
