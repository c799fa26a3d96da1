//! End-to-end tests on a small "vmlinux" built with gcc at test time (tests/fixture/*.c, linked at the
//! kernel base with a build-id; `ksymwatch_symbols::testing::fixture`), checked against what `nm -S`,
//! `readelf -n` and `gdb` say about the same file. Without gcc the tests print `SKIP: <test>: <reason>`
//! and pass; checks needing nm, readelf or gdb skip the same way.

use ksymwatch_symbols::testing::fixture::{self, Fixture};
use ksymwatch_symbols::testing::{gdb_addr_and_size, note, require, tool};
use ksymwatch_symbols::{
    dwarf, Error, FieldError, KernelMatch, LookupError, MemberInfo, MismatchPolicy, NoProgress,
    PathElem, ResolveError, ResolveOptions, Resolver, Source, SourceSearch, VariableQuery, Vmlinux,
};

macro_rules! need_fixture {
    () => {
        match fixture::build() {
            Some(f) => f,
            None => return,
        }
    };
}

/// The fixture, where `tool` (the test's ground truth) is here too (else a SKIP line).
fn fixture_with(tool: &str) -> Option<&'static Fixture> {
    let f = fixture::build()?;
    require(tool).then_some(f)
}

fn field(s: &str) -> PathElem {
    PathElem::Field(s.into())
}

/// Parses `sym.field[3].pts[2].y` into name + path, the way the CLI's grammar will.
fn target(t: &str) -> (String, Vec<PathElem>) {
    let mut path = Vec::new();
    let end = t.find(['.', '[']).unwrap_or(t.len());
    let name = t[..end].to_string();
    let mut rest = &t[end..];
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let e = r.find(['.', '[']).unwrap_or(r.len());
            path.push(field(&r[..e]));
            rest = &r[e..];
        } else {
            let r = rest.strip_prefix('[').unwrap();
            let e = r.find(']').unwrap();
            path.push(PathElem::Index(r[..e].parse().unwrap()));
            rest = &r[e + 1..];
        }
    }
    (name, path)
}

/// Resolves `t` (as [`target`] parses it) through DWARF, from the first symbol of that name.
fn member(vm: &Vmlinux, t: &str) -> Result<MemberInfo, FieldError> {
    let (name, path) = target(t);
    let addr = vm.symbols_named(&name).unwrap()[0].addr;
    let q = VariableQuery {
        name: &name,
        addr: Some(addr),
        accept_declaration: true,
    };
    dwarf::resolve_path(vm, &q, &path, &NoProgress)
}

/// A search rooted in a temp dir: no distro files, and the given kallsyms and notes.
fn search_with(f: &Fixture, tag: &str, kallsyms: &str, notes: Option<&[u8]>) -> SourceSearch {
    let root = f.dir.join(format!("root-{tag}"));
    std::fs::create_dir_all(root.join("proc")).unwrap();
    std::fs::create_dir_all(root.join("sys/kernel")).unwrap();
    std::fs::write(root.join("proc/kallsyms"), kallsyms).unwrap();
    if let Some(n) = notes {
        std::fs::write(root.join("sys/kernel/notes"), n).unwrap();
    }
    SourceSearch::with_root(root, Some("6.99.0-test".into()))
}

/// The kallsyms text of the fixture running with a KASLR offset of 0x19000000.
const MOVED_TEXT: &str = "ffffffff9a000000 T _text\nffffffff9a000000 T _stext\n";

/// [`search_with`] a running kernel that is the fixture: its notes hold the fixture's build-id.
fn search_running_fixture(f: &Fixture, tag: &str, kallsyms: &str) -> SourceSearch {
    search_with(f, tag, kallsyms, Some(&notes_blob(&f.build_id().0)))
}

/// The fixture's vmlinux opened as the source, `s` telling about the running kernel.
fn fixture_resolver(f: &Fixture, s: &SourceSearch) -> Resolver {
    Resolver::open_source(Source::Vmlinux(f.vmlinux.clone()), s).unwrap()
}

/// What `/sys/kernel/notes` of a running kernel with build-id `id` holds (x86-64: little-endian).
fn notes_blob(id: &[u8]) -> Vec<u8> {
    let mut v = note(b"Linux\0", 1, b"6.99\0");
    v.extend(note(b"GNU\0", 3, id));
    v
}

