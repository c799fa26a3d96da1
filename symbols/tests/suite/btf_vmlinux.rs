//! The BTF reader against the running kernel's `/sys/kernel/btf/vmlinux`, checked against what
//! `bpftool btf dump file` says about the same file: the test parses bpftool's raw dump (type lines and
//! their member lines) and computes each member's offset and size itself, independently of the reader.
//! Without bpftool or the BTF file the tests print `SKIP: <test>: <reason>` and pass.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use ksymwatch_symbols::testing::{member_path as path, skip};
use ksymwatch_symbols::{Btf, CastKind, CastType, FieldError, PathElem};

/// One type of bpftool's raw dump.
#[derive(Debug, Default)]
struct DumpType {
    kind: String,
    name: String,
    size: Option<u64>,
    type_id: Option<u32>,
    nr_elems: Option<u64>,
    /// `(name, type_id, bits_offset, bitfield_size)`.
    members: Vec<(String, u32, u64, Option<u64>)>,
}

/// `(byte offset, size, bitfield (bit offset, width))` of a member, as the dump says.
type Resolved = (u64, Option<u64>, Option<(u64, u64)>);

struct Dump {
    types: HashMap<u32, DumpType>,
    by_name: HashMap<String, Vec<u32>>,
    /// `(variable, datasec, offset, size)` from the DATASEC lines.
    vars: Vec<(String, String, u64, u64)>,
}

/// `key=value` of a dump line.
fn key(line: &str, k: &str) -> Option<u64> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(k)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}

/// The first `'quoted'` word of a line.
fn quoted(line: &str) -> Option<&str> {
    let start = line.find('\'')? + 1;
    let end = start + line[start..].find('\'')?;
    Some(&line[start..end])
}

fn parse_dump(text: &str) -> Dump {
    let mut types: HashMap<u32, DumpType> = HashMap::new();
    let mut vars = Vec::new();
    let mut current: Option<u32> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix('[') {
            let (id, rest) = rest.split_once("] ").expect("a type line");
            let id: u32 = id.parse().expect("a type id");
            let kind = rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
            let t = DumpType {
                name: quoted(rest).unwrap_or_default().to_string(),
                size: key(rest, "size"),
                type_id: key(rest, "type_id").map(|v| v as u32),
                nr_elems: key(rest, "nr_elems"),
                kind,
                members: Vec::new(),
            };
            types.insert(id, t);
            current = Some(id);
        } else if let (Some(id), Some(member)) = (current, line.strip_prefix('\t')) {
            let t = types.get_mut(&id).expect("the current type");
            if t.kind == "STRUCT" || t.kind == "UNION" {
                t.members.push((
                    quoted(member).expect("a member name").to_string(),
                    key(member, "type_id").expect("a member type") as u32,
                    key(member, "bits_offset").expect("a member offset"),
                    key(member, "bitfield_size"),
                ));
            } else if t.kind == "DATASEC" {
                if let Some(var) = member.split("(VAR '").nth(1) {
                    vars.push((
                        var.trim_end_matches("')").to_string(),
                        t.name.clone(),
                        key(member, "offset").expect("a var offset"),
                        key(member, "size").expect("a var size"),
                    ));
                }
            }
        }
    }
    let mut by_name: HashMap<String, Vec<u32>> = HashMap::new();
    for (id, t) in &types {
        by_name.entry(t.name.clone()).or_default().push(*id);
    }
    for ids in by_name.values_mut() {
        ids.sort();
    }
    Dump {
        types,
        by_name,
        vars,
    }
}

impl Dump {
    fn get(&self, id: u32) -> &DumpType {
        &self.types[&id]
    }

    /// Through typedefs and qualifiers.
    fn strip(&self, mut id: u32) -> u32 {
        while matches!(
            self.get(id).kind.as_str(),
            "TYPEDEF" | "CONST" | "VOLATILE" | "RESTRICT" | "TYPE_TAG"
        ) {
            id = self.get(id).type_id.expect("a referenced type");
        }
        id
    }

    fn size(&self, id: u32) -> Option<u64> {
        let t = self.get(self.strip(id));
        match t.kind.as_str() {
            "PTR" => Some(8),
            "ARRAY" => match t.nr_elems? {
                0 => None,
                n => Some(n * self.size(t.type_id?)?),
            },
            _ => t.size,
        }
    }

