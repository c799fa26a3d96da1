//! Typed targets, `'(struct TYPE)BASE.FIELD'`, with the running kernel's BTF: member offsets as
//! `bpftool` reads them from the same BTF, live watches on a kernel object found by its address, and on a
//! user buffer laid out as a kernel struct that the kernel fills.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::util::{self, Tracer, Writer};

const BTF: &str = "/sys/kernel/btf/vmlinux";

/// `bpftool btf dump` of the running kernel's BTF, raw format: per type id, its line and member lines.
struct Dump {
    types: HashMap<u64, (String, Vec<String>)>,
}

impl Dump {
    fn load() -> Option<Dump> {
        if !Path::new(BTF).exists() {
            util::skip(format_args!("{BTF} is missing: this kernel has no BTF"));
            return None;
        }
        let bpftool = ["bpftool", "/usr/sbin/bpftool"]
            .into_iter()
            .find(|b| Command::new(b).arg("version").output().is_ok());
        let Some(bpftool) = bpftool else {
            util::skip("bpftool not found (Debian package bpftool)");
            return None;
        };
        let out = util::tool(bpftool, &["btf", "dump", "file", BTF, "format", "raw"]);
        let mut types = HashMap::new();
        let mut current: Option<(u64, String, Vec<String>)> = None;
        for line in out.lines() {
            if let Some(rest) = line.strip_prefix('[') {
                if let Some((id, t, m)) = current.take() {
                    types.insert(id, (t, m));
                }
                let (id, text) = rest.split_once("] ").expect("type line");
                current = Some((id.parse().expect("type id"), text.to_string(), Vec::new()));
            } else if let Some((_, _, members)) = &mut current {
                members.push(line.trim().to_string());
            }
        }
        if let Some((id, t, m)) = current {
            types.insert(id, (t, m));
        }
        Some(Dump { types })
    }

    /// The id of `STRUCT 'name'`.
    fn struct_id(&self, name: &str) -> u64 {
        let want = format!("STRUCT '{name}' ");
        *self
            .types
            .iter()
            .find(|(_, (t, _))| t.starts_with(&want))
            .unwrap_or_else(|| panic!("no struct {name} in the dump"))
            .0
    }

    /// (byte offset, type id) of member `name` of type `id`.
    fn member(&self, id: u64, name: &str) -> (u64, u64) {
        let want = format!("'{name}' ");
        let line = self.types[&id]
            .1
            .iter()
            .find(|l| l.starts_with(&want))
            .unwrap_or_else(|| panic!("no member {name} in type {id}"));
        let num = |k: &str| -> u64 {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .expect(k)
                .parse()
                .expect(k)
        };
        (num("bits_offset=") / 8, num("type_id="))
    }

    /// A bitfield member of `STRUCT 'ty'`: its name and bit offset.
    fn bitfield(&self, ty: &str) -> Option<(String, u64)> {
        let id = self.struct_id(ty);
        self.types[&id].1.iter().find_map(|l| {
            l.contains("bitfield_size=").then(|| {
                let name = l.split('\'').nth(1).expect("member name").to_string();
                let bits = l
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("bits_offset="))
                    .and_then(|b| b.parse().ok())
                    .expect("bits_offset");
                (name, bits)
            })
        })
    }

    /// Byte offset of a dotted member path below `STRUCT 'ty'`, every step a named member.
    fn offset(&self, ty: &str, path: &[&str]) -> u64 {
        let mut id = self.struct_id(ty);
        let mut off = 0;
        for name in path {
            let (o, next) = self.member(id, name);
            off += o;
            id = next;
        }
        off
    }
}