#[test]
fn symbols_match_nm() {
    let Some(f) = fixture_with("nm") else {
        return;
    };
    let vm = Vmlinux::open(&f.vmlinux).unwrap();
    let mut ours: Vec<String> = vm
        .symbols()
        .unwrap()
        .iter()
        .map(|s| match s.size {
            Some(n) if n > 0 => format!("{:016x} {n:016x} {} {}", s.addr, s.type_char, s.name),
            _ => format!("{:016x} {} {}", s.addr, s.type_char, s.name),
        })
        .collect();
    let mut theirs: Vec<String> = tool("nm", &["-S", f.vmlinux.to_str().unwrap()])
        .lines()
        .map(String::from)
        .collect();
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs);
}

#[test]
fn build_id_matches_readelf() {
    let Some(f) = fixture_with("readelf") else {
        return;
    };
    let out = tool("readelf", &["-n", f.vmlinux.to_str().unwrap()]);
    let id = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap();
    assert_eq!(f.build_id().to_string(), id.trim());
}

#[test]
fn member_paths_match_gdb() {
    let Some(f) = fixture_with("gdb") else {
        return;
    };
    let vm = Vmlinux::open(&f.vmlinux).unwrap();
    let targets = [
        "sym.field[3].pts[2].y",
        "sym.field[4].tag",
        "sym.field[1].pts",
        "sym.field",
        "sym.as_int",
        "sym.halves.hi",
        "sym.anon_b",
        "sym.grid[2][1]",
        "sym.grid[1]",
        "sym.counter",
        "sym.ptr",
        "banner[10]",
        "banner",
        "zeroed_counter",
        "ro_value",
    ];
    for t in targets {
        let (name, _) = target(t);
        let symbols = vm.symbols_named(&name).unwrap();
        let m = member(&vm, t).unwrap_or_else(|e| panic!("{t}: {e}"));
        let (addr, size) = gdb_addr_and_size(&f.vmlinux, t);
        assert_eq!(symbols[0].addr + m.offset, addr, "{t}: address");
        assert_eq!(m.size, Some(size), "{t}: size");
    }
}

#[test]
fn type_names_read_like_c() {
    let f = need_fixture!();
    let vm = Vmlinux::open(&f.vmlinux).unwrap();
    let ty = |t: &str| member(&vm, t).unwrap().type_name;
    for (target, want) in [
        ("banner", "char[65]"),
        ("sym", "struct outer"),
        ("sym.field", "struct inner[5]"),
        ("sym.grid", "int[3][4]"),
        ("sym.grid[1]", "int[4]"),
        ("sym.ptr", "struct point *"),
        ("zeroed_counter", "long unsigned int"),
    ] {
        assert_eq!(ty(target), want, "{target}");
    }
    let counter = ty("sym.counter");
    assert!(
        counter.contains("const") && counter.contains("volatile") && counter.ends_with("ulong_t"),
        "{counter}"
    );
    assert_eq!(ty("sym.flags"), "unsigned int : 3");
}

#[test]
fn path_errors_say_what_is_there() {
    let f = need_fixture!();
    let vm = Vmlinux::open(&f.vmlinux).unwrap();
    let err = |t: &str| member(&vm, t).unwrap_err();
    match err("sym.nope") {
        FieldError::NoSuchField { available, .. } => {
            // Members of anonymous unions/structs are listed as the user would write them.
            for m in [
                "id", "as_int", "halves", "anon_a", "anon_b", "field", "grid", "counter",
            ] {
                assert!(
                    available.iter().any(|a| a == m),
                    "{m} missing from {available:?}"
                );
            }
        }
        e => panic!("unexpected {e}"),
    }
    assert!(matches!(
        err("sym.field[5]"),
        FieldError::IndexOutOfRange { len: 5, .. }
    ));
    assert!(matches!(
        err("sym.grid[1][4]"),
        FieldError::IndexOutOfRange { len: 4, .. }
    ));
    assert!(matches!(err("sym.id.x"), FieldError::NotAStruct { .. }));
    assert!(matches!(err("sym.id[0]"), FieldError::NotAnArray { .. }));
    let ptr = err("sym.ptr.x").to_string();
    assert!(ptr.contains("pointer"), "{ptr}");
    let msg = err("sym.field[9]").to_string();
    assert!(msg.contains("0..=4"), "{msg}");
}

