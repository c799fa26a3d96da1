//! Unit tests of the symbolize module.
use super::*;
use ksymwatch_symbols::{kallsyms, SymbolTable};
use std::path::Path;

/// Two kernel functions: `read_zero` at 0xffffffff81000000, 0x100 bytes.
const READ_ZERO: &str = "ffffffff81000000 T read_zero\nffffffff81000100 T end\n";

fn table(kallsyms: &str) -> SymbolTable {
    kallsyms::from_text(kallsyms, Path::new("fixture")).unwrap()
}

#[test]
fn unnamed_kernel_frames_of_a_cached_table_point_at_no_symbol_cache() {
    let table = table(READ_ZERO);
    let mut parsed = Symbolizer::new(&table);
    parsed.frame(1, 0xffffffffa0000000, true);
    assert!(parsed.take_notes().is_empty());
    let mut cached = Symbolizer::new(&table).with_origin(Origin::Cached);
    cached.frame(1, 0xffffffff81000010, true);
    assert!(cached.take_notes().is_empty(), "every frame was named");
    // Twice the same address: one miss (frames are cached by address).
    cached.frame(1, 0xffffffffa0000000, true);
    cached.frame(1, 0xffffffffa0000000, true);
    let notes = cached.take_notes();
    assert_eq!(notes.len(), 1);
    assert!(notes[0].starts_with("1 kernel address(es)"), "{notes:?}");
    assert!(notes[0].contains("--no-symbol-cache"), "{notes:?}");
}

/// A call that is the last instruction of its function returns to the first byte of the next one: the
/// caller is named (offset from its own start, as perf prints it), never the next function; the trap
/// ip is named as it is, and a zero user frame ends the chain.
#[test]
fn return_addresses_name_their_caller_and_a_zero_user_frame_is_dropped() {
    use crate::perf::record::encode;
    use crate::report::testutil;
    let table = table(
        "ffffffff81000000 T store_at_end\nffffffff81000020 T x86_64_start_reservations\n\
         ffffffff81000040 T __pfx_clear_bss\nffffffff81000050 T clear_bss\nffffffff81000100 T end\n",
    );
    // The trap ip is exactly a symbol's start (the store was the last instruction before it): it stays.
    let chain = [
        encode::KERNEL,
        0xffffffff81000020,
        0xffffffff81000040,
        encode::USER,
        0x401000,
        0,
    ];
    let sample = testutil::decoded(&encode::sample(chain[1], 7, 7, 1_000, 0x1000, 0, &chain));
    let mut s = Symbolizer::new(&table);
    let mut frames = Vec::new();
    let ip = s.resolve(&sample, &mut frames);
    assert_eq!(
        ip.display("x").to_string(),
        "x86_64_start_reservations+0x0/0x20"
    );
    let shown: Vec<String> = frames.iter().map(|f| f.display("wr").to_string()).collect();
    assert_eq!(
        shown,
        [
            "x86_64_start_reservations+0x0/0x20",
            "x86_64_start_reservations+0x20/0x20",
            "0x401000 [wr]",
        ],
        "the return address at __pfx_clear_bss names its caller; the 0x0 user frame is gone"
    );
    assert_eq!(
        frames[1].addr, 0xffffffff81000040,
        "the address itself is kept"
    );
}

#[test]
fn kernel_frames_print_like_kallsyms_symbolize() {
    let table = table(
        "ffffffff81000000 T read_zero\nffffffff81000100 T end\nffffffffc0000000 t helper\t[mod]\nffffffffc0000100 t helper_end\t[mod]\n",
    );
    let mut s = Symbolizer::new(&table);
    let f = s.frame(1, 0xffffffff81000077, true);
    assert_eq!(f.display("x").to_string(), "read_zero+0x77/0x100");
    assert_eq!(f.flame_name(), "read_zero");
    let m = s.frame(1, 0xffffffffc0000001, true);
    assert_eq!(m.display("x").to_string(), "helper+0x1/0x100 [mod]");
    let unknown = s.frame(1, 0xffffffffdead0000, true);
    assert_eq!(unknown.display("x").to_string(), "0xffffffffdead0000");
    assert_eq!(unknown.flame_name(), "[unknown]");
    let user = s.frame(1, 0x401000, false);
    assert_eq!(user.display("writer").to_string(), "0x401000 [writer]");
}