fn resolve_json(target: &str) -> Value {
    let (code, out, err) = util::run(&["resolve", "--json", target]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn resolve_reads_member_offsets_from_the_kernels_btf() {
    let Some(dump) = Dump::load() else { return };
    let base = 0xffff_8881_0000_0000u64;
    for (ty, path, size, type_name) in [
        ("task_struct", vec!["nvcsw"], 8, "long unsigned int"),
        ("task_struct", vec!["se", "vruntime"], 8, "u64"),
        ("task_struct", vec!["pid"], 4, "pid_t"),
        ("new_utsname", vec!["nodename"], 65, "char[65]"),
    ] {
        let target = format!("(struct {ty})0x{base:x}.{}", path.join("."));
        let v = resolve_json(&target);
        let offset = dump.offset(ty, &path);
        assert_eq!(v["offset"], offset, "{target}: {v}");
        assert_eq!(v["runtime_addr"], format!("0x{:x}", base + offset), "{v}");
        assert_eq!(v["size"], size, "{target}: {v}");
        assert_eq!(v["type"], type_name, "{target}: {v}");
        assert_eq!(v["btf"], BTF);
    }
    // An element, an offset inside it, the text form.
    let nodename = dump.offset("new_utsname", &["nodename"]);
    let v = resolve_json(&format!("(new_utsname)0x{base:x}.nodename[3]"));
    assert_eq!(
        (&v["offset"], &v["size"]),
        (&(nodename + 3).into(), &1.into())
    );
    assert_eq!(v["type"], "char");
    let v = resolve_json(&format!("(new_utsname)0x{base:x}.nodename+1"));
    assert_eq!(
        (&v["offset"], &v["size"]),
        (&(nodename + 1).into(), &64.into())
    );
    assert_eq!(v["type"], Value::Null);
    let (code, out, err) = util::run(&[
        "resolve",
        &format!("(struct task_struct *)0x{base:x}.se.vruntime"),
    ]);
    assert_eq!(code, 0, "{err}");
    for line in [
        "member:       .se.vruntime at offset 0x",
        "type:         u64\n",
        "object:       struct task_struct at 0xffff888100000000",
    ] {
        assert!(out.contains(line), "`{line}` missing from:\n{out}");
    }
    // A bitfield is refused, with the byte that holds it as a target of the same base.
    let (name, bits) = dump
        .bitfield("task_struct")
        .expect("task_struct has bitfields");
    let word = format!("(struct task_struct)0x{base:x}+0x{:x}/", bits / 8);
    util::rejects(
        &["resolve", &format!("(struct task_struct)0x{base:x}.{name}")],
        2,
        &["bitfield", "cannot watch single bits", &word],
    );
}

#[test]
fn a_typed_target_that_does_not_fit_its_type_is_refused_with_the_way_out() {
    if !Path::new(BTF).exists() {
        util::skip(format_args!("{BTF} is missing: this kernel has no BTF"));
        return;
    }
    let t = "(struct task_struct)0xffff888100000000";
    util::rejects(
        &["resolve", &format!("{t}.no_such_field")],
        2,
        &[
            "no field `no_such_field`",
            "fields; the first are thread_info",
        ],
    );
    // Hundreds of fields: the message names the ones that look like the typo.
    util::rejects(
        &["resolve", &format!("{t}.nvcs")],
        2,
        &["did you mean", "nvcsw"],
    );
    util::rejects(
        &["resolve", "(struct no_such_type_ksw)0xffff888100000000.x"],
        2,
        &["no_such_type_ksw"],
    );
    util::rejects(&["resolve", &format!("{t}.pid[2]")], 2, &["not an array"]);
    util::rejects(
        &["resolve", &format!("{t}.pid"), "--btf", "/nonexistent/btf"],
        2,
        &["/nonexistent/btf", "--btf FILE"],
    );
    util::rejects(
        &["write", "0xffff888100000000.pid"],
        2,
        &["name its type first"],
    );
    // BTF knows a per-CPU variable's type, but its symbol is an offset in the per-CPU area, not an address.
    util::rejects(
        &["resolve", "cpu_hw_events.enabled"],
        2,
        &[
            "per-CPU variable (struct cpu_hw_events)",
            "'(struct cpu_hw_events)0xADDR.enabled'",
        ],
    );
}

/// The JSON hit records of a stream.
fn hits(out: &str) -> Vec<Value> {
    util::ndjson(out)
        .into_iter()
        .filter(|v| v["type"] == "hit")
        .collect()
}

fn chain_has(hit: &Value, sym: &str) -> bool {
    hit["chain"]
        .as_array()
        .is_some_and(|c| c.iter().any(|f| f["sym"].as_str() == Some(sym)))
}

// A kernel object known only by its address: bpftrace prints the helper's `task_struct` (`curtask`) as it
// switches out, and a watch on its `nvcsw` sees `__schedule` count each of the helper's naps.
live_kernel_test!(
    the_kernel_writes_a_task_structs_switch_count_at_the_address_bpftrace_gave,
    {
        if !util::require("bpftrace") {
            return;
        }
        let mut h = Writer::start(&["naps", "0"]);
        let program = format!(
        "tracepoint:sched:sched_switch /args->prev_pid == {}/ {{ printf(\"task=%p\\n\", curtask); exit(); }}",
        h.pid
    );
        // bpftrace reads tracepoints from tracefs. Where it is not mounted (a fresh machine), bpftrace runs
        // in a mount namespace of its own with tracefs mounted there: the machine's mounts stay as they were.
        let mut bpftrace = if Path::new("/sys/kernel/tracing/events").exists() {
            let mut c = Command::new("bpftrace");
            c.args(["-q", "-e", &program]);
            c
        } else {
            if !util::require("unshare") {
                return;
            }
            let mut c = Command::new("unshare");
            c.args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                "mount -t tracefs nodev /sys/kernel/tracing && exec bpftrace -q -e \"$0\"",
                &program,
            ]);
            c
        };
        let mut bpftrace = bpftrace
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start bpftrace");
        util::wait_within(&mut bpftrace, Duration::from_secs(60));
        let mut out = String::new();
        let mut err = String::new();
        if let Some(mut o) = bpftrace.stdout.take() {
            o.read_to_string(&mut out).expect("bpftrace output");
        }
        if let Some(mut e) = bpftrace.stderr.take() {
            e.read_to_string(&mut err).expect("bpftrace errors");
        }
        let Some(task) = out
            .lines()
            .find_map(|l| l.strip_prefix("task=0x"))
            .and_then(|a| u64::from_str_radix(a.trim(), 16).ok())
        else {
            util::skip(format_args!("bpftrace gave no task address: {out} {err}"));
            return;
        };
        let target = format!("(struct task_struct)0x{task:x}.nvcsw");
        let t = Tracer::write_json(&["--count", "20", &target]);
        let (code, out, err) = t.wait(Duration::from_secs(60));
        h.send("stop");
        h.read_until("done");
        assert_eq!(code, 0, "{err}");
        let hits = hits(&out);
        assert_eq!(hits.len(), 20, "{out}");
        for hit in &hits {
            // Only the task itself counts its voluntary switches, in __schedule, as it goes to sleep.
            assert_eq!(hit["tid"], h.tid, "{hit}");
            assert_eq!(hit["target"], target.as_str(), "{hit}");
            assert_eq!(hit["ip"]["kernel"], true, "{hit}");
            assert!(chain_has(hit, "__schedule"), "{hit}");
        }
    }
);