#[test]
fn same_named_statics_are_ambiguous_and_resolve_by_index() {
    let f = need_fixture!();
    let s = search_with(f, "dup", "", None);
    let r = fixture_resolver(f, &s);
    match r.resolve("dup", None, &[], ResolveOptions::default()) {
        Err(ResolveError::Lookup(LookupError::Ambiguous { candidates, .. })) => {
            assert_eq!(candidates.len(), 2)
        }
        other => panic!("unexpected {other:?}"),
    }
    // a.c's `static int dup` links first, b.c's `static long dup` after it; DWARF is matched by address.
    let a = r
        .resolve("dup", Some(0), &[], ResolveOptions::default())
        .unwrap();
    let b = r
        .resolve("dup", Some(1), &[], ResolveOptions::default())
        .unwrap();
    assert_eq!((a.size, a.type_name.as_deref()), (Some(4), Some("int")));
    assert_eq!(
        (b.size, b.type_name.as_deref()),
        (Some(8), Some("long int"))
    );
    assert!(matches!(
        r.resolve("dup", Some(2), &[], ResolveOptions::default()),
        Err(ResolveError::Lookup(LookupError::BadIndex { .. }))
    ));
}

/// A name lookup on a fresh resolver scans the raw `.symtab` for that name and leaves the full table
/// unbuilt; its answer is the full table's, for every symbol of the fixture, relocated or not: addresses,
/// sizes, types, `name@N` among same-named statics, the ambiguity and index errors. Only a miss builds
/// the table, for its suggestions.
#[test]
fn a_name_lookup_answers_as_the_full_table_without_building_it() {
    let f = need_fixture!();
    let relocated = search_running_fixture(f, "byname-match", MOVED_TEXT);
    let link_time = search_with(f, "byname-nokernel", "", None);
    let vm = Vmlinux::open(&f.vmlinux).unwrap();
    let mut names: Vec<String> = vm.symbols().unwrap().into_iter().map(|s| s.name).collect();
    names.sort();
    names.dedup();
    assert!(names.iter().any(|n| n == "dup"), "{names:?}");
    let open =
        |s: &SourceSearch| Resolver::open_source(Source::Vmlinux(f.vmlinux.clone()), s).unwrap();
    for (tag, search) in [("relocated", &relocated), ("link-time", &link_time)] {
        let (fresh, full) = (open(search), open(search));
        assert_eq!(fresh.kaslr().is_some(), tag == "relocated");
        full.table().unwrap();
        for name in &names {
            // Every symbol of that name, as the full table lists them (runtime addresses once relocated).
            let listed = |r: &Resolver| -> Vec<(u64, Option<u64>, char, u64)> {
                let t = r.symbols_named(name).unwrap();
                t.by_name(name)
                    .map(|s| (s.addr, s.size, s.type_char, t.link_addr(s)))
                    .collect()
            };
            assert_eq!(listed(&fresh), listed(&full), "{tag}: {name}");
            for index in [None, Some(0), Some(1), Some(2)] {
                let got = |r: &Resolver| {
                    r.resolve(name, index, &[], ResolveOptions::default())
                        .map_err(|e| format!("{e:?}"))
                };
                assert_eq!(got(&fresh), got(&full), "{tag}: {name}@{index:?}");
            }
        }
        let dup = fresh
            .resolve("dup", Some(1), &[], ResolveOptions::default())
            .unwrap();
        assert_eq!(dup.size, Some(8), "{tag}");
        assert!(
            !fresh.table_loaded(),
            "{tag}: a name it has built the table"
        );
        // A miss is explained with suggestions from the whole table, as before.
        let miss = |r: &Resolver| match r.resolve("banne", None, &[], ResolveOptions::default()) {
            Err(ResolveError::Lookup(e)) => e.to_string(),
            other => panic!("{other:?}"),
        };
        assert_eq!(miss(&fresh), miss(&full));
        assert!(miss(&fresh).contains("banner"), "{}", miss(&fresh));
        assert!(fresh.table_loaded(), "{tag}");
    }
}