/// A hit whose writer is a module's function: the module shows as `[module]` in the ftrace chain, a
/// `"module"` field in NDJSON frames and `func [module]` in folded stacks; every frame of that module
/// shares the table's one name (no string per hit).
#[test]
fn module_frames_carry_their_module_in_every_printer() {
    use crate::perf::record::encode;
    use crate::report::folded::{Folded, Sink};
    use crate::report::{ftrace::Ftrace, json::Json, testutil, Output};
    use std::io::Write;
    let table = table(
        "ffffffff81000000 T vfs_write\nffffffff81000100 T end\n\
         ffffffffc0100000 t nfs_file_write\t[nfs]\nffffffffc0100040 t nfs_end\t[nfs]\n",
    );
    let chain = [encode::KERNEL, 0xffffffffc0100010, 0xffffffff81000080];
    let hits = [
        (
            testutil::decoded(&encode::sample(chain[1], 7, 7, 1_000, 0x1000, 0, &chain)),
            "dd",
            0,
        ),
        (
            testutil::decoded(&encode::sample(chain[1], 7, 7, 2_000, 0x1000, 0, &chain)),
            "dd",
            0,
        ),
    ];
    let watches = [testutil::watch(
        "x",
        0x1000,
        crate::model::watch::Access::Write,
    )];
    let shared = table
        .lookup("nfs_end", None)
        .unwrap()
        .module
        .cloned()
        .unwrap();
    let mut ftrace = Ftrace::new(Vec::new(), Vec::new());
    let mut json = Json::new(Vec::new(), Vec::new());
    let folded_out = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    struct W(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);
    impl Write for W {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut folded = Folded::new(Sink::Lines(Box::new(W(folded_out.clone()))));
    testutil::each_hit(&table, &watches, &hits, |hit| {
        let m = hit.ip.module.as_ref().expect("the ip is in a module");
        assert!(Arc::ptr_eq(m, &shared), "the table's name, shared");
        assert!(hit.chain[1].module.is_none());
        ftrace.hit(hit).unwrap();
        json.hit(hit).unwrap();
        folded.hit(hit).unwrap();
    });
    folded.finish(&crate::report::Summary::default()).unwrap();
    let text = String::from_utf8(ftrace.into_inner().0).unwrap();
    assert!(
        text.contains(" => nfs_file_write+0x10/0x40 [nfs]\n => vfs_write+0x80/0x100\n"),
        "{text}"
    );
    let ndjson = String::from_utf8(json.into_inner().0).unwrap();
    let first: serde_json::Value = serde_json::from_str(ndjson.lines().next().unwrap()).unwrap();
    assert_eq!(first["ip"]["module"], "nfs", "{first}");
    assert_eq!(first["chain"][0]["module"], "nfs");
    assert_eq!(first["chain"][0]["sym"], "nfs_file_write");
    assert!(first["chain"][1]["module"].is_null());
    let stacks = String::from_utf8(folded_out.borrow().clone()).unwrap();
    assert_eq!(stacks, "dd;vfs_write;nfs_file_write [nfs] 2\n");
}

fn chain_sample(pid: u32, chain: &[u64]) -> Sample {
    use crate::perf::record::encode;
    crate::report::testutil::decoded(&encode::sample(chain[1], pid, pid, 1, 0x1000, 0, chain))
}

/// Chains are cached by raw addresses: a kernel chain once for every process, one with user frames
/// once per process; forgetting a process drops its chains (and only its); a chain whose user frame
/// no mapping knows is named for its hit only, and asked again next time.
#[test]
fn whole_chains_are_cached_per_address_space() {
    use crate::perf::record::encode::{KERNEL, USER};
    let table = table(READ_ZERO);
    let kernel = [KERNEL, 0xffffffff81000077, 0xffffffff81000010];
    let user = [KERNEL, 0xffffffff81000077, USER, 0x401000];
    let mut s = Symbolizer::new(&table);
    for pid in [1, 2, 1] {
        let named = s.named(&chain_sample(pid, &kernel));
        assert_eq!(named.ip.sym.as_deref(), Some("read_zero"));
        assert_eq!(named.frames.len(), 2);
        assert!(named.rendered().is_some_and(|r| !r.needs_comm));
        s.named(&chain_sample(pid, &user));
    }
    assert_eq!(
        s.chains.len(),
        3,
        "1 kernel chain, 1 user chain for each of 2 pids"
    );
    assert!(
        s.named(&chain_sample(1, &user))
            .rendered()
            .is_some_and(|r| r.needs_comm),
        "an unnamed user frame prints the comm"
    );
    s.forget_process(1);
    assert_eq!(s.chains.len(), 2);
    s.named(&chain_sample(1, &user));
    assert_eq!(
        s.chains.len(),
        3,
        "pid 1's new program gets chains of its own"
    );

    // No process has this pid: its user frame is in no mapping.
    let mut s = Symbolizer::with_user(&table, UserSymbols::default());
    let named = s.named(&chain_sample(0x7fff_fff0, &user));
    assert_eq!(named.frames[1].binary, None);
    assert!(named.rendered().is_none());
    assert!(
        s.chains.is_empty(),
        "not cached: the maps are read again next time"
    );
}

/// A CPU's last chain is taken again only for the same process, ip and frames; a forgotten process
/// gets its chains named anew; chains taking turns on one CPU allocate nothing once named.
#[test]
fn a_cpus_last_chain_is_reused_only_for_the_same_raw_chain() {
    use crate::perf::record::encode::{KERNEL, USER};
    let table = table(READ_ZERO);
    let kernel = [KERNEL, 0xffffffff81000077, 0xffffffff81000010];
    let other = [KERNEL, 0xffffffff81000077, 0xffffffff81000020];
    let user = [KERNEL, 0xffffffff81000077, USER, 0x401000];
    let mut s = Symbolizer::new(&table);
    let a = s.shared(&chain_sample(1, &kernel));
    assert!(Rc::ptr_eq(&a, &s.shared(&chain_sample(1, &kernel))));
    let b = s.shared(&chain_sample(1, &other));
    assert!(!Rc::ptr_eq(&a, &b), "other frames: another chain");
    assert_eq!(b.frames[1].off, 0x20);
    assert!(
        Rc::ptr_eq(&a, &s.shared(&chain_sample(2, &kernel))),
        "an all-kernel chain is one for every process (from the cache)"
    );
    let u1 = s.shared(&chain_sample(1, &user));
    let u2 = s.shared(&chain_sample(2, &user));
    assert!(!Rc::ptr_eq(&u1, &u2), "user frames: one chain per process");
    assert!(Rc::ptr_eq(&u2, &s.shared(&chain_sample(2, &user))));
    s.forget_process(2);
    assert!(
        !Rc::ptr_eq(&u2, &s.shared(&chain_sample(2, &user))),
        "a forgotten process's chain is named anew"
    );
    let samples = [chain_sample(1, &kernel), chain_sample(1, &user)];
    for s2 in &samples {
        s.named(s2);
    }
    let before = crate::testalloc::allocations();
    for _ in 0..100 {
        for s2 in &samples {
            s.named(s2);
        }
    }
    assert_eq!(crate::testalloc::allocations() - before, 0);
}

/// Two keys under one hash: each is found only as itself, and the later one takes the slot.
#[test]
fn a_shared_hash_never_gives_another_keys_chain() {
    let mut c = Chains::default();
    let first = Rc::new(NamedChain::default());
    let second = Rc::new(NamedChain::default());
    c.insert(7, &[1, 2, 3], Rc::clone(&first));
    assert!(c.get(7, &[1, 2, 3]).is_some_and(|x| Rc::ptr_eq(x, &first)));
    assert!(c.get(7, &[1, 2, 4]).is_none());
    assert!(c.get(8, &[1, 2, 3]).is_none());
    c.insert(7, &[1, 2, 4], Rc::clone(&second));
    assert!(c.get(7, &[1, 2, 3]).is_none());
    assert!(c.get(7, &[1, 2, 4]).is_some_and(|x| Rc::ptr_eq(x, &second)));
    c.forget_space(2);
    assert!(c.is_empty(), "the key's second word is its address space");
}

/// A line table with one inlined call at 0x...10 (looked up at addr-1, as return addresses need).
struct FakeLines;

impl LineSource for FakeLines {
    fn lines(&self, addr: u64) -> Vec<ksymwatch_symbols::LineFrame> {
        let f = |function: &str, line, inlined| ksymwatch_symbols::LineFrame {
            function: Some(function.into()),
            file: Some("fs/read_write.c".into()),
            line: Some(line),
            inlined,
        };
        match addr {
            0xffffffff8100000f => {
                vec![f("rw_verify_area", 450, true), f("read_zero", 12, false)]
            }
            0xffffffff81000076 => vec![f("read_zero", 30, false)],
            _ => vec![],
        }
    }
}

#[test]
fn lines_annotate_kernel_frames_and_are_printed() {
    use crate::model::watch::Access;
    use crate::perf::record::encode;
    use crate::report::{ftrace::Ftrace, testutil, Hit, Output};
    let table = table(READ_ZERO);
    let lines = FakeLines;
    let mut s = Symbolizer::new(&table).with_lines(Some(&lines));
    let f = s.frame(1, 0xffffffff81000010, true);
    let l = f.line.clone().unwrap();
    assert_eq!(l.location, "fs/read_write.c:12");
    assert_eq!(
        l.inlined,
        vec!["rw_verify_area (fs/read_write.c:450) [inlined]".to_string()]
    );
    assert!(
        s.frame(1, 0xffffffff81000050, true).line.is_none(),
        "no line info: no annotation"
    );
    assert!(
        s.frame(1, 0x401000, false).line.is_none(),
        "user frames are not looked up"
    );

    let sample = testutil::decoded(&encode::sample(
        0xffffffff81000077,
        5,
        5,
        1_000_000,
        0x1000,
        0,
        // The return address 0x11 is named by its call at 0x10, whose line the source knows.
        &[encode::KERNEL, 0xffffffff81000077, 0xffffffff81000011],
    ));
    let mut chain = Vec::new();
    let ip = s.resolve(&sample, &mut chain);
    let watch = testutil::watch("x", 0x1000, Access::Write);
    let mut p = Ftrace::new(Vec::new(), Vec::new());
    p.hit(&Hit {
        sample: &sample,
        watch: &watch,
        watch_index: 0,
        comm: "w",
        ip: &ip,
        chain: &chain,
        value: crate::report::Value::NotRead,
        rendered: None,
        cgroup: None,
    })
    .unwrap();
    let text = String::from_utf8(p.into_inner().0).unwrap();
    let want = concat!(
        " => read_zero+0x77/0x100 (fs/read_write.c:30)\n",
        " => rw_verify_area (fs/read_write.c:450) [inlined]\n",
        " => read_zero+0x11/0x100 (fs/read_write.c:12)\n",
    );
    assert!(text.ends_with(want), "{text}");
}

/// The first user frame under kernel frames is where user space entered the kernel (the perf call
/// chain's user part starts with the user registers' ip), not a return address: after an interrupt or
/// an exception it is the very instruction that was stopped, which can be a function's first byte.
/// A signal frame written on return from a timer interrupt, with the thread stopped at `tiny`'s first
/// instruction, named the function before it (`before+0x2`) as a live run showed.
#[test]
fn the_first_user_frame_under_kernel_frames_is_named_where_it_is() {
    use crate::perf::record::encode;
    use crate::report::testutil;
    use ksymwatch_symbols::testing::elf::{tiny, BASE};
    use ksymwatch_symbols::{MappedFile, UserSymbols};
    use std::os::unix::fs::MetadataExt;
    let elf = tiny(
        &[
            ("before", BASE + 0x80, 2),
            ("tiny", BASE + 0x82, 1),
            ("main", BASE + 0xa0, 0x40),
        ],
        &[],
    );
    let dir = std::env::temp_dir().join(format!("ksymwatch-first-user-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("prog");
    std::fs::write(&file, &elf.bytes).unwrap();
    let start = 0x5555_0000_0000;
    let mut user = UserSymbols::new(dir.join("no-proc"));
    user.map(
        7,
        &MappedFile {
            start,
            len: 0x1000,
            offset: 0,
            dev: (8, 1),
            inode: std::fs::metadata(&file).unwrap().ino(),
            path: file.to_str().unwrap(),
        },
    );
    let table = table(READ_ZERO);
    let mut s = Symbolizer::with_user(&table, user);
    let at = |vaddr: u64| start + vaddr - BASE;
    let chain = [
        encode::KERNEL,
        0xffffffff81000077,
        0xffffffff81000011,
        encode::USER,
        at(BASE + 0x82),
        at(BASE + 0xa0 + 0x20),
    ];
    let sample = testutil::decoded(&encode::sample(chain[1], 7, 7, 1_000, 0x1000, 0, &chain));
    let mut frames = Vec::new();
    s.resolve(&sample, &mut frames);
    let shown: Vec<String> = frames
        .iter()
        .map(|f| f.display("prog").to_string())
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        shown,
        [
            "read_zero+0x77/0x100",
            "read_zero+0x11/0x100",
            "tiny+0x0 [prog]",
            "main+0x20 [prog]",
        ]
    );
}