// A user buffer with a kernel struct's layout: `sysinfo()` fills the helper's `struct sysinfo` with
// copy_to_user, and the typed watch on its `procs` sees that kernel write and the helper's own store, once
// per call each.
live_test!(
    a_user_buffer_typed_as_a_kernel_struct_is_watched_on_its_member,
    {
        if !Path::new(BTF).exists() {
            util::skip(format_args!("{BTF} is missing: this kernel has no BTF"));
            return;
        }
        let n = 25;
        let h = Writer::start(&["sysinfo", &n.to_string(), "0"]);
        let pid = h.pid.to_string();
        let target = "(struct sysinfo)ksw_sysinfo.procs";
        let t = Tracer::write_json(&["-p", &pid, target]);
        // `procs` is a 2-byte `__u16`, so the watch takes BTF's size for its length.
        let header: Value = t
            .header
            .lines()
            .find_map(|l| {
                serde_json::from_str::<Value>(l)
                    .ok()
                    .filter(|v| v["type"] == "header")
            })
            .unwrap_or(Value::Null);
        assert_eq!(header["targets"][0]["name"], target, "{}", t.header);
        assert_eq!(header["targets"][0]["len"], 2, "{}", t.header);
        let tid = h.go_and_finish();
        let (code, out, err) = t.wait(Duration::from_secs(60));
        assert_eq!(code, 0, "{err}");
        let mine: Vec<Value> = hits(&out).into_iter().filter(|v| v["tid"] == tid).collect();
        let kernel = mine
            .iter()
            .filter(|v| v["ip"]["kernel"] == true && chain_has(v, "__do_sys_sysinfo"))
            .count();
        let user = mine
            .iter()
            .filter(|v| v["ip"]["kernel"] == false && v["ip"]["sym"] == "main")
            .count();
        // A `rep movsb` copy traps once per watched byte it writes, so each call's copy is one hit or (here)
        // two, never none; the helper's 2-byte store is one.
        assert!((n..=2 * n).contains(&kernel), "{kernel} kernel hits: {out}");
        assert_eq!(user, n, "{out}");
    }
);