#[test]
fn build_id_match_relocates_by_kallsyms_text() {
    let f = need_fixture!();
    let id = f.build_id();
    let kallsyms = format!("0000000000000000 A fixed_percpu_data\n{MOVED_TEXT}");
    let s = search_running_fixture(f, "match", &kallsyms);
    let r = fixture_resolver(f, &s);
    assert_eq!(r.kernel_match(), &KernelMatch::BuildIdMatch(id));
    assert!(r.check(MismatchPolicy::Refuse).is_ok());
    let (name, path) = target("sym.field[3].pts[2].y");
    let got = r
        .resolve(&name, None, &path, ResolveOptions::default())
        .unwrap();
    assert_eq!(got.link_addr, Some(0xffffffff81000118));
    assert_eq!(got.runtime_addr, Some(0xffffffff9a000118));
    assert_eq!(got.size, Some(4));
    assert_eq!(got.section.as_deref(), Some(".data"));
    assert_eq!(got.type_name.as_deref(), Some("int"));
    assert_eq!(got.watch_addr(), 0xffffffff9a000118);
    let json = got.to_json();
    assert!(
        json.contains("\"runtime_addr\":\"0xffffffff9a000118\"")
            && json.contains("\"kernel_match\":\"match\"")
    );
    // Symbolization and lookups speak runtime addresses once relocated.
    let use_a = r.table().unwrap().lookup("use_a", None).unwrap();
    assert_eq!(use_a.addr, 0xffffffff9a000000);
    assert_eq!(
        r.symbolize(0xffffffff9a000005)
            .unwrap()
            .unwrap()
            .to_string(),
        "use_a+0x5/0x14"
    );
    let zc = r
        .resolve("zeroed_counter", None, &[], ResolveOptions::default())
        .unwrap();
    assert_eq!(zc.section.as_deref(), Some(".bss"));
    assert_eq!(zc.type_char, 'B');
}

#[test]
fn build_id_mismatch_is_refused_but_still_resolves_link_time() {
    let f = need_fixture!();
    let s = search_with(
        f,
        "mismatch",
        "ffffffff9a000000 T _text\n",
        Some(&notes_blob(&[0x5a; 20])),
    );
    let r = fixture_resolver(f, &s);
    assert!(r.kernel_match().is_mismatch());
    let err = r.check(MismatchPolicy::Refuse).unwrap_err();
    assert!(matches!(err, Error::KernelMismatch { .. }));
    // The crate names no CLI flag; ksymwatch adds `--force` (src/target/advice.rs).
    assert!(
        err.to_string().contains("is not the running kernel")
            && !err.to_string().contains("--force")
    );
    assert!(r.check(MismatchPolicy::Allow).is_ok());
    let got = r
        .resolve("banner", None, &[], ResolveOptions::default())
        .unwrap();
    assert_eq!(got.runtime_addr, None);
    assert_eq!(got.link_addr, Some(0xffffffff810001a0));
    assert!(got.to_string().contains("MISMATCH"), "{got}");
}

#[test]
fn system_map_relocates_and_cross_checks_with_kallsyms() {
    let Some(f) = fixture_with("nm") else {
        return;
    };
    let map = f.dir.join("System.map");
    std::fs::write(&map, tool("nm", &["-n", f.vmlinux.to_str().unwrap()])).unwrap();
    let kallsyms =
        "ffffffff9a000000 T _text\nffffffff9a000000 T use_a\nffffffff9a000014 T use_inline\n\
                    ffffffff9a000037 T use_b\n";
    let s = search_with(f, "sysmap", kallsyms, None);
    let r = Resolver::open_source(Source::SystemMap(map.clone()), &s).unwrap();
    assert!(
        matches!(r.kernel_match(), KernelMatch::SymbolsAgree { .. }),
        "{}",
        r.kernel_match()
    );
    let got = r
        .resolve("banner", None, &[], ResolveOptions::default())
        .unwrap();
    assert_eq!(got.runtime_addr, Some(0xffffffff9a0001a0));
    assert_eq!(got.link_addr, Some(0xffffffff810001a0));
    // A member path needs DWARF, which a System.map does not have.
    let (n, p) = target("sym.id");
    let e = r
        .resolve(&n, None, &p, ResolveOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("debug info") && e.contains("-dbg"), "{e}");

    // Another build: use_b moved relative to _text.
    let s = search_with(
        f,
        "sysmap-other",
        &kallsyms.replace("ffffffff9a000037 T use_b", "ffffffff9a000040 T use_b"),
        None,
    );
    let r = Resolver::open_source(Source::SystemMap(map), &s).unwrap();
    assert!(r.kernel_match().is_mismatch());
    assert!(r.check(MismatchPolicy::Refuse).is_err());
    assert_eq!(
        r.resolve("banner", None, &[], ResolveOptions::default())
            .unwrap()
            .runtime_addr,
        None
    );
}

