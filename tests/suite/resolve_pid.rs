//! `ksymwatch resolve --pid PID TARGET` run as the real binary on live gcc-built programs
//! (`ksymwatch_symbols::testing::procsym`: PIE, non-PIE, with and without DWARF, with a copy relocation),
//! checked against what each program prints about its own variables, `nm` (file addresses) and `gdb -p`
//! (runtime addresses and sizes). Arms nothing. Without gcc (or nm, gdb for their checks) tests print SKIP.

use crate::util;

use std::path::{Path, PathBuf};

use ksymwatch_symbols::testing::procsym::{self, Running};
use util::{field, rejects, require, run, tool};

fn hex(text: &str) -> u64 {
    u64::from_str_radix(text.trim_start_matches("0x"), 16)
        .unwrap_or_else(|e| panic!("not hex ({e}): {text}"))
}

/// `resolve --pid PID TARGET --json`, which must succeed.
fn resolve_json(pid: u32, target: &str) -> serde_json::Value {
    let (code, out, err) = run(&["resolve", "--pid", &pid.to_string(), target, "--json"]);
    assert_eq!(code, 0, "{target}: {err}");
    assert_eq!(out.lines().count(), 1, "one JSON object on one line: {out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn addr(j: &serde_json::Value, key: &str) -> u64 {
    hex(j[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} is not a string: {j}")))
}

/// The address `nm` gives `name` in `file`.
fn nm_addr(file: &Path, name: &str) -> u64 {
    let nm = tool("nm", &[file.to_str().unwrap()]);
    let line = nm
        .lines()
        .find(|l| l.split_whitespace().last() == Some(name))
        .unwrap_or_else(|| panic!("{name} not in nm {}", file.display()));
    hex(line.split_whitespace().next().unwrap())
}

/// `gdb -p PID` evaluating `p &EXPR` and `p sizeof(EXPR)`: (address, size).
fn gdb(pid: u32, expr: &str) -> (u64, u64) {
    let out = tool(
        "gdb",
        &[
            "-nx",
            "-batch",
            "-p",
            &pid.to_string(),
            "-ex",
            &format!("p &{expr}"),
            "-ex",
            &format!("p sizeof({expr})"),
        ],
    );
    let vals: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with('$'))
        .filter_map(|l| l.split(" = ").nth(1))
        .collect();
    assert_eq!(vals.len(), 2, "gdb: {out}");
    // `(struct point *) 0x5555... <counters+16>`: the first 0x word.
    let a = vals[0]
        .split_whitespace()
        .find(|w| w.starts_with("0x"))
        .unwrap_or_else(|| panic!("no address in gdb's {}", vals[0]));
    (hex(a), vals[1].trim().parse().unwrap())
}

/// The procsym program built as `variant` with `flags`, where `tool`, the test's ground truth, is here
/// too (else a SKIP line).
fn build_checked_by(variant: &str, flags: &[&str], tool: &str) -> Option<PathBuf> {
    let prog = procsym::build(variant, flags)?;
    require(tool).then_some(prog)
}

#[test]
fn a_pie_global_is_nm_s_address_plus_the_load_bias() {
    let Some(prog) = build_checked_by("pie", procsym::PIE, "nm") else {
        return;
    };
    let p = Running::start(&prog, &[]);
    let j = resolve_json(p.pid, "counters");
    let runtime = addr(&j, "runtime_addr");
    assert_eq!(runtime, p.addr("counters"));
    assert_eq!(addr(&j, "file_vaddr"), nm_addr(&prog, "counters"));
    assert_eq!(addr(&j, "load_bias"), runtime - nm_addr(&prog, "counters"));
    assert_ne!(addr(&j, "load_bias"), 0, "a PIE is moved: {j}");
    assert_eq!(j["object"], prog.to_str().unwrap());
    assert_eq!(
        (j["is_exe"].as_bool(), j["pid"].as_u64()),
        (Some(true), Some(u64::from(p.pid)))
    );
    assert_eq!(
        (j["symbol"].as_str(), j["type_char"].as_str()),
        (Some("counters"), Some("D"))
    );
    assert_eq!(
        (j["size"].as_u64(), j["type"].as_str()),
        (Some(56), Some("struct counters"))
    );
    assert_eq!(j["section"], ".data");
    let j = resolve_json(p.pid, "plain_global");
    assert_eq!(addr(&j, "runtime_addr"), p.addr("plain_global"));
    assert_eq!(
        (j["section"].as_str(), j["type_char"].as_str()),
        (Some(".bss"), Some("B"))
    );
}

#[test]
fn a_non_pie_global_has_bias_zero() {
    let Some(prog) = build_checked_by("no-pie", procsym::NO_PIE, "nm") else {
        return;
    };
    let p = Running::start(&prog, &[]);
    let (code, out, err) = run(&["resolve", "--pid", &p.pid.to_string(), "plain_global"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(field(&out, "load bias"), "0x0000000000000000");
    let nm = nm_addr(&prog, "plain_global");
    assert_eq!(field(&out, "file vaddr"), format!("0x{nm:016x}"));
    assert_eq!(field(&out, "runtime addr"), format!("0x{nm:016x}"));
    assert_eq!(nm, p.addr("plain_global"));
    assert_eq!(field(&out, "type"), "long int (B)");
}

#[test]
fn fields_and_libc_environ_match_gdb() {
    let Some(prog) = build_checked_by("pie", procsym::PIE, "gdb") else {
        return;
    };
    let p = Running::start(&prog, &[]);
    for expr in [
        "counters.pts[2].y",
        "counters.name",
        "counters.flags[3]",
        "counters",
    ] {
        let j = resolve_json(p.pid, expr);
        let (gdb_addr, gdb_size) = gdb(p.pid, expr);
        assert_eq!(addr(&j, "runtime_addr"), gdb_addr, "{expr}: {j}");
        assert_eq!(j["size"].as_u64(), Some(gdb_size), "{expr}: {j}");
        assert_eq!(j["debug_info"], prog.to_str().unwrap());
    }
    // The whole text form of a member.
    let (code, out, err) = run(&["resolve", "--pid", &p.pid.to_string(), "counters.pts[2].y"]);
    assert_eq!(code, 0, "{err}");
    let symbol = p.addr("counters");
    let nm = tool("nm", &[prog.to_str().unwrap()]);
    let file = nm
        .lines()
        .find(|l| l.ends_with(" counters"))
        .map(|l| hex(l.split_whitespace().next().unwrap()))
        .unwrap();
    assert_eq!(
        out,
        format!(
            "target:       counters.pts[2].y\nprocess:      {pid} (procsym-pie)\nobject:       {prog} (executable)\n\
             symbol:       counters\nsection:      .data\nfile vaddr:   0x{file:016x}\nload bias:    0x{bias:016x}\n\
             runtime addr: 0x{y:016x}\noffset:       0x24\nsize:         4\ntype:         int (D)\n\
             member:       .pts[2].y at offset 0x24\ndebug info:   {prog}\n",
            pid = p.pid,
            prog = prog.display(),
            bias = symbol - file,
            y = p.addr("counters.pts[2].y"),
        )
    );
    // libc's environ: what gdb says, and what dlsym finds in the program.
    let (gdb_environ, _) = gdb(p.pid, "environ");
    for target in ["libc.so.6:environ", "libc:environ", "environ"] {
        let j = resolve_json(p.pid, target);
        assert_eq!(addr(&j, "runtime_addr"), gdb_environ, "{target}: {j}");
        assert_eq!(addr(&j, "runtime_addr"), p.addr("dl_environ"), "{target}");
        assert_eq!(j["object_name"], "libc.so.6");
        assert_eq!(j["is_exe"], false);
        assert!(j["notes"].as_array().unwrap().is_empty(), "{j}");
    }
}

#[test]
fn a_copy_relocation_makes_the_executable_s_environ_the_live_one() {
    let Some(prog) = procsym::build("copy-reloc", procsym::COPY_RELOC) else {
        return;
    };
    let p = Running::start(&prog, &[]);
    let j = resolve_json(p.pid, "environ");
    assert_eq!(addr(&j, "runtime_addr"), p.addr("environ"));
    assert_eq!(addr(&j, "runtime_addr"), p.addr("dl_environ"));
    assert_eq!(j["is_exe"], true);
    // libc's own copy resolves, with a note that it is not the one in use.
    let (code, out, err) = run(&["resolve", "--pid", &p.pid.to_string(), "libc.so.6:environ"]);
    assert_eq!(code, 0, "{err}");
    assert_ne!(hex(field(&out, "runtime addr")), p.addr("environ"));
    let note = field(&out, "note");
    assert!(
        note.contains("copy relocation")
            && note.contains(&format!("0x{:x}", p.addr("environ")))
            && note.contains("without `libc.so.6:`"),
        "{note}"
    );
}

#[test]
fn refusals_are_one_line_with_their_exit_codes() {
    let pie = ("pie", procsym::PIE);
    let Some((prog, nodebug)) = procsym::build_two(pie, ("no-debug", procsym::NO_DEBUG)) else {
        return;
    };
    let p = Running::start(&prog, &[]);
    let pid = p.pid.to_string();
    // A pid the kernel never hands out.
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap();
    let gone = pid_max.trim();
    rejects(
        &["resolve", "--pid", gone, "counters"],
        2,
        &[&format!("no process {gone}")],
    );
    let searched = format!("unknown symbol `nosuch` in process {pid}: not in procsym-pie, ");
    let at = |target| ["resolve", "--pid", pid.as_str(), target];
    rejects(&at("nosuch"), 2, &[&searched, "libc.so.6"]);
    rejects(
        &at("libnothere:x"),
        2,
        &["no file `libnothere` mapped", "procsym-pie"],
    );
    rejects(&at("tls_var"), 2, &["thread-local"]);
    rejects(&at("counters.nope"), 2, &["no field `nope`", "pts"]);
    rejects(&at("counters+56"), 2, &["past the end of `counters`"]);
    rejects(&at("counters/8"), 2, &["drop the /LEN"]);
    // A kernel target takes no OBJECT:, and --pid no kernel symbol file.
    rejects(&["resolve", "libc:environ"], 2, &["kernel watch", "--pid"]);
    rejects(
        &["resolve", "--pid", &pid, "x", "--vmlinux", "/tmp"],
        2,
        &["--vmlinux"],
    );
    // Fields need -g.
    let q = Running::start(&nodebug, &[]);
    rejects(
        &["resolve", "--pid", &q.pid.to_string(), "counters.hits"],
        2,
        &["rebuild it with -g"],
    );
    let (code, _, err) = run(&["resolve", "--pid", &q.pid.to_string(), "counters"]);
    assert_eq!(code, 0, "a bare name needs no DWARF: {err}");
}

#[test]
fn another_user_s_process_is_not_permitted() {
    let Some(prog) = procsym::build("pie", procsym::PIE) else {
        return;
    };
    let p = Running::start(&prog, &[]);
    let pid = p.pid.to_string();
    let Some((code, _, err)) = util::run_as_nobody(&["resolve", "--pid", &pid, "counters"]) else {
        return;
    };
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains(&format!("/proc/{pid}/maps")) && err.contains("CAP_SYS_PTRACE"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}