    /// A struct, else a union, else a typedef of that name.
    fn find_type(&self, name: &str) -> Option<u32> {
        let ids = self.by_name.get(name)?;
        ["STRUCT", "UNION", "TYPEDEF"]
            .iter()
            .find_map(|k| ids.iter().find(|&&id| self.get(id).kind == *k).copied())
    }

    /// `(bits from the struct's start, type, bitfield width)`, through anonymous members.
    fn member(&self, id: u32, field: &str) -> Option<(u64, u32, Option<u64>)> {
        for (name, ty, bits, width) in &self.get(id).members {
            if name == field {
                return Some((*bits, *ty, *width));
            }
            if name == "(anon)" {
                if let Some((b, t, w)) = self.member(self.strip(*ty), field) {
                    return Some((bits + b, t, w));
                }
            }
        }
        None
    }

    /// `(byte offset, size, bitfield (bit offset, width))` of `path` below type `name`.
    fn resolve(&self, name: &str, path: &[PathElem]) -> Option<Resolved> {
        let mut ty = self.find_type(name)?;
        let mut bits = 0;
        let mut bitfield = None;
        for elem in path {
            let s = self.strip(ty);
            match elem {
                PathElem::Field(f) => {
                    let (b, t, w) = self.member(s, f)?;
                    bits += b;
                    ty = t;
                    bitfield = w.map(|w| (bits, w));
                }
                PathElem::Index(i) => {
                    let a = self.get(s);
                    assert_eq!(a.kind, "ARRAY", "{name}: not an array at {elem}");
                    ty = a.type_id?;
                    bits += i * self.size(ty)? * 8;
                    bitfield = None;
                }
            }
        }
        Some((bits / 8, self.size(ty), bitfield))
    }
}