#[test]
fn source_search_order() {
    let f = need_fixture!();
    let s = search_with(f, "search", "ffffffff81000000 T _text\n", None);
    let rel = "6.99.0-test";
    assert_eq!(s.pick(), Source::Kallsyms(s.kallsyms.clone()));
    // Debian's placeholder System.map is passed over.
    std::fs::create_dir_all(s.root.join("boot")).unwrap();
    let map = s.root.join(format!("boot/System.map-{rel}"));
    std::fs::write(
        &map,
        "ffffffffffffffff B The real System.map is in the linux-image-x-dbg package\n",
    )
    .unwrap();
    assert_eq!(s.pick(), Source::Kallsyms(s.kallsyms.clone()));
    std::fs::write(&map, "ffffffff81000000 T _text\n").unwrap();
    assert_eq!(s.pick(), Source::SystemMap(map.clone()));
    // A compressed /boot/vmlinux is not an ELF and is passed over too.
    std::fs::write(
        s.root.join(format!("boot/vmlinux-{rel}")),
        b"\x1f\x8b compressed",
    )
    .unwrap();
    assert_eq!(s.pick(), Source::SystemMap(map.clone()));
    let dbg = s.root.join(format!("usr/lib/debug/boot/vmlinux-{rel}"));
    std::fs::create_dir_all(dbg.parent().unwrap()).unwrap();
    std::fs::copy(&f.vmlinux, &dbg).unwrap();
    assert_eq!(s.pick(), Source::Vmlinux(dbg.clone()));
    // Explicit choices win, --vmlinux over --system-map.
    let mut explicit = s.clone();
    explicit.system_map = Some("/x/System.map".into());
    assert_eq!(explicit.pick(), Source::SystemMap("/x/System.map".into()));
    explicit.vmlinux = Some("/x/vmlinux".into());
    assert_eq!(explicit.pick(), Source::Vmlinux("/x/vmlinux".into()));
    let r = Resolver::open(&s).unwrap();
    assert_eq!(r.source(), &Source::Vmlinux(dbg));
}

/// The debuginfod cache comes after the distribution files and before kallsyms, and only with a file whose
/// build-id is the running kernel's.
#[test]
fn source_search_uses_a_verified_debuginfod_cache() {
    let f = need_fixture!();
    let id = f.build_id();
    let mut s = search_running_fixture(f, "dbgd", "ffffffff81000000 T _text\n");
    let cache = s.root.join("debuginfod_client");
    let slot = cache.join(id.to_string());
    std::fs::create_dir_all(&slot).unwrap();
    std::fs::copy(&f.vmlinux, slot.join("debuginfo")).unwrap();
    // Not asked to look there (`with_root`): kallsyms.
    assert_eq!(s.pick(), Source::Kallsyms(s.kallsyms.clone()));
    s.debuginfod_cache = Some(cache.clone());
    assert_eq!(s.pick(), Source::Vmlinux(slot.join("debuginfo")));
    // A running kernel of another build does not take that file. (A search is for one running kernel:
    // it reads the build-id once.)
    let notes = notes_blob(&[0x42; 20]);
    let mut other = search_with(f, "dbgd-other", "ffffffff81000000 T _text\n", Some(&notes));
    other.debuginfod_cache = Some(cache.clone());
    assert_eq!(other.pick(), Source::Kallsyms(other.kallsyms.clone()));
    // A distribution file still comes first.
    let map = s.root.join("boot/System.map-6.99.0-test");
    std::fs::create_dir_all(map.parent().unwrap()).unwrap();
    std::fs::write(&map, "ffffffff81000000 T _text\n").unwrap();
    assert_eq!(s.pick(), Source::SystemMap(map));
}