/// A raw BTF blob as pahole lays out a kernel built with its global-variable encoding: `int`,
/// `struct pair { int a; int b; }`, and a global `ksw_global` of that type in `.data`.
fn btf_with_a_global() -> Vec<u8> {
    let strings = b"\0int\0pair\0a\0b\0ksw_global\0.data\0";
    let name = |s: &str| -> u32 {
        let needle = format!("\0{s}\0");
        let at = strings
            .windows(needle.len())
            .position(|w| w == needle.as_bytes())
            .expect("name in the string section");
        at as u32 + 1
    };
    let kind = |k: u32, vlen: u32| (k << 24) | vlen;
    let mut types: Vec<u32> = Vec::new();
    // [1] INT 'int' size 4, signed, 32 bits.
    types.extend([name("int"), kind(1, 0), 4, (1 << 24) | 32]);
    // [2] STRUCT 'pair' size 8: a at bit 0, b at bit 32.
    types.extend([name("pair"), kind(4, 2), 8]);
    types.extend([name("a"), 1, 0, name("b"), 1, 32]);
    // [3] VAR 'ksw_global' of type 2, global linkage.
    types.extend([name("ksw_global"), kind(14, 0), 2, 1]);
    // [4] DATASEC '.data' size 8: var 3 at offset 0, 8 bytes.
    types.extend([name(".data"), kind(15, 1), 8, 3, 0, 8]);
    let type_len = (types.len() * 4) as u32;
    let mut blob = Vec::new();
    blob.extend(0xeb9f_u16.to_le_bytes());
    blob.extend([1u8, 0]);
    for word in [24, 0, type_len, type_len, strings.len() as u32] {
        blob.extend(u32::to_le_bytes(word));
    }
    for word in types {
        blob.extend(word.to_le_bytes());
    }
    blob.extend(strings);
    blob
}