/// The running kernel's BTF and bpftool's dump of it, read once for all the tests here; `None` (and the
/// calling test skipped) without either.
fn load() -> Option<(Btf, &'static Dump)> {
    static DUMP: OnceLock<Result<Dump, String>> = OnceLock::new();
    let dump = DUMP.get_or_init(|| {
        if !Path::new(Btf::VMLINUX).exists() {
            return Err(format!(
                "{} not present (kernel built without CONFIG_DEBUG_INFO_BTF)",
                Btf::VMLINUX
            ));
        }
        let bpftool = ["bpftool", "/usr/sbin/bpftool"].into_iter().find(|t| {
            Command::new(t)
                .arg("version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
        let Some(bpftool) = bpftool else {
            return Err("bpftool not found (Debian's bpftool package)".into());
        };
        let out = Command::new(bpftool)
            .args(["btf", "dump", "file", Btf::VMLINUX])
            .output()
            .expect("bpftool runs");
        assert!(
            out.status.success(),
            "bpftool: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(parse_dump(
            &String::from_utf8(out.stdout).expect("bpftool prints text"),
        ))
    });
    match dump {
        Ok(dump) => {
            let btf = Btf::open(Path::new(Btf::VMLINUX)).expect("the running kernel's BTF loads");
            Some((btf, dump))
        }
        Err(why) => {
            skip(why);
            None
        }
    }
}

fn cast(name: &str) -> CastType {
    CastType {
        kind: None,
        name: name.into(),
    }
}

/// Members across the kinds of step the reader takes: nested structs, anonymous unions and structs,
/// array elements, typedef'd members and typedef'd casts, pointers, `list_head`s.
const MEMBERS: &[(&str, &str)] = &[
    ("task_struct", "pid"),
    ("task_struct", "se.vruntime"),
    ("task_struct", "comm[3]"),
    ("task_struct", "tasks.next"),
    ("task_struct", "cpus_mask.bits[0]"),
    ("task_struct", "se"),
    ("new_utsname", "nodename[3]"),
    ("new_utsname", "nodename"),
    ("sk_buff", "len"),
    ("sk_buff", "next"),
    ("sk_buff", "sk"),
    ("list_head", "next"),
    ("list_head", "prev"),
    ("page", "mapping"),
    ("page", "_refcount"),
    ("mm_struct", "mm_count"),
    ("rq", "nr_running"),
    ("file", "f_mode"),
    ("inode", "i_size"),
    ("cred", "uid.val"),
    ("spinlock_t", "rlock.raw_lock"),
    ("pipe_inode_info", "head"),
    ("task_struct", ""),
];

#[test]
fn member_offsets_and_sizes_match_bpftool() {
    let Some((btf, dump)) = load() else { return };
    let mut checked = 0;
    for (ty, p) in MEMBERS {
        let p = path(p);
        let Some((offset, size, bitfield)) = dump.resolve(ty, &p) else {
            eprintln!(
                "note: this kernel has no {ty}{}, not checked",
                p.iter().map(|e| e.to_string()).collect::<String>()
            );
            continue;
        };
        assert_eq!(
            bitfield, None,
            "{ty} {p:?} is a bitfield; pick another member"
        );
        let got = btf
            .member(&cast(ty), &p)
            .unwrap_or_else(|e| panic!("({ty}) {p:?}: {e}"));
        assert_eq!(
            (got.offset, got.size),
            (offset, size),
            "({ty}) {p:?}: {got:?}"
        );
        checked += 1;
    }
    assert!(checked >= 12, "only {checked} members checked");
}

#[test]
fn type_names_are_spelled_as_c() {
    let Some((btf, _)) = load() else { return };
    let name = |ty: &str, p: &str| {
        btf.member(&cast(ty), &path(p))
            .map(|m| m.type_name)
            .unwrap_or_else(|e| e.to_string())
    };
    assert_eq!(name("task_struct", "pid"), "pid_t");
    assert_eq!(name("task_struct", "comm"), "char[16]");
    assert_eq!(name("task_struct", "tasks.next"), "struct list_head *");
    assert_eq!(name("new_utsname", "nodename"), "char[65]");
    assert_eq!(name("task_struct", ""), "struct task_struct");
    assert_eq!(name("spinlock_t", ""), "spinlock_t");
    let s = CastType {
        kind: Some(CastKind::Struct),
        name: "task_struct".into(),
    };
    assert_eq!(
        btf.member(&s, &path("se")).unwrap().type_name,
        "struct sched_entity"
    );
}

#[test]
fn a_task_struct_bitfield_is_refused_with_its_word() {
    let Some((btf, dump)) = load() else { return };
    let ts = dump.find_type("task_struct").expect("task_struct in BTF");
    let (field, bits, width) = dump
        .get(ts)
        .members
        .iter()
        .find_map(|(n, _, bits, w)| w.map(|w| (n.clone(), *bits, w)))
        .expect("task_struct has bitfields");
    match btf.member(&cast("task_struct"), &[PathElem::Field(field.clone())]) {
        Err(FieldError::Bitfield {
            at,
            bits: b,
            bit_offset,
            word_offset,
            word_size,
        }) => {
            assert_eq!(at, format!("(task_struct).{field}"));
            assert_eq!((u64::from(b), bit_offset), (width, bits));
            // The word holds the bits and is naturally aligned.
            assert!(word_offset * 8 <= bits && bits + width <= (word_offset + word_size) * 8);
            assert!([1, 2, 4, 8].contains(&word_size) && word_offset % word_size == 0);
        }
        other => panic!("{field}: {other:?}"),
    }
}

#[test]
fn per_cpu_variables_match_their_datasec_entry() {
    let Some((btf, dump)) = load() else { return };
    let Some((name, sec, offset, size)) = dump
        .vars
        .iter()
        .find(|v| v.0 == "runqueues")
        .or(dump.vars.first())
    else {
        skip("this kernel's BTF lists no variables");
        return;
    };
    let var = btf.variable(name).expect("a variable the dump lists");
    assert_eq!(
        (&var.section, var.offset_in_section, var.size),
        (sec, *offset, *size)
    );
    let whole = btf.variable_member(name, &[]).unwrap();
    assert_eq!(whole.size, Some(*size));
    if name == "runqueues" {
        let via_var = btf.variable_member(name, &path("nr_running")).unwrap();
        assert_eq!(
            via_var,
            btf.member(&cast("rq"), &path("nr_running")).unwrap()
        );
    }
    assert!(matches!(
        btf.variable_member("no_such_variable_here", &[]),
        Err(FieldError::NoVariable { .. })
    ));
}