#[test]
fn truncated_and_corrupt_elf_are_errors_not_panics() {
    let f = need_fixture!();
    let bytes = std::fs::read(&f.vmlinux).unwrap();
    let n = bytes.len();
    let dir = f.dir.join("broken");
    std::fs::create_dir_all(&dir).unwrap();
    for len in [
        0,
        3,
        4,
        16,
        63,
        64,
        65,
        200,
        n / 4,
        n / 2,
        n - 200,
        n - 64,
        n - 1,
    ] {
        let p = dir.join(format!("trunc-{len}"));
        std::fs::write(&p, &bytes[..len]).unwrap();
        match Vmlinux::open(&p) {
            Err(Error::Elf { problem, .. }) => assert!(!problem.to_string().is_empty()),
            Err(e) => panic!("len {len}: unexpected error kind {e}"),
            Ok(_) => panic!("len {len}: truncated file opened"),
        }
    }
    // Section headers pointing past the end.
    let mut bad = bytes.clone();
    bad[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes()); // e_shoff
    let p = dir.join("bad-shoff");
    std::fs::write(&p, &bad).unwrap();
    assert!(Vmlinux::open(&p).is_err());
    // A bzImage is named as such.
    let mut bz = vec![0u8; 0x300];
    bz[0..2].copy_from_slice(b"MZ");
    let p = dir.join("bzImage");
    std::fs::write(&p, &bz).unwrap();
    assert!(Vmlinux::open(&p)
        .unwrap_err()
        .to_string()
        .contains("bzImage"));

    // Garbage DWARF: the ELF opens, the member path fails cleanly.
    let vm = Vmlinux::open(&f.vmlinux).unwrap();
    let info = vm.section(".debug_info").unwrap().clone();
    for fill in [0xffu8, 0x00, 0x7f] {
        let mut garbled = bytes.clone();
        let start = info.offset as usize + 11; // keep the unit header, break the DIEs
        for b in &mut garbled[start..(info.offset + info.size) as usize] {
            *b = fill;
        }
        let p = dir.join(format!("bad-dwarf-{fill}"));
        std::fs::write(&p, &garbled).unwrap();
        let vm = Vmlinux::open(&p).unwrap();
        let q = VariableQuery {
            name: "sym",
            addr: None,
            accept_declaration: true,
        };
        assert!(dwarf::resolve_path(&vm, &q, &[field("id")], &NoProgress).is_err());
        let _ =
            ksymwatch_symbols::LineSymbolizer::new(&vm).and_then(|l| l.frames(0xffffffff81000000));
    }
}

#[test]
fn stripped_vmlinux_says_what_to_install() {
    let Some(f) = fixture_with("objcopy") else {
        return;
    };
    // The fixture run through `objcopy FLAG` into `name`.
    let objcopy = |flag: &str, name: &str| {
        let out = f.dir.join(name);
        tool(
            "objcopy",
            &[flag, f.vmlinux.to_str().unwrap(), out.to_str().unwrap()],
        );
        out
    };
    let stripped = objcopy("--strip-all", "vmlinux.stripped");
    let vm = Vmlinux::open(&stripped).unwrap();
    let e = vm.symbols().unwrap_err();
    assert!(
        matches!(e, Error::NoSymtab { .. }) && e.to_string().contains("-dbg"),
        "{e}"
    );
    let nodebug = objcopy("--strip-debug", "vmlinux.nodebug");
    let s = search_with(f, "nodebug", "", None);
    let r = Resolver::open_source(Source::Vmlinux(nodebug), &s).unwrap();
    // The symbol still resolves without DWARF; only the member path needs it.
    assert_eq!(
        r.resolve("banner", None, &[], ResolveOptions::default())
            .unwrap()
            .type_name,
        None
    );
    let e = r
        .resolve("sym", None, &[field("id")], ResolveOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no DWARF debug info") && e.contains("linux-image-"),
        "{e}"
    );
}

#[test]
fn lines_give_file_line_and_inlined_frames() {
    let f = need_fixture!();
    let s = search_with(f, "lines", "", None);
    let r = fixture_resolver(f, &s);
    let frames = r.frames(0xffffffff81000004).unwrap();
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].function.as_deref(), Some("use_a"));
    assert!(frames[0].file.as_deref().unwrap().ends_with("a.c"));
    assert!(frames[0].line.unwrap() > 40);
    assert!(!frames[0].inlined);
    // Somewhere in use_inline the always_inline helper's body shows as an inlined frame.
    let use_inline = r.table().unwrap().lookup("use_inline", None).unwrap();
    let inlined = (use_inline.addr..use_inline.addr + use_inline.size.unwrap())
        .map(|a| r.frames(a).unwrap())
        .find(|fr| fr.len() == 2)
        .expect("an inlined frame");
    assert_eq!(inlined[0].function.as_deref(), Some("helper"));
    assert!(inlined[0].inlined);
    assert_eq!(inlined[1].function.as_deref(), Some("use_inline"));
    assert!(!inlined[1].inlined);
    assert!(inlined[0].to_string().contains("(inlined)"));
}
