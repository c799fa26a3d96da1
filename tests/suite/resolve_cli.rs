//! The CLI's side of symbol resolution, run as the real binary: `ksymwatch resolve` and `write` against the
//! gcc-built "vmlinux" fixture of the symbols crate (`ksymwatch_symbols::testing::fixture`), checked against what
//! `nm`, `gdb` and `addr2line` say about the same file. The fixture's build-id is not the running kernel's,
//! which is exactly the mismatch path; `--kallsyms` and the hidden `--kernel-notes` stand in for a running
//! kernel that *is* the fixture, to check relocation. Without gcc (or gdb for its checks) tests print SKIP.

use crate::util;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ksymwatch_symbols::annotate::{self as lines, LineSource};
use ksymwatch_symbols::{Resolver, Source, SourceSearch, VmlinuxLines};
use util::{field, fixture, have, require, run, tool};

/// Where the fixture pretends the running kernel put `_text` (a KASLR offset of 0x19000000).
pub(crate) const RUNTIME_TEXT: u64 = 0xffff_ffff_9a00_0000;
pub(crate) const LINK_TEXT: u64 = 0xffff_ffff_8100_0000;

pub(crate) struct Fixture {
    pub(crate) dir: PathBuf,
    pub(crate) vmlinux: PathBuf,
    /// `nm -n` of the fixture: a System.map.
    system_map: PathBuf,
    /// The fixture's `.notes` section: what `/sys/kernel/notes` would hold if it were running.
    pub(crate) notes: PathBuf,
    /// A kallsyms for a running kernel that is the fixture, moved by KASLR.
    pub(crate) kallsyms: PathBuf,
}

fn nm_addr(nm: &str, name: &str) -> u64 {
    let line = nm
        .lines()
        .find(|l| l.split_whitespace().last() == Some(name))
        .unwrap_or_else(|| panic!("{name} not in nm output"));
    u64::from_str_radix(line.split_whitespace().next().unwrap(), 16).unwrap()
}

/// The symbols crate's fixture (built once per test binary) and what nm and objcopy make of it; `None`
/// (after a SKIP line for the running test) when a tool is missing. Also the made-up running kernel of
/// the debuginfod tests (`debuginfod_cli`).
pub(crate) fn fixture() -> Option<&'static Fixture> {
    static F: OnceLock<Option<Fixture>> = OnceLock::new();
    let built = fixture::build()?;
    let derived = F.get_or_init(|| {
        if !["nm", "objcopy"].iter().all(|t| have(t)) {
            return None;
        }
        let (dir, vmlinux) = (built.dir.clone(), built.vmlinux.clone());
        let v = vmlinux.to_str().unwrap();
        let nm = tool("nm", &["-n", v]);
        let system_map = dir.join("System.map");
        std::fs::write(&system_map, &nm).unwrap();
        let notes = dir.join("notes");
        tool(
            "objcopy",
            &[
                "-O",
                "binary",
                "--only-section=.notes",
                v,
                notes.to_str().unwrap(),
            ],
        );
        let mut ks = String::new();
        for name in ["_text", "_stext", "use_a", "use_inline", "use_b"] {
            let a = nm_addr(&nm, name) - LINK_TEXT + RUNTIME_TEXT;
            ks.push_str(&format!("{a:016x} T {name}\n"));
        }
        let kallsyms = dir.join("kallsyms");
        std::fs::write(&kallsyms, ks).unwrap();
        Some(Fixture {
            dir,
            vmlinux,
            system_map,
            notes,
            kallsyms,
        })
    });
    if derived.is_none() {
        util::skip(
            "nm or objcopy not found; the vmlinux fixture's System.map and notes cannot be made",
        );
    }
    derived.as_ref()
}

impl Fixture {
    /// `args`, then the flags that make the fixture the running kernel: its kallsyms (moved by KASLR)
    /// and its notes.
    pub(crate) fn running<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut a = args.to_vec();
        a.extend([
            "--kallsyms",
            p(&self.kallsyms),
            "--kernel-notes",
            p(&self.notes),
        ]);
        a
    }
}