/// Where BTF records a global's type (kernels built with pahole's global-variable encoding), a member of
/// it needs no cast and no DWARF: kallsyms gives the address, BTF the member.
#[test]
fn a_global_whose_type_btf_records_has_fields_without_dwarf() {
    let dir = util::temp_dir("ksymwatch-btf-global");
    let btf = dir.join("btf");
    std::fs::write(&btf, btf_with_a_global()).unwrap();
    let kallsyms = dir.join("kallsyms");
    std::fs::write(
        &kallsyms,
        "ffffffff81000000 T _text\nffffffff81000100 D ksw_global\nffffffff81000108 D ksw_next\n",
    )
    .unwrap();
    let (btf, kallsyms) = (btf.to_str().unwrap(), kallsyms.to_str().unwrap());
    let (code, out, err) = util::run(&[
        "resolve",
        "--json",
        "ksw_global.b",
        "--btf",
        btf,
        "--kallsyms",
        kallsyms,
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["runtime_addr"], "0xffffffff81000104", "{v}");
    assert_eq!((&v["offset"], &v["size"]), (&4.into(), &4.into()), "{v}");
    assert_eq!(v["type"], "int");
    assert_eq!(v["cast"], "struct pair");
    assert_eq!(v["base"], "ksw_global");
    util::rejects(
        &[
            "resolve",
            "ksw_global.c",
            "--btf",
            btf,
            "--kallsyms",
            kallsyms,
        ],
        2,
        &["no field `c`", "its fields are: a, b"],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A module's variable has no type in kallsyms, but a cast gives it one: the base is found among the
/// module's symbols (a made-up kallsyms: this kernel has no module support), the member in BTF.
#[test]
fn a_cast_gives_a_module_variable_fields() {
    if !Path::new(BTF).exists() {
        util::skip(format_args!("{BTF} is missing: this kernel has no BTF"));
        return;
    }
    let dir = util::temp_dir("ksymwatch-typed-module");
    let kallsyms = dir.join("kallsyms");
    std::fs::write(&kallsyms, ksymwatch_symbols::testing::MODULES_KALLSYMS).unwrap();
    let (code, out, err) = util::run(&[
        "resolve",
        "--json",
        "(struct list_head)foo:counter.prev",
        "--kallsyms",
        kallsyms.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    // foo's counter, not vmlinux's at 0xffffffff83000000; `prev` is the second pointer.
    assert_eq!(v["base_addr"], "0xffffffffc0001080", "{v}");
    assert_eq!(v["runtime_addr"], "0xffffffffc0001088", "{v}");
    assert_eq!(v["type"], "struct list_head *");
    // Which file placed the base, and whether it is the running kernel.
    let source = v["base_source"].as_str().unwrap_or_default();
    assert!(
        source.starts_with("kallsyms ") && source.contains(", kernel: "),
        "{v}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// `--btf FILE` of another kernel (here: the running kernel's BTF with one byte changed) would put a live
// watch on another kernel's offsets: `write` and `rw` with a cast refuse it (exit 2, nothing armed), while
// `resolve` answers and says whose types they are; a byte-identical copy of the running kernel's BTF is
// accepted for a watch.
live_test!(
    another_kernels_btf_is_refused_for_a_watch_and_noted_by_resolve,
    {
        let Ok(mut bytes) = std::fs::read("/sys/kernel/btf/vmlinux") else {
            util::skip("no /sys/kernel/btf/vmlinux");
            return;
        };
        let dir = util::temp_dir("ksw-btf");
        let same = dir.join("same.btf");
        std::fs::write(&same, &bytes).unwrap();
        // One letter of a name near the end of the string section changes case: still valid BTF, another kernel.
        let Some(at) = bytes.iter().rposition(|b| b.is_ascii_lowercase()) else {
            util::skip("the BTF has no lowercase name byte");
            return;
        };
        bytes[at] ^= 0x20;
        let other = dir.join("other.btf");
        std::fs::write(&other, &bytes).unwrap();
        let target = "(struct task_struct)0xffff888100000000.pid";
        for verb in ["write", "rw"] {
            let err = util::rejects(
                &[
                    verb,
                    target,
                    "--btf",
                    other.to_str().unwrap(),
                    "--duration",
                    "100ms",
                ],
                2,
                &["not the running kernel's BTF", "leave out --btf"],
            );
            assert!(err.contains("other.btf"), "{err}");
        }
        let (code, out, err) = util::run(&["resolve", target, "--btf", other.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("offset"), "{out}");
        assert!(err.contains("is not the running kernel's BTF"), "{err}");
        // Accepted for a watch: the plan is made (a dry run arms nothing), then armed where the kernel allows.
        let same_btf = ["--btf", same.to_str().unwrap()];
        let (code, _out, err) =
            util::run(&[&["write", target, "--dry-run"][..], &same_btf].concat());
        assert_eq!(
            code,
            util::kernel_dry_run_code(),
            "a copy of the running kernel's BTF is that kernel's: {err}"
        );
        if !util::kernel_part_skipped("arming the cast with the copied BTF") {
            let (code, _out, err) =
                util::run(&[&["write", target, "--duration", "100ms"][..], &same_btf].concat());
            assert_eq!(
                code, 0,
                "a copy of the running kernel's BTF is that kernel's: {err}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
);

/// Every struct name the running kernel's BTF has more than once with different sizes (two `struct
/// irq_info`, two `struct console`, three `struct perf_aux_event`): the bare cast is refused for `resolve`
/// and `write` alike, naming each one's BTF id and size, and `#ID` picks each at bpftool's size. A typedef
/// the kernel has twice for one size (`u8`, once for `__u8` and once for `unsigned char`) is one type.
#[test]
fn every_struct_name_btf_has_twice_is_refused_until_its_id_picks_one() {
    let Some(dump) = Dump::load() else {
        return;
    };
    let mut by_name: HashMap<String, Vec<(u64, u64)>> = HashMap::new();
    for (id, (t, _)) in &dump.types {
        let Some((name, rest)) = t.strip_prefix("STRUCT '").and_then(|r| r.split_once("' ")) else {
            continue;
        };
        let size = rest
            .split_whitespace()
            .find_map(|w| w.strip_prefix("size="))
            .and_then(|s| s.parse().ok())
            .expect("size=");
        if name != "(anon)" {
            by_name
                .entry(name.to_string())
                .or_default()
                .push((*id, size));
        }
    }
    let mut tried = 0;
    for (name, mut types) in by_name {
        types.sort();
        let mut sizes: Vec<u64> = types.iter().map(|t| t.1).collect();
        sizes.sort();
        sizes.dedup();
        // Same-size namesakes may be copies of one definition, which count as one.
        if types.len() < 2 || sizes.len() != types.len() {
            continue;
        }
        tried += 1;
        let t = format!("(struct {name})0xffff888100000000");
        let mut needles = vec![format!(
            "BTF has {} different types named `struct {name}`",
            types.len()
        )];
        for (id, size) in &types {
            needles.push(format!("#{id} (size {size}"));
        }
        let needles: Vec<&str> = needles.iter().map(String::as_str).collect();
        util::rejects(&["resolve", &t], 2, &needles);
        util::rejects(&["write", &t, "--count", "1"], 2, &needles);
        for (id, size) in &types {
            let v = resolve_json(&format!("(struct {name}#{id})0xffff888100000000"));
            assert_eq!(v["size"], *size, "{v}");
        }
    }
    if tried == 0 {
        util::skip("this kernel's BTF has no struct name twice with different sizes");
    }
    let u8s = dump
        .types
        .values()
        .filter(|(t, _)| t.starts_with("TYPEDEF 'u8' "))
        .count();
    if u8s >= 2 {
        let v = resolve_json("(u8)0xffff888100000000");
        assert_eq!(v["size"], 1, "{v}");
    }
}

/// Keeps every CPU's runqueue busy for `for_`: on each CPU a `taskset`-pinned shell sleeps and wakes,
/// so each CPU's `nr_running` goes up and down.
fn scheduler_churn(cpus: &[u32], for_: Duration) -> Vec<std::process::Child> {
    let rounds = for_.as_millis() / 5;
    cpus.iter()
        .map(|cpu| {
            std::process::Command::new("taskset")
                .args(["-c", &cpu.to_string(), "sh", "-c"])
                .arg(format!(
                    "i=0; while [ $i -lt {rounds} ]; do sleep 0.005; i=$((i+1)); done"
                ))
                .spawn()
                .expect("taskset")
        })
        .collect()
}

// A per-CPU variable is watched at each CPU's own copy: the header lists one copy per online CPU (each
// CPU's per-CPU base asked of the kernel by a BPF program on that CPU), every hit on cpu N is at cpu N's
// copy and names it, and every CPU's copy is hit (`nr_running` changes whenever a task is enqueued or
// dequeued there). With `--percpu-cpu N`, every hit is at CPU N's copy, whichever CPU wrote it.
live_kernel_test!(a_per_cpu_variable_is_watched_at_each_cpus_copy, {
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        return util::skip("no kernel BTF");
    }
    let cpus = util::online_cpus();
    let mut churn = scheduler_churn(&cpus, Duration::from_secs(2));
    // `write runqueues.nr_running EXTRA...`, which must end with exit 0: its stdout.
    let nr_running = |extra: &[&str]| {
        let args = [&["write", "runqueues.nr_running"][..], extra].concat();
        let (code, out, err) = util::run_within(&args, Duration::from_secs(30));
        assert_eq!(code, 0, "{args:?}: {err}");
        out
    };
    let out = nr_running(&["--json", "--duration", "1s"]);
    let records = util::ndjson(&out);
    let target = &records[0]["targets"][0];
    assert_eq!(target["name"], "runqueues.nr_running", "{target}");
    assert_eq!(target["percpu"]["copy"], Value::Null, "{target}");
    let copies: std::collections::BTreeMap<u64, String> = target["percpu"]["copies"]
        .as_array()
        .expect("copies")
        .iter()
        .map(|c| {
            (
                c["cpu"].as_u64().unwrap(),
                c["addr"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        copies.len(),
        cpus.len(),
        "one copy per online CPU: {target}"
    );
    let distinct: std::collections::BTreeSet<&String> = copies.values().collect();
    assert_eq!(distinct.len(), cpus.len(), "{target}");
    let own = hits(&out);
    let mut hit_cpus = std::collections::BTreeSet::new();
    for h in &own {
        let cpu = h["cpu"].as_u64().unwrap();
        assert_eq!(h["copy"].as_u64(), Some(cpu), "each CPU its own copy: {h}");
        assert_eq!(h["addr"].as_str(), Some(copies[&cpu].as_str()), "{h}");
        hit_cpus.insert(cpu);
    }
    assert_eq!(
        hit_cpus.len(),
        cpus.len(),
        "every CPU's copy hit: {hit_cpus:?}"
    );

    // Every CPU watches the last CPU's copy.
    let last = *cpus.last().expect("a CPU");
    let out = nr_running(&[
        "--percpu-cpu",
        &last.to_string(),
        "--json",
        "--duration",
        "1s",
    ]);
    let remote = hits(&out);
    assert!(!remote.is_empty(), "{out}");
    for h in &remote {
        assert_eq!(h["copy"].as_u64(), Some(u64::from(last)), "{h}");
        assert_eq!(
            h["addr"].as_str(),
            Some(copies[&u64::from(last)].as_str()),
            "{h}"
        );
    }
    // The text stream names the copy after the target.
    let out = nr_running(&["--count", "2", "--duration", "20s"]);
    assert!(out.contains("per-cpu: +0x"), "{out}");
    assert!(out.contains("runqueues.nr_running@cpu"), "{out}");
    for c in &mut churn {
        let _ = c.kill();
        let _ = c.wait();
    }
});