macro_rules! need_fixture {
    () => {
        match fixture() {
            Some(f) => f,
            None => return,
        }
    };
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn json(out: &str) -> serde_json::Value {
    assert_eq!(out.lines().count(), 1, "one JSON object on one line: {out}");
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn hex(v: &serde_json::Value) -> u64 {
    let s = v.as_str().unwrap_or_else(|| panic!("not a string: {v}"));
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

/// An error run: exit 2 and exactly one `ksymwatch: error:` line on stderr.
fn usage_error(args: &[&str]) -> String {
    util::rejects(args, 2, &[])
}

#[test]
fn resolve_text_matches_nm() {
    let f = need_fixture!();
    let nm = tool("nm", &["-S", p(&f.vmlinux)]);
    let (code, out, err) = run(&["resolve", "banner", "--vmlinux", p(&f.vmlinux)]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(field(&out, "target"), "banner");
    assert_eq!(
        field(&out, "link addr"),
        format!("0x{:016x}", nm_addr(&nm, "banner"))
    );
    let nm_size = nm
        .lines()
        .find(|l| l.ends_with(" banner"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap();
    assert_eq!(
        field(&out, "size").parse::<u64>().unwrap(),
        u64::from_str_radix(nm_size, 16).unwrap()
    );
    assert_eq!(field(&out, "section"), ".data");
    assert_eq!(field(&out, "type"), "char[65] (D)");
    assert_eq!(
        field(&out, "source"),
        format!("vmlinux {}", f.vmlinux.display())
    );
    let (_, out, _) = run(&["resolve", "zeroed_counter", "--vmlinux", p(&f.vmlinux)]);
    assert_eq!(field(&out, "section"), ".bss");
    assert_eq!(field(&out, "type"), "long unsigned int (B)");
    // `@N` picks among same-named statics; +OFF moves into the object.
    let (code, out, err) = run(&["resolve", "dup@1", "--vmlinux", p(&f.vmlinux)]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(field(&out, "type"), "long int (d)");
    let (_, out, _) = run(&["resolve", "banner+0x8", "--vmlinux", p(&f.vmlinux)]);
    assert_eq!(
        field(&out, "link addr"),
        format!("0x{:016x}", nm_addr(&nm, "banner") + 8)
    );
    assert_eq!(field(&out, "size"), "57");
}

#[test]
fn resolve_json_field_paths_match_gdb() {
    let f = need_fixture!();
    if !require("gdb") {
        return;
    }
    for t in [
        "sym.field[3].pts[2].y",
        "sym.halves.hi",
        "sym.grid[2][1]",
        "banner",
    ] {
        let (code, out, err) = run(&["resolve", t, "--vmlinux", p(&f.vmlinux), "--json"]);
        assert_eq!(code, 0, "{t}: {err}");
        let j = json(&out);
        let (gdb_addr, gdb_size) = ksymwatch_symbols::testing::gdb_addr_and_size(&f.vmlinux, t);
        assert_eq!(hex(&j["link_addr"]), gdb_addr, "{t}");
        assert_eq!(j["size"].as_u64(), Some(gdb_size), "{t}");
        assert_eq!(j["target"], t);
        assert_eq!(j["source"]["kind"], "vmlinux");
        assert_eq!(j["source"]["path"], p(&f.vmlinux));
        // The fixture is not the running kernel: no runtime address, and the JSON says why.
        assert!(j["runtime_addr"].is_null(), "{out}");
        assert_eq!(j["kernel_match"], "mismatch");
    }
    let j = json(
        &run(&[
            "resolve",
            "sym.field[3].pts[2].y",
            "--vmlinux",
            p(&f.vmlinux),
            "--json",
        ])
        .1,
    );
    assert_eq!(j["type"], "int");
    assert_eq!(j["symbol"], "sym");
    assert_eq!(j["section"], ".data");
}

#[test]
fn mismatched_vmlinux_still_answers_and_says_so() {
    let f = need_fixture!();
    let id = tool("readelf", &["-n", p(&f.vmlinux)]);
    let id = id
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap()
        .trim()
        .to_string();
    let (code, out, err) = run(&["resolve", "sym", "--vmlinux", p(&f.vmlinux)]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(field(&out, "runtime addr"), "unknown");
    let kernel = field(&out, "kernel");
    assert!(
        kernel.starts_with(&format!("MISMATCH (file build-id {id}, running kernel ")),
        "{kernel}"
    );
}

#[test]
fn matching_build_id_gives_kaslr_relocated_addresses() {
    let f = need_fixture!();
    let args = f.running(&["--vmlinux", p(&f.vmlinux)]);
    let mut a = vec!["resolve", "sym.field[3].pts[2].y", "--json"];
    a.extend(&args);
    let (code, out, err) = run(&a);
    assert_eq!(code, 0, "{err}");
    let j = json(&out);
    assert_eq!(j["kernel_match"], "match");
    let link = hex(&j["link_addr"]);
    assert_eq!(hex(&j["runtime_addr"]), link - LINK_TEXT + RUNTIME_TEXT);
    let mut a = vec!["resolve", "banner"];
    a.extend(&args);
    let (_, out, _) = run(&a);
    assert!(
        field(&out, "kernel").starts_with("match (build-id "),
        "{out}"
    );
    assert_eq!(field(&out, "runtime addr"), "0xffffffff9a0001a0");
}

#[test]
fn system_map_from_nm() {
    let f = need_fixture!();
    let nm = std::fs::read_to_string(&f.system_map).unwrap();
    // Against the real running kernel: link-time addresses only, and no claim that it matches.
    // `resolve TARGET` from the fixture's System.map, then `extra`.
    let with_map = |target: &'static str, extra: &[&'static str]| {
        let mut a = vec!["resolve", target, "--system-map", p(&f.system_map)];
        a.extend(extra);
        a
    };
    let (code, out, err) = run(&with_map("banner", &[]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        field(&out, "link addr"),
        format!("0x{:016x}", nm_addr(&nm, "banner"))
    );
    assert_eq!(
        field(&out, "source"),
        format!("System.map {}", f.system_map.display())
    );
    // Against a kallsyms whose text symbols agree: relocated, and the check is named.
    let (code, out, err) = run(&with_map(
        "zeroed_counter",
        &["--kallsyms", p(&f.kallsyms), "--json"],
    ));
    assert_eq!(code, 0, "{err}");
    let j = json(&out);
    assert_eq!(j["source"]["kind"], "system-map");
    assert_eq!(j["kernel_match"], "match");
    assert!(
        j["kernel_match_detail"]
            .as_str()
            .unwrap()
            .contains("text symbols agree"),
        "{out}"
    );
    assert_eq!(
        hex(&j["runtime_addr"]),
        nm_addr(&nm, "zeroed_counter") - LINK_TEXT + RUNTIME_TEXT
    );
    // --vmlinux wins over --system-map.
    let (_, out, _) = run(&with_map("banner", &["--vmlinux", p(&f.vmlinux)]));
    assert!(field(&out, "source").starts_with("vmlinux "), "{out}");
    // A System.map has no types: a field path says what to pass.
    let err = usage_error(&with_map("sym.id", &[]));
    assert!(err.contains("--vmlinux"), "{err}");
}

#[test]
fn dotted_symbol_names_resolve_whole() {
    let f = need_fixture!();
    let map = f.dir.join("dotted.map");
    std::fs::write(
        &map,
        "ffffffff81000000 T _text\nffffffff81000100 t foo.isra.0\nffffffff82000000 d counter.lto.7\n\
         ffffffff82000010 d after\n",
    )
    .unwrap();
    let (code, out, err) = run(&["resolve", "counter.lto.7", "--system-map", p(&map)]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(field(&out, "target"), "counter.lto.7");
    assert_eq!(field(&out, "link addr"), "0xffffffff82000000");
    // The longest existing name wins; the rest is a member path, which needs DWARF.
    let err = usage_error(&["resolve", "counter.lto.7.x", "--system-map", p(&map)]);
    assert!(err.contains("DWARF") && err.contains("--vmlinux"), "{err}");
}

#[test]
fn bad_input_is_exit_2_with_one_line() {
    let f = need_fixture!();
    let v = p(&f.vmlinux);
    let err = usage_error(&["resolve", "bannr", "--vmlinux", v]);
    assert!(
        err.contains("unknown symbol `bannr`") && err.contains("banner"),
        "{err}"
    );
    let err = usage_error(&["resolve", "sym.nope", "--vmlinux", v]);
    assert!(
        err.contains("no field `nope`") && err.contains("halves"),
        "{err}"
    );
    util::rejects(&["resolve", "dup", "--vmlinux", v], 2, &["dup@1"]);
    usage_error(&["resolve", "sym..x", "--vmlinux", v]);
    util::rejects(
        &["resolve", "banner", "--vmlinux", "/nonexistent/vmlinux"],
        2,
        &["/nonexistent/vmlinux"],
    );
    // kallsyms without data symbols: `resolve` and `write` say the same, naming every way out.
    let ks = f.dir.join("text-only-kallsyms");
    std::fs::write(
        &ks,
        "ffffffff81000000 T _text\nffffffff81000100 T jiffies_read\n",
    )
    .unwrap();
    let resolve = ["resolve", "jiffies", "--kallsyms", p(&ks)];
    let write = [
        "write",
        "jiffies",
        "--kallsyms",
        p(&ks),
        "--duration",
        "200ms",
    ];
    for args in [&resolve[..], &write[..]] {
        util::rejects(
            args,
            2,
            &[
                "no data symbols",
                "--vmlinux FILE",
                "--system-map FILE",
                "set DEBUGINFOD_URLS=URL",
            ],
        );
    }
}

#[test]
fn truncated_or_corrupt_elf_is_exit_2() {
    let f = need_fixture!();
    let bytes = std::fs::read(&f.vmlinux).unwrap();
    let trunc = f.dir.join("vmlinux-truncated");
    std::fs::write(&trunc, &bytes[..bytes.len() / 3]).unwrap();
    let garbage = f.dir.join("vmlinux-garbage");
    std::fs::write(&garbage, b"\x1f\x8b\x08 this is a gzip, not an ELF").unwrap();
    for file in [&trunc, &garbage] {
        for cmd in [
            &["resolve", "banner", "--vmlinux", p(file)][..],
            &[
                "write",
                "banner",
                "--vmlinux",
                p(file),
                "--duration",
                "200ms",
            ][..],
        ] {
            let err = usage_error(cmd);
            assert!(err.contains("not a usable vmlinux ELF"), "{cmd:?}: {err}");
            assert!(err.contains(p(file)), "names the file: {err}");
        }
    }
}

#[test]
fn write_refuses_a_mismatched_build_id() {
    let f = need_fixture!();
    util::rejects(
        &[
            "write",
            "banner",
            "--vmlinux",
            p(&f.vmlinux),
            "--duration",
            "200ms",
        ],
        2,
        &["not the running kernel", "MISMATCH", "--force"],
    );
}

/// A typed target's base symbol from that vmlinux is refused the same way: its link address is not the
/// running kernel's, and a cast on it must not get one armed.
#[test]
fn a_typed_base_from_a_mismatched_vmlinux_is_refused_too() {
    let f = need_fixture!();
    for target in [
        "(struct new_utsname)banner.sysname",
        "(struct list_head)banner.next",
    ] {
        let (code, out, err) = run(&[
            "write",
            target,
            "--vmlinux",
            p(&f.vmlinux),
            "--duration",
            "200ms",
        ]);
        assert_eq!(code, 2, "{target}: {err}");
        assert!(
            err.contains("not the running kernel") && err.contains("--force"),
            "{target}: {err}"
        );
        assert!(!out.contains("# armed"), "{target}: {out}");
    }
}

#[test]
fn lines_needs_a_vmlinux_with_debug_info() {
    let f = need_fixture!();
    let ks = f.dir.join("lines-kallsyms");
    std::fs::write(&ks, "ffffffff81000000 T _text\n").unwrap();
    util::rejects(
        &[
            "write",
            "0xffffffff81000000",
            "--lines",
            "--kallsyms",
            p(&ks),
            "--duration",
            "200ms",
        ],
        2,
        &["--lines", "--vmlinux"],
    );
    util::rejects(
        &[
            "write",
            "banner",
            "--lines",
            "--system-map",
            p(&f.system_map),
            "--duration",
            "200ms",
        ],
        2,
        &["--vmlinux"],
    );
    if !require("strip") {
        return;
    }
    let stripped = f.dir.join("vmlinux-nodebug");
    tool(
        "strip",
        &["--strip-debug", "-o", p(&stripped), p(&f.vmlinux)],
    );
    util::rejects(
        &[
            "write",
            "banner",
            "--lines",
            "--vmlinux",
            p(&stripped),
            "--force",
            "--duration",
            "200ms",
        ],
        2,
        &["no DWARF debug info"],
    );
}

#[test]
#[ignore = "live: arms hardware breakpoints (run by scripts/test as root)"]
fn write_with_force_gets_past_resolution() {
    let f = need_fixture!();
    let Some(_lock) = util::live() else { return };
    // The targets are kernel addresses: where the kernel refuses those, a dry run makes the same plan
    // (every target resolved and printed) and arms nothing.
    let refused = util::kernel_breakpoints().is_err();
    let how: &[&str] = if refused {
        &["--dry-run"]
    } else {
        &["--duration", "200ms"]
    };
    let write = [
        "write",
        "banner",
        "sym.halves.hi",
        "sym.field[3].pts[2].y",
        "--vmlinux",
        p(&f.vmlinux),
        "--force",
    ];
    let (code, out, err) = run(&[&write[..], how].concat());
    // A dry run of these kernel addresses ends as the run would where the kernel refuses them (exit 4).
    assert_eq!(
        code,
        if refused { 4 } else { 0 },
        "--force must get past resolution: {err}"
    );
    let nm = tool("nm", &["-n", p(&f.vmlinux)]);
    let banner = nm_addr(&nm, "banner");
    let sym = nm_addr(&nm, "sym");
    // The default length is the DWARF size capped at 8, and the `--force`d link address is moved by
    // kallsyms' _text (the real kernel's, so whatever KASLR did here).
    let first = out
        .lines()
        .find(|l| l.starts_with("# target: banner addr="))
        .unwrap_or_else(|| panic!("{out}"));
    let addr = first
        .split_whitespace()
        .find_map(|w| w.strip_prefix("addr=0x"))
        .unwrap();
    let shift = u64::from_str_radix(addr, 16).unwrap().wrapping_sub(banner);
    for (label, link, len) in [
        ("banner", banner, 8),
        ("sym.halves.hi", sym + 10, 2),
        ("sym.field[3].pts[2].y", sym + 0x98, 4),
    ] {
        let want = format!(
            "# target: {label} addr=0x{:x} len={len} access=W",
            link.wrapping_add(shift)
        );
        assert!(out.contains(&want), "want `{want}` in\n{out}");
    }
    assert!(out.contains("# symbols: vmlinux "), "{out}");
    assert!(
        out.contains("MISMATCH") && out.contains("armed anyway: --force"),
        "{out}"
    );
    assert!(
        out.contains("call chains: kallsyms /proc/kallsyms"),
        "{out}"
    );
    assert!(
        err.contains("warning:") && err.contains("hits may be some other variable"),
        "{err}"
    );
    if refused {
        util::kernel_part_skipped("arming the --force'd targets");
    }
}

#[test]
fn misaligned_length_on_a_field_is_refused() {
    let f = need_fixture!();
    // sym.halves.hi is a short at an offset that is 2 mod 8: /8 cannot be armed there.
    let err = usage_error(&f.running(&[
        "write",
        "sym.halves.hi/8",
        "--vmlinux",
        p(&f.vmlinux),
        "--duration",
        "200ms",
    ]));
    assert!(err.contains("naturally aligned"), "{err}");
}

/// The `--lines` interface used directly, as the printer will: runtime addresses in, fixture lines out,
/// checked against `addr2line -fi` on the link-time address.
#[test]
fn line_source_matches_addr2line() {
    let f = need_fixture!();
    if !require("addr2line") {
        return;
    }
    let mut search = SourceSearch::with_root(&f.dir, None);
    search.kallsyms = f.kallsyms.clone();
    search.notes = f.notes.clone();
    let resolver = Resolver::open_source(Source::Vmlinux(f.vmlinux.clone()), &search).unwrap();
    let lines = VmlinuxLines::new(&resolver).unwrap();
    let nm = std::fs::read_to_string(&f.system_map).unwrap();
    let use_inline = nm_addr(&nm, "use_inline");
    // The load of sym.grid[1][2] inside the inlined helper() is at use_inline+0x16 in this build; find it
    // by asking addr2line which offset is in helper, so a different gcc does not break the test.
    let (off, expect) = (0..0x23u64)
        .find_map(|off| {
            let out = tool(
                "addr2line",
                &[
                    "-fi",
                    "-e",
                    p(&f.vmlinux),
                    &format!("0x{:x}", use_inline + off),
                ],
            );
            out.starts_with("helper\n").then_some((off, out))
        })
        .expect("an address of use_inline inside the inlined helper");
    let expect: Vec<&str> = expect.lines().collect();
    let runtime = use_inline + off - LINK_TEXT + RUNTIME_TEXT;
    let got = lines.lines(runtime);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].function.as_deref(), Some(expect[0]));
    assert_eq!(got[0].location(), expect[1]);
    assert!(got[0].inlined && !got[1].inlined);
    assert_eq!(got[1].function.as_deref(), Some(expect[2]));
    assert_eq!(got[1].location(), expect[3]);
    // annotate() takes the address after the instruction, as chains report it.
    let a = lines::annotate(&lines, runtime + 1);
    assert_eq!(a.location, expect[3]);
    assert_eq!(a.inlined, vec![format!("helper ({}) [inlined]", expect[1])]);
    // Outside the vmlinux: nothing, and no error.
    assert!(lines.lines(0x1000).is_empty());
    assert_eq!(
        lines::annotate(&lines, 0x1000),
        lines::Annotation::default()
    );
}

/// A made-up kernel with two modules (this machine's kernel has no module support, so no real one).
fn modules_kallsyms() -> PathBuf {
    let dir = util::temp_dir("ksymwatch-resolve-modules");
    let k = dir.join("kallsyms");
    std::fs::write(&k, ksymwatch_symbols::testing::MODULES_KALLSYMS).unwrap();
    k
}

/// `MODULE:SYMBOL` finds the symbol in that module only; text and JSON say which module answered.
#[test]
fn module_prefix_resolves_in_that_module() {
    let k = modules_kallsyms();
    let (code, out, err) = run(&["resolve", "bar:counter", "--kallsyms", p(&k)]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(field(&out, "target"), "bar:counter");
    assert_eq!(field(&out, "module"), "bar");
    assert_eq!(field(&out, "runtime addr"), "0xffffffffc0002040");
    assert_eq!(field(&out, "size"), "8");
    let (code, out, err) = run(&["resolve", "--json", "foo:counter+4", "--kallsyms", p(&k)]);
    assert_eq!(code, 0, "{err}");
    let j = json(&out);
    assert_eq!(j["module"], "foo");
    assert_eq!(hex(&j["runtime_addr"]), 0xffffffffc0001084);
    // A plain name of a module's symbol says its module too; a vmlinux symbol has none.
    let (_, out, _) = run(&["resolve", "--json", "foo_flags", "--kallsyms", p(&k)]);
    assert_eq!(json(&out)["module"], "foo");
    let (_, out, _) = run(&["resolve", "--json", "counter@0", "--kallsyms", p(&k)]);
    assert!(json(&out)["module"].is_null(), "{out}");
    // No such module: both meanings of the prefix are named, for `resolve` and `write` alike.
    for cmd in ["resolve", "write"] {
        util::rejects(
            &[cmd, "libc:environ", "--kallsyms", p(&k)],
            2,
            &[
                "no module `libc`",
                "(modules: bar, foo)",
                "kernel watch",
                "-p PID",
            ],
        );
    }
    util::rejects(
        &["resolve", "foo:bar_end", "--kallsyms", p(&k)],
        2,
        &["module `foo` has no symbol `bar_end`"],
    );
    util::rejects(
        &["resolve", "foo:counter.x", "--kallsyms", p(&k)],
        2,
        &["need", "0xADDR"],
    );
}
