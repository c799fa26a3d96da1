//! The reader on hand-built BTF blobs: one feature per test, and corrupt blobs that must end in errors.

use super::reader::{kind, HEADER_LEN, MAGIC};
use super::*;
use crate::testing::member_path as path;
use proptest::prelude::*;

/// Lays out a BTF blob type by type; ids and string offsets continue a base's when built with `split`.
struct Builder {
    types: Vec<u8>,
    strs: Vec<u8>,
    next_id: u32,
    str_base: u32,
}

impl Builder {
    fn new() -> Builder {
        Builder {
            types: Vec::new(),
            strs: vec![0],
            next_id: 1,
            str_base: 0,
        }
    }

    fn split(base: &Builder) -> Builder {
        Builder {
            types: Vec::new(),
            strs: Vec::new(),
            next_id: base.next_id,
            str_base: base.str_base + base.strs.len() as u32,
        }
    }

    fn s(&mut self, name: &str) -> u32 {
        if name.is_empty() {
            return 0;
        }
        let off = self.str_base + self.strs.len() as u32;
        self.strs.extend_from_slice(name.as_bytes());
        self.strs.push(0);
        off
    }

    fn add(
        &mut self,
        k: u32,
        name: &str,
        kflag: bool,
        vlen: u32,
        size_or_type: u32,
        extra: &[u32],
    ) -> u32 {
        let name = self.s(name);
        let info = (u32::from(kflag) << 31) | (k << 24) | vlen;
        for w in [name, info, size_or_type].iter().chain(extra) {
            self.types.extend_from_slice(&w.to_le_bytes());
        }
        self.next_id += 1;
        self.next_id - 1
    }

    fn int(&mut self, name: &str, size: u32) -> u32 {
        self.int_bits(name, size, 0, size * 8)
    }

    fn int_bits(&mut self, name: &str, size: u32, offset: u32, bits: u32) -> u32 {
        self.add(kind::INT, name, false, 0, size, &[(offset << 16) | bits])
    }

    fn ptr(&mut self, to: u32) -> u32 {
        self.add(kind::PTR, "", false, 0, to, &[])
    }

    fn array(&mut self, elem: u32, index: u32, n: u32) -> u32 {
        self.add(kind::ARRAY, "", false, 0, 0, &[elem, index, n])
    }

    fn typedef(&mut self, name: &str, to: u32) -> u32 {
        self.add(kind::TYPEDEF, name, false, 0, to, &[])
    }

    /// A struct or union; members are `(name, type, offset word)` (bits, or with `kflag` width << 24 | bits).
    fn aggregate(
        &mut self,
        k: u32,
        name: &str,
        kflag: bool,
        size: u32,
        members: &[(&str, u32, u32)],
    ) -> u32 {
        let mut extra = Vec::new();
        for (n, t, off) in members {
            extra.extend([self.s(n), *t, *off]);
        }
        self.add(k, name, kflag, members.len() as u32, size, &extra)
    }

    fn strukt(&mut self, name: &str, size: u32, members: &[(&str, u32, u32)]) -> u32 {
        self.aggregate(kind::STRUCT, name, false, size, members)
    }

    fn union(&mut self, name: &str, size: u32, members: &[(&str, u32, u32)]) -> u32 {
        self.aggregate(kind::UNION, name, false, size, members)
    }

    /// The same blob in big-endian byte order (every header and type-section field is a u32).
    fn build_big_endian(&self) -> Vec<u8> {
        let mut v = self.build();
        v[..2].copy_from_slice(&MAGIC.to_be_bytes());
        let end = HEADER_LEN + self.types.len();
        for w in v[4..end].chunks_exact_mut(4) {
            w.reverse();
        }
        v
    }

    fn build(&self) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&MAGIC.to_le_bytes());
        v.extend_from_slice(&[1, 0]);
        let types = self.types.len() as u32;
        for w in [HEADER_LEN as u32, 0, types, types, self.strs.len() as u32] {
            v.extend_from_slice(&w.to_le_bytes());
        }
        v.extend_from_slice(&self.types);
        v.extend_from_slice(&self.strs);
        v
    }
}

fn load(b: &Builder) -> Btf {
    Btf::from_bytes(b.build(), Path::new("test.btf"), None).unwrap()
}

fn cast(name: &str) -> CastType {
    CastType {
        kind: None,
        name: name.into(),
    }
}

fn strukt(name: &str) -> CastType {
    CastType {
        kind: Some(CastKind::Struct),
        name: name.into(),
    }
}

/// Asserts what `path` below `cast` resolves to.
#[track_caller]
fn expect(btf: &Btf, cast: &CastType, p: &str, offset: u64, size: Option<u64>, type_name: &str) {
    assert_eq!(
        btf.member(cast, &path(p)).unwrap(),
        info(offset, size, type_name),
        "({cast}) {p}"
    );
}

/// [`expect`] for each `(path, offset, size, type)`.
fn expect_all(btf: &Btf, cast: &CastType, rows: &[(&str, u64, Option<u64>, &str)]) {
    for &(p, offset, size, type_name) in rows {
        expect(btf, cast, p, offset, size, type_name);
    }
}

fn info(offset: u64, size: Option<u64>, type_name: &str) -> MemberInfo {
    MemberInfo {
        offset,
        size,
        type_name: type_name.into(),
    }
}

/// A small kernel: `struct list_head`, `struct inner`, `struct task` with a nested struct, an anonymous
/// union, arrays, typedefs, qualifiers and a pointer.
fn kernel() -> Builder {
    let mut b = Builder::new();
    let int = b.int("int", 4); // 1
    let ulong = b.int("long unsigned int", 8); // 2
    let chr = b.int("char", 1); // 3
    let pid_t = b.typedef("pid_t", int); // 4
                                         // 5: struct list_head { struct list_head *next, *prev; }, its pointer is 6.
    let list_head = b.strukt("list_head", 16, &[("next", 6, 0), ("prev", 6, 64)]);
    let lh_ptr = b.ptr(list_head);
    assert_eq!(lh_ptr, 6);
    let inner = b.strukt("inner", 16, &[("a", int, 0), ("b", ulong, 64)]);
    let name = b.array(chr, int, 65);
    let matrix_row = b.array(int, int, 3);
    let matrix = b.array(matrix_row, int, 2);
    let anon = b.union("", 8, &[("i", int, 0), ("l", ulong, 0)]);
    let cint = b.add(kind::CONST, "", false, 0, int, &[]);
    let vcint = b.add(kind::VOLATILE, "", false, 0, cint, &[]);
    let tagged = b.add(kind::TYPE_TAG, "rcu", false, 0, lh_ptr, &[]);
    let inner_t = b.typedef("inner_t", inner);
    b.strukt(
        "task",
        184,
        &[
            ("pid", pid_t, 0),
            ("in", inner, 64),
            ("", anon, 192),
            ("name", name, 256),
            ("m", matrix, 800),
            ("tasks", list_head, 1024),
            ("cv", vcint, 1152),
            ("rcu_head", tagged, 1216),
            ("it", inner_t, 1280),
        ],
    );
    b.add(kind::DECL_TAG, "noinline", false, 0, 1, &[u32::MAX]);
    b
}

#[test]
fn nested_members_typedefs_and_qualifiers() {
    let btf = load(&kernel());
    let t = strukt("task");
    expect_all(
        &btf,
        &t,
        &[
            ("", 0, Some(184), "struct task"),
            ("pid", 0, Some(4), "pid_t"),
            ("in", 8, Some(16), "struct inner"),
            ("in.b", 16, Some(8), "long unsigned int"),
            // Through a typedef'd struct: the typedef is looked through for the walk, kept in the name.
            ("it", 160, Some(16), "inner_t"),
            ("it.b", 168, Some(8), "long unsigned int"),
            ("cv", 144, Some(4), "volatile const int"),
            ("tasks.next", 128, Some(8), "struct list_head *"),
            // A type tag (`__rcu`) is not part of the C type.
            ("rcu_head", 152, Some(8), "struct list_head *"),
        ],
    );
    // A typedef can be cast to, and so can a plain int.
    expect(&btf, &cast("pid_t"), "", 0, Some(4), "pid_t");
    expect(&btf, &cast("inner_t"), "a", 0, Some(4), "int");
    expect(&btf, &cast("int"), "", 0, Some(4), "int");
}

#[test]
fn big_endian_blobs_read_the_same() {
    let b = kernel();
    let btf = Btf::from_bytes(b.build_big_endian(), Path::new("be.btf"), None).unwrap();
    let t = cast("task");
    expect_all(
        &btf,
        &t,
        &[
            ("m[1][2]", 120, Some(4), "int"),
            ("tasks.next", 128, Some(8), "struct list_head *"),
        ],
    );
}

#[test]
fn anonymous_union_members_are_searched_through() {
    let btf = load(&kernel());
    let t = cast("task");
    expect_all(
        &btf,
        &t,
        &[
            ("l", 24, Some(8), "long unsigned int"),
            ("i", 24, Some(4), "int"),
        ],
    );
    match btf.member(&t, &path("nope")) {
        Err(FieldError::NoSuchField {
            at,
            field,
            type_name,
            available,
        }) => {
            assert_eq!(
                (at.as_str(), field.as_str(), type_name.as_str()),
                ("(task)", "nope", "struct task")
            );
            assert_eq!(
                available,
                ["pid", "in", "i", "l", "name", "m", "tasks", "cv", "rcu_head", "it"]
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn array_elements_bounds_and_nested_arrays() {
    let btf = load(&kernel());
    let t = strukt("task");
    expect_all(
        &btf,
        &t,
        &[
            ("name", 32, Some(65), "char[65]"),
            ("name[3]", 35, Some(1), "char"),
            ("m", 100, Some(24), "int[2][3]"),
            ("m[1]", 112, Some(12), "int[3]"),
            ("m[1][2]", 120, Some(4), "int"),
        ],
    );
    match btf.member(&t, &path("name[65]")) {
        Err(e @ FieldError::IndexOutOfRange { len: 65, .. }) => {
            assert_eq!(
                e.to_string(),
                "`(struct task).name[65]` is out of range: `(struct task).name` is a char[65] with 65 elements \
                 (valid: 0..=64)"
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        btf.member(&t, &path("m[2]")),
        Err(FieldError::IndexOutOfRange { len: 2, .. })
    ));
    // `[N]` on a pointer, `.f` on an int and on a pointer are refused, with the pointer hint.
    let e = btf.member(&t, &path("tasks.next[1]")).unwrap_err();
    assert!(matches!(e, FieldError::NotAnArray { .. }), "{e:?}");
    assert!(
        e.to_string()
            .ends_with("pointers are not followed: watch the pointee by its address"),
        "{e}"
    );
    let e = btf.member(&t, &path("tasks.next.prev")).unwrap_err();
    assert!(
        matches!(e, FieldError::NotAStruct { ref type_name, .. } if type_name == "struct list_head *")
    );
    let e = btf.member(&t, &path("pid.x")).unwrap_err();
    assert!(
        matches!(e, FieldError::NotAStruct { ref at, ref type_name, .. } if at == "(struct task).pid" && type_name == "pid_t")
    );
}

#[test]
fn enums_floats_and_other_named_types_can_be_cast_to() {
    let mut b = Builder::new();
    let int = b.int("int", 4);
    b.add(
        kind::ENUM,
        "state",
        false,
        2,
        4,
        &[b.strs.len() as u32, 0, 0, 1],
    );
    b.add(kind::ENUM64, "wide", false, 1, 8, &[0, 1, 2]);
    b.add(kind::FLOAT, "double", false, 0, 8, &[]);
    b.strukt("state", 8, &[("n", int, 0)]);
    let btf = load(&b);
    // Without a keyword the struct wins over the enum of the same name; `enum` picks the enum.
    expect(&btf, &cast("state"), "", 0, Some(8), "struct state");
    let e = CastType {
        kind: Some(CastKind::Enum),
        name: "state".into(),
    };
    expect(&btf, &e, "", 0, Some(4), "enum state");
    expect(&btf, &cast("wide"), "", 0, Some(8), "enum wide");
    expect(&btf, &cast("double"), "", 0, Some(8), "double");
    let e = btf.member(&cast("wide"), &path("x")).unwrap_err();
    assert!(
        matches!(e, FieldError::NotAStruct { ref type_name, .. } if type_name == "enum wide"),
        "{e:?}"
    );
}

#[test]
fn integer_types_are_found_however_c_spells_them() {
    let mut b = Builder::new();
    for (name, size) in [
        ("long unsigned int", 8),
        ("long int", 8),
        ("long long unsigned int", 8),
        ("short int", 2),
        ("unsigned int", 4),
        ("int", 4),
        ("unsigned char", 1),
        ("char", 1),
    ] {
        b.int(name, size);
    }
    let btf = load(&b);
    for (written, gcc) in [
        ("unsigned long", "long unsigned int"),
        ("long unsigned", "long unsigned int"),
        ("unsigned long int", "long unsigned int"),
        ("long", "long int"),
        ("signed long", "long int"),
        ("unsigned long long", "long long unsigned int"),
        ("short", "short int"),
        ("unsigned", "unsigned int"),
        ("signed", "int"),
        ("char unsigned", "unsigned char"),
    ] {
        assert_eq!(
            btf.member(&cast(written), &[]).unwrap().type_name,
            gcc,
            "{written}"
        );
    }
    for nonsense in [
        "",
        " ",
        "long long long",
        "short long",
        "unsigned signed",
        "long char",
        "unsigned foo",
    ] {
        assert!(
            matches!(
                btf.member(&cast(nonsense), &[]),
                Err(FieldError::NoType { .. })
            ),
            "{nonsense}"
        );
    }
}

#[test]
fn flexible_arrays_have_no_bound_and_no_size() {
    let mut b = Builder::new();
    let int = b.int("int", 4);
    let flex = b.array(int, int, 0);
    b.strukt("msg", 4, &[("len", int, 0), ("data", flex, 32)]);
    let btf = load(&b);
    expect(&btf, &cast("msg"), "data", 4, None, "int[]");
    expect(&btf, &cast("msg"), "data[100]", 404, Some(4), "int");
}

/// The containing word offered for a bitfield at `bit`, `bits` wide.
fn refused(btf: &Btf, field: &str) -> (u32, u64, u64, u64) {
    match btf.member(&cast("flags"), &path(field)) {
        Err(FieldError::Bitfield {
            bits,
            bit_offset,
            word_offset,
            word_size,
            ..
        }) => (bits, bit_offset, word_offset, word_size),
        other => panic!("{field}: {other:?}"),
    }
}

#[test]
fn bitfields_are_refused_with_the_containing_word_in_both_encodings() {
    // kind_flag: width << 24 | bit offset.
    let mut b = Builder::new();
    let uint = b.int("unsigned int", 4);
    let ulong = b.int("long unsigned int", 8);
    b.aggregate(
        kind::STRUCT,
        "flags",
        true,
        24,
        &[
            ("x", uint, 0),
            ("a", uint, (1 << 24) | 32),
            ("b", uint, (3 << 24) | 39),
            ("c", ulong, (20 << 24) | 60),
            ("d", ulong, (2 << 24) | 160),
        ],
    );
    let btf = load(&b);
    expect(&btf, &cast("flags"), "x", 0, Some(4), "unsigned int");
    assert_eq!(refused(&btf, "a"), (1, 32, 4, 1));
    // Bits 39..42 cross a byte: the aligned 2 bytes at 4 hold them.
    assert_eq!(refused(&btf, "b"), (3, 39, 4, 2));
    // Bits 60..80 cross the 4-byte word at 4 and the one at 8: the 8-byte word at 8 does not start early
    // enough, so the 8 bytes at 0 would not reach: the bytes spanned (7..10) are offered.
    assert_eq!(refused(&btf, "c"), (20, 60, 7, 3));
    assert_eq!(refused(&btf, "d"), (2, 160, 20, 1));
    let e = btf.member(&cast("flags"), &path("a")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`(flags).a` is a 1-bit bitfield (bit 32 of the object) and a breakpoint cannot watch single bits: \
         watch the 1-byte word holding it instead, at offset 4 (0x4) from the object's start"
    );

    // Without kind_flag: the member's INT type carries the width (and maybe a bit offset of its own).
    let mut b = Builder::new();
    let uint = b.int("unsigned int", 4);
    let two = b.int_bits("unsigned int", 4, 0, 2);
    let shifted = b.int_bits("unsigned int", 4, 3, 5);
    b.strukt(
        "flags",
        8,
        &[("x", uint, 0), ("a", two, 32), ("b", shifted, 34)],
    );
    let btf = load(&b);
    assert_eq!(refused(&btf, "a"), (2, 32, 4, 1));
    assert_eq!(refused(&btf, "b"), (5, 37, 4, 2));
    // A bitfield is an int: nothing below it either.
    assert!(matches!(
        btf.member(&cast("flags"), &path("a.z")),
        Err(FieldError::NotAStruct { .. })
    ));
}

#[test]
fn forward_declarations_are_incomplete_and_unknown_names_get_suggestions() {
    let mut b = kernel();
    b.add(kind::FWD, "opaque", false, 0, 0, &[]);
    b.add(kind::FWD, "opaque_u", true, 0, 0, &[]);
    let opaque = 18;
    b.typedef("opaque_t", opaque);
    b.strukt("holder", 8, &[("o", opaque, 0)]);
    let btf = load(&b);
    let e = btf.member(&strukt("opaque"), &path("x")).unwrap_err();
    assert!(
        matches!(e, FieldError::Incomplete { ref at, ref type_name } if at == "(struct opaque)" && type_name == "struct opaque"),
        "{e:?}"
    );
    let e = btf.member(&cast("opaque_u"), &[]).unwrap_err();
    assert!(
        matches!(e, FieldError::Incomplete { ref type_name, .. } if type_name == "union opaque_u"),
        "{e:?}"
    );
    // A union cast does not take the struct declaration.
    let union = CastType {
        kind: Some(CastKind::Union),
        name: "opaque".into(),
    };
    assert!(matches!(
        btf.member(&union, &[]),
        Err(FieldError::NoType { .. })
    ));

    match btf.member(&strukt("tsak"), &[]) {
        Err(e @ FieldError::NoType { .. }) => {
            assert_eq!(
                e.to_string(),
                "BTF has no type `struct tsak`; did you mean task?"
            );
        }
        other => panic!("{other:?}"),
    }
    // The right name with the wrong keyword: the spelling that works.
    match btf.member(&strukt("pid_t"), &[]) {
        Err(FieldError::NoType { name, suggestions }) => {
            assert_eq!(
                (name.as_str(), suggestions.as_slice()),
                ("struct pid_t", &["pid_t".to_string()][..])
            )
        }
        other => panic!("{other:?}"),
    }
    match btf.member(
        &CastType {
            kind: Some(CastKind::Union),
            name: "task".into(),
        },
        &[],
    ) {
        Err(FieldError::NoType { suggestions, .. }) => assert_eq!(suggestions, ["struct task"]),
        other => panic!("{other:?}"),
    }
    match btf.member(&cast("list"), &[]) {
        Err(FieldError::NoType { suggestions, .. }) => assert_eq!(suggestions, ["list_head"]),
        other => panic!("{other:?}"),
    }
    let e = btf.member(&cast("zzzzzz"), &[]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "BTF has no type `zzzzzz`: check the spelling (a module's types are in /sys/kernel/btf/MODULE)"
    );
}

#[test]
fn variables_in_data_sections() {
    let mut b = kernel();
    let task = 16;
    assert_eq!(b.next_id, 18, "the kernel builder's type ids moved");
    let var = b.add(kind::VAR, "runqueue", false, 0, task, &[1]);
    let other = b.add(kind::VAR, "orphan", false, 0, 1, &[1]);
    let _ = other;
    b.add(
        kind::DATASEC,
        ".data..percpu",
        false,
        1,
        0,
        &[var, 0x40, 184],
    );
    let btf = load(&b);
    assert_eq!(
        btf.variable("runqueue").unwrap(),
        BtfVariable {
            name: "runqueue".into(),
            section: ".data..percpu".into(),
            offset_in_section: 0x40,
            size: 184,
            type_name: "struct task".into(),
        }
    );
    assert_eq!(
        btf.variable_member("runqueue", &path("in.b")).unwrap(),
        info(16, Some(8), "long unsigned int")
    );
    let e = btf.variable_member("runqueue", &path("in.zz")).unwrap_err();
    assert!(
        matches!(e, FieldError::NoSuchField { ref at, .. } if at == "runqueue.in"),
        "{e:?}"
    );
    // A VAR in no DATASEC, and a name that is a type, not a variable.
    assert_eq!(btf.variable("orphan"), None);
    assert!(matches!(
        btf.variable_member("task", &[]),
        Err(FieldError::NoVariable { .. })
    ));
}

#[test]
fn split_btf_continues_the_base_ids_and_strings() {
    let base = kernel();
    let base_btf = Arc::new(load(&base));
    let mut m = Builder::split(&base);
    let first = m.next_id;
    // struct mod_state { struct list_head list; pid_t owner; u8 buf[4]; } with u8 new in the module.
    let u8t = m.int("unsigned char", 1);
    let buf = m.array(u8t, 1, 4);
    let st = m.strukt(
        "mod_state",
        24,
        &[("list", 5, 0), ("owner", 4, 128), ("buf", buf, 160)],
    );
    assert_eq!((u8t, st), (first, first + 2));
    let btf = Btf::from_bytes(m.build(), Path::new("mod.btf"), Some(base_btf.clone())).unwrap();
    let s = strukt("mod_state");
    expect_all(
        &btf,
        &s,
        &[
            ("list.prev", 8, Some(8), "struct list_head *"),
            ("owner", 16, Some(4), "pid_t"),
            ("buf[3]", 23, Some(1), "unsigned char"),
        ],
    );
    // Base types are found through the split one; the base alone does not know the module's.
    expect(&btf, &strukt("inner"), "b", 8, Some(8), "long unsigned int");
    assert!(matches!(
        base_btf.member(&s, &[]),
        Err(FieldError::NoType { .. })
    ));
    // A split blob referring past its own ids is corrupt, not a panic.
    let mut bad = Builder::split(&base);
    bad.strukt("bad", 4, &[("x", 999, 0)]);
    let btf = Btf::from_bytes(bad.build(), Path::new("bad.btf"), Some(base_btf)).unwrap();
    let e = btf.member(&cast("bad"), &path("x")).unwrap_err();
    assert!(matches!(e, FieldError::Load(Error::Btf { .. })), "{e:?}");
    assert!(e.to_string().contains("type id 999"), "{e}");
}

#[test]
fn type_cycles_end_in_errors() {
    let mut b = Builder::new();
    // typedef a -> typedef b -> typedef a.
    b.typedef("a", 2);
    b.typedef("b", 1);
    // A struct whose anonymous member is itself, and an array of itself.
    b.strukt("loop", 4, &[("", 3, 0)]);
    b.array(4, 4, 2);
    b.strukt("holder", 8, &[("arr", 4, 0)]);
    let btf = load(&b);
    let e = btf.member(&cast("a"), &path("x")).unwrap_err();
    assert!(e.to_string().contains("a cycle?"), "{e}");
    assert!(matches!(
        btf.member(&cast("loop"), &path("x")),
        Err(FieldError::NoSuchField { .. })
    ));
    // Thousands of anonymous members that are each the struct again: bounded by visits, not depth.
    let mut b = Builder::new();
    let members: Vec<(&str, u32, u32)> = (0..2000).map(|_| ("", 1, 0)).collect();
    b.strukt("wide", 4, &members);
    let wide = load(&b);
    let e = wide.member(&cast("wide"), &path("x")).unwrap_err();
    assert!(e.to_string().contains("visits more than"), "{e}");
    let _ = btf.member(&cast("holder"), &path("arr"));
    let _ = btf.member(&cast("holder"), &path("arr[1][1][1]"));
}

fn corrupt(data: Vec<u8>) -> String {
    match Btf::from_bytes(data, Path::new("bad.btf"), None) {
        Err(e @ Error::Btf { .. }) => e.to_string(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn corrupt_headers_and_truncated_sections_are_errors() {
    let good = kernel().build();
    assert!(corrupt(good[..10].to_vec()).contains("shorter than a BTF header"));
    let mut bad = good.clone();
    bad[0] = 0;
    assert!(corrupt(bad).contains("bad magic"));
    let mut bad = good.clone();
    bad[2] = 2;
    assert!(corrupt(bad).contains("BTF version 2"));
    let mut bad = good.clone();
    bad[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(corrupt(bad).contains("header length"));
    // Cut anywhere inside the sections.
    for cut in [good.len() - 1, good.len() - 30, HEADER_LEN + 5] {
        let msg = corrupt(good[..cut].to_vec());
        assert!(msg.contains("cut short"), "{cut}: {msg}");
    }
    // A type length that cuts a record short.
    let mut bad = good.clone();
    bad[12..16].copy_from_slice(&17u32.to_le_bytes());
    assert!(corrupt(bad).contains("type record 2 is cut short"));
    // A member count running past the type section.
    let mut b = Builder::new();
    b.add(kind::STRUCT, "s", false, 0xffff, 4, &[]);
    assert!(corrupt(b.build()).contains("runs past the end of the type section"));
    // An unknown kind.
    let mut b = Builder::new();
    b.add(25, "s", false, 0, 4, &[]);
    assert!(corrupt(b.build()).contains("kind 25"));
    let msg = Error::Btf {
        path: "x".into(),
        problem: crate::error::BtfProblem::TooManyIds,
    }
    .to_string();
    assert_eq!(
        msg,
        "x is not usable BTF type information: more types or strings than 32-bit ids can number; give the kernel's own /sys/kernel/btf/vmlinux (or a module's \
         /sys/kernel/btf/MODULE), or a copy of it that was not cut short"
    );
}

#[test]
fn overlong_names_read_as_bad_names() {
    let mut b = Builder::new();
    let long = "x".repeat(5000);
    let int = b.int(&long, 4);
    b.strukt("s", 4, &[(&long, int, 0)]);
    let btf = load(&b);
    let e = btf.member(&cast("s"), &path("y")).unwrap_err();
    assert!(
        matches!(e, FieldError::NoSuchField { ref available, .. } if available == &["<unreadable name>"]),
        "{e:?}"
    );
    expect(&btf, &cast("s"), "", 0, Some(4), "struct s");
}

#[test]
fn open_reads_only_regular_files_within_the_bound() {
    let e = Btf::open(Path::new("/dev/zero")).unwrap_err();
    assert!(
        matches!(
            e,
            Error::NotRegular {
                role: Role::Btf,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("give a BTF file, such as /sys/kernel/btf/vmlinux"),
        "{e}"
    );
    let dir = std::env::temp_dir().join(format!("ksymwatch-btf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("k.btf");
    std::fs::write(&p, kernel().build()).unwrap();
    let btf = Btf::open(&p).unwrap();
    assert_eq!(btf.path(), p);
    assert_eq!(btf.member(&cast("task"), &path("pid")).unwrap().offset, 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn cast_types_print_as_written() {
    assert_eq!(strukt("task_struct").to_string(), "struct task_struct");
    assert_eq!(cast("spinlock_t").to_string(), "spinlock_t");
    let u = CastType {
        kind: Some(CastKind::Union),
        name: "u".into(),
    };
    let e = CastType {
        kind: Some(CastKind::Enum),
        name: "e".into(),
    };
    assert_eq!(
        (u.to_string(), e.to_string()),
        ("union u".into(), "enum e".into())
    );
}

/// Every query a fuzzed blob gets.
fn poke(btf: &Btf) {
    for name in ["task", "inner", "list_head", "pid_t", "int", "inner_t", "a"] {
        for p in [
            "",
            "pid",
            "in.b",
            "l",
            "name[3]",
            "m[1][2]",
            "tasks.next",
            "cv",
            "it.a",
            "zz",
        ] {
            let _ = btf.member(&cast(name), &path(p)).map_err(|e| e.to_string());
        }
    }
    let _ = btf.variable("runqueue");
    let _ = btf.member(&cast("tsak"), &[]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any bytes changed anywhere in a valid blob: loading and every lookup return, without panicking.
    #[test]
    fn mutated_blobs_never_panic(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let mut data = kernel().build();
        for (at, byte) in edits {
            let at = at % data.len();
            data[at] = byte;
        }
        if let Ok(btf) = Btf::from_bytes(data, Path::new("fuzz.btf"), None) {
            poke(&btf);
        }
    }

    /// Words of the type section replaced by small or extreme values, which reach type ids and counts.
    #[test]
    fn mutated_type_words_never_panic(edits in proptest::collection::vec((any::<usize>(), prop_oneof![0u32..40, Just(u32::MAX), Just(0xffff), any::<u32>()]), 1..6)) {
        let b = kernel();
        let mut data = b.build();
        let words = b.types.len() / 4;
        for (at, w) in edits {
            let off = HEADER_LEN + 4 * (at % words);
            data[off..off + 4].copy_from_slice(&w.to_le_bytes());
        }
        if let Ok(btf) = Btf::from_bytes(data, Path::new("fuzz.btf"), None) {
            poke(&btf);
        }
    }
}

/// A loaded BTF is shared between threads behind an `Arc` (the vmlinux base of every module's).
#[test]
fn btf_is_send_and_sync() {
    fn shared<T: Send + Sync>() {}
    shared::<Btf>();
}

/// Several types of one name: different layouts are refused with each one's id, and `NAME#ID` picks one;
/// copies of one layout are one type, and so are typedefs of one name and size whose targets differ only
/// in spelling (this kernel's two `u8`: one for `__u8`, one for `unsigned char`).
#[test]
fn types_of_one_name_are_one_when_their_layouts_are() {
    let mut b = Builder::new();
    let int = b.int("int", 4);
    let long = b.int("long", 8);
    let first = b.strukt("irq_info", 8, &[("irq", int, 0), ("flags", int, 32)]);
    let second = b.strukt("irq_info", 16, &[("bus", long, 0), ("irq", long, 64)]);
    b.strukt("pair", 8, &[("a", int, 0), ("b", int, 32)]);
    b.strukt("pair", 8, &[("a", int, 0), ("b", int, 32)]);
    let uchar = b.int("unsigned char", 1);
    let u8a = b.typedef("__u8", uchar);
    b.typedef("u8", u8a);
    b.typedef("u8", uchar);
    let ushort = b.int("unsigned short", 2);
    b.typedef("w", uchar);
    b.typedef("w", ushort);
    let btf = load(&b);
    let e = btf.member(&strukt("irq_info"), &path("irq")).unwrap_err();
    assert!(matches!(e, FieldError::Ambiguous { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("#{first}")) && msg.contains(&format!("#{second}")),
        "{msg}"
    );
    let m = btf
        .member(&strukt(&format!("irq_info#{second}")), &path("irq"))
        .unwrap();
    assert_eq!((m.offset, m.size), (8, Some(8)));
    let m = btf
        .member(&strukt(&format!("irq_info#{first}")), &path("irq"))
        .unwrap();
    assert_eq!((m.offset, m.size), (0, Some(4)));
    assert_eq!(btf.member(&strukt("pair"), &path("b")).unwrap().offset, 4);
    assert_eq!(btf.member(&cast("u8"), &[]).unwrap().size, Some(1));
    // One name, two sizes: a watch's length depends on which, so it is refused.
    assert!(matches!(
        btf.member(&cast("w"), &[]),
        Err(FieldError::Ambiguous { .. })
    ));
}

#[test]
fn a_struct_field_offset_is_found_without_the_index() {
    let btf = load(&kernel());
    assert_eq!(btf.struct_field_offset("task", "name"), Some(32));
    assert_eq!(btf.struct_field_offset("task", "tasks"), Some(128));
    assert_eq!(btf.struct_field_offset("inner", "b"), Some(8));
    // Only direct members of a struct: not a nested path, not a union, not a missing name.
    assert_eq!(btf.struct_field_offset("task", "in.b"), None);
    assert_eq!(btf.struct_field_offset("task", "i"), None);
    assert_eq!(btf.struct_field_offset("task", "nope"), None);
    assert_eq!(btf.struct_field_offset("nope", "name"), None);
    let mut b = Builder::new();
    let uint = b.int("unsigned int", 4);
    b.aggregate(
        kind::STRUCT,
        "flags",
        true,
        8,
        &[("x", uint, 0), ("a", uint, (1 << 24) | 32)],
    );
    let flags = load(&b);
    assert_eq!(flags.struct_field_offset("flags", "x"), Some(0));
    assert_eq!(flags.struct_field_offset("flags", "a"), None, "a bitfield");
}

/// A FUNC's id is found by its name, and only a FUNC's (not a struct's, not a FUNC_PROTO's).
#[test]
fn a_func_id_is_found_by_name() {
    let mut b = Builder::new();
    let int = b.int("int", 4);
    b.aggregate(
        kind::STRUCT,
        "bpf_cast_to_kern_ctx",
        false,
        4,
        &[("x", int, 0)],
    );
    let proto = b.proto(int, &[("obj", int)]);
    let func = b.func("bpf_cast_to_kern_ctx", proto);
    let btf = load(&b);
    assert_eq!(btf.func_id("bpf_cast_to_kern_ctx"), Some(func));
    assert_eq!(btf.func_id("int"), None);
    assert_eq!(btf.func_id("nope"), None);
}

#[test]
fn the_running_kernels_task_comm_is_found_as_the_index_finds_it() {
    let path = std::path::Path::new(Btf::VMLINUX);
    let Ok(btf) = Btf::open(path) else {
        eprintln!("SKIP: no readable {}", path.display());
        return;
    };
    let indexed = btf
        .member(
            &strukt("task_struct"),
            &[crate::PathElem::Field("comm".into())],
        )
        .unwrap();
    assert_eq!(
        btf.struct_field_offset("task_struct", "comm"),
        Some(indexed.offset)
    );
}

impl Builder {
    /// A FUNC_PROTO returning `ret`, with `(name, type)` parameters (an empty name is an unnamed one).
    fn proto(&mut self, ret: u32, params: &[(&str, u32)]) -> u32 {
        let mut extra = Vec::new();
        for (n, t) in params {
            extra.extend([self.s(n), *t]);
        }
        self.add(
            kind::FUNC_PROTO,
            "",
            false,
            params.len() as u32,
            ret,
            &extra,
        )
    }

    fn func(&mut self, name: &str, proto: u32) -> u32 {
        self.add(kind::FUNC, name, false, 0, proto, &[])
    }
}

/// Three tracepoints as the kernel's BTF has them: `sched_process_fork` (its own event class: a record,
/// and `__traceiter_` naming its arguments), `sched_wakeup` (an event of a class of another name, on a
/// kernel without `__traceiter_`: no record, unnamed arguments) and `kmalloc` (an `unsigned long` and an
/// `int` among its arguments).
fn tracepoints() -> Builder {
    let mut b = Builder::new();
    let int = b.int("int", 4);
    let ulong = b.int("long unsigned int", 8);
    let chr = b.int("char", 1);
    let uint = b.int("unsigned int", 4);
    let void_ptr = b.ptr(0);
    let task = b.strukt("task_struct", 16, &[("pid", int, 0)]);
    let task_ptr = b.ptr(task);
    let cvoid = b.add(kind::CONST, "", false, 0, 0, &[]);
    let cvoid_ptr = b.ptr(cvoid);
    let entry = b.strukt("trace_entry", 8, &[("type", int, 0), ("pid", int, 32)]);
    let data = b.array(chr, int, 0);

    let fork = b.proto(0, &[("", void_ptr), ("", task_ptr), ("", task_ptr)]);
    let fork_ptr = b.ptr(fork);
    b.typedef("btf_trace_sched_process_fork", fork_ptr);
    let named = b.proto(
        int,
        &[
            ("__data", void_ptr),
            ("parent", task_ptr),
            ("child", task_ptr),
        ],
    );
    b.func("__traceiter_sched_process_fork", named);
    b.strukt(
        "trace_event_raw_sched_process_fork",
        24,
        &[
            ("ent", entry, 0),
            ("__data_loc_parent_comm", uint, 64),
            ("parent_pid", int, 96),
            ("child_pid", int, 128),
            ("__data", data, 192),
        ],
    );

    let wakeup = b.proto(0, &[("", void_ptr), ("", task_ptr)]);
    let wakeup_ptr = b.ptr(wakeup);
    b.typedef("btf_trace_sched_wakeup", wakeup_ptr);

    let kmalloc = b.proto(
        0,
        &[("", void_ptr), ("", ulong), ("", cvoid_ptr), ("", int)],
    );
    let kmalloc_ptr = b.ptr(kmalloc);
    b.typedef("btf_trace_kmalloc", kmalloc_ptr);
    let named = b.proto(
        int,
        &[
            ("__data", void_ptr),
            ("call_site", ulong),
            ("ptr", cvoid_ptr),
            ("node", int),
        ],
    );
    b.func("__traceiter_kmalloc", named);
    // Not a tracepoint: a typedef of the prefix's look that is not a pointer to a prototype.
    b.typedef("btf_trace_bogus", int);
    b
}

#[test]
fn a_tracepoints_arguments_and_record_come_from_btf() {
    let btf = load(&tracepoints());
    let fork = btf.tracepoint("sched_process_fork").unwrap().expect("fork");
    let names: Vec<Option<&str>> = fork.args.iter().map(|a| a.name.as_deref()).collect();
    assert_eq!(names, [Some("parent"), Some("child")]);
    let (index, child) = fork.arg("child").expect("child");
    assert_eq!(index, 1);
    assert!(child.pointer && child.holds_address());
    assert_eq!(child.type_name, "struct task_struct *");
    assert_eq!(child.pointee.as_deref(), Some("struct task_struct"));
    assert_eq!(child.declaration(), "struct task_struct *child");
    assert_eq!(child.size, Some(8));
    assert!(fork.arg("child_pid").is_none());
    let fields: Vec<&str> = fork
        .record
        .as_ref()
        .expect("a record")
        .iter()
        .map(|f| f.name.as_deref().unwrap())
        .collect();
    assert_eq!(
        fields,
        ["__data_loc_parent_comm", "parent_pid", "child_pid"]
    );
    let pid = fork.field("child_pid").expect("child_pid");
    assert!(!pid.pointer && !pid.holds_address());
    assert_eq!(pid.declaration(), "int child_pid");
    assert!(fork.field("parent_comm").is_some(), "a __data_loc string");
    assert!(fork.field("nope").is_none());
}

#[test]
fn arguments_without_names_and_events_of_another_class() {
    let btf = load(&tracepoints());
    let wakeup = btf.tracepoint("sched_wakeup").unwrap().expect("wakeup");
    assert_eq!(wakeup.args.len(), 1);
    assert_eq!(wakeup.args[0].name, None);
    assert_eq!(wakeup.args[0].declaration(), "struct task_struct *");
    assert_eq!(wakeup.record, None);
    assert!(wakeup.field("p").is_none() && wakeup.arg("p").is_none());

    let kmalloc = btf.tracepoint("kmalloc").unwrap().expect("kmalloc");
    let (i, ptr) = kmalloc.arg("ptr").expect("ptr");
    assert_eq!(i, 1);
    assert_eq!(ptr.pointee.as_deref(), Some("void"));
    let (_, site) = kmalloc.arg("call_site").expect("call_site");
    assert!(!site.pointer && site.holds_address(), "a 64-bit integer");
    let (_, node) = kmalloc.arg("node").expect("node");
    assert!(!node.holds_address());

    assert_eq!(btf.tracepoint("nope").unwrap(), None);
    assert_eq!(btf.tracepoint("bogus").unwrap(), None);
    assert_eq!(btf.tracepoint("trace_entry").unwrap(), None);
}

#[test]
fn unknown_tracepoints_get_the_nearest_names() {
    let btf = load(&tracepoints());
    let near = btf.suggest_tracepoints("sched_proces_fork");
    assert_eq!(near.first().map(String::as_str), Some("sched_process_fork"));
    assert!(near.len() <= 3);
    assert!(btf
        .suggest_tracepoints("kmaloc")
        .contains(&"kmalloc".to_string()));
}

#[test]
fn a_modules_tracepoint_is_found_in_its_split_btf() {
    let base = tracepoints();
    let mut m = Builder::split(&base);
    // The module's tracepoint takes a vmlinux type: `struct task_struct *` (id 7 of the base).
    let void_ptr = 5;
    let task_ptr = 7;
    let proto = m.proto(0, &[("", void_ptr), ("", task_ptr)]);
    let ptr = m.ptr(proto);
    m.typedef("btf_trace_mod_event", ptr);
    let named = m.proto(1, &[("__data", void_ptr), ("tsk", task_ptr)]);
    m.func("__traceiter_mod_event", named);
    let base = std::sync::Arc::new(load(&base));
    let module = Btf::from_bytes(m.build(), Path::new("mod.btf"), Some(base)).unwrap();
    let t = module.tracepoint("mod_event").unwrap().expect("mod_event");
    assert_eq!(t.args[0].declaration(), "struct task_struct *tsk");
    assert_eq!(
        module.tracepoint("sched_process_fork").unwrap(),
        None,
        "the base's own are the base's to give"
    );
}

#[test]
fn the_running_kernels_tracepoints_are_in_its_btf() {
    let path = std::path::Path::new(Btf::VMLINUX);
    let Ok(btf) = Btf::open(path) else {
        eprintln!("SKIP: no readable {}", path.display());
        return;
    };
    let Some(fork) = btf.tracepoint("sched_process_fork").unwrap() else {
        eprintln!("SKIP: this kernel's BTF has no btf_trace_sched_process_fork");
        return;
    };
    assert_eq!(fork.args.len(), 2);
    if fork.args[1].name.is_some() {
        assert_eq!(fork.arg("child").map(|(i, _)| i), Some(1));
    }
    assert_eq!(fork.args[1].pointee.as_deref(), Some("struct task_struct"));
}

/// Two threads asking at once get the one value the first open made, and the open runs once; a later
/// call takes it as it is.
#[test]
fn a_shared_value_is_opened_once_for_callers_at_the_same_time() {
    use super::running::Shared;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;
    let shared: Shared<Vec<u8>> = Shared::new();
    let opens = AtomicUsize::new(0);
    let start = Barrier::new(2);
    let open = || {
        opens.fetch_add(1, Ordering::SeqCst);
        // Slow enough that the other thread asks while this open runs.
        std::thread::sleep(std::time::Duration::from_millis(50));
        Ok::<_, ()>(vec![1, 2, 3])
    };
    let (a, b) = std::thread::scope(|s| {
        let ask = || {
            start.wait();
            shared.get_or_open(open).unwrap()
        };
        let a = s.spawn(ask);
        let b = s.spawn(ask);
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(opens.load(Ordering::SeqCst), 1);
    let later = shared.get_or_open(|| -> Result<_, ()> { panic!("opened again") });
    assert!(Arc::ptr_eq(&a, &later.unwrap()));
}

/// A failed open keeps nothing: each caller gets its own error, and a later open that succeeds is kept.
#[test]
fn a_failed_open_is_tried_again_by_the_next_caller() {
    let shared: super::running::Shared<u32> = super::running::Shared::new();
    assert_eq!(shared.get_or_open(|| Err("first")).unwrap_err(), "first");
    assert_eq!(shared.get_or_open(|| Err("second")).unwrap_err(), "second");
    assert_eq!(*shared.get_or_open(|| Ok::<_, &str>(7)).unwrap(), 7);
    assert_eq!(*shared.get_or_open(|| Err("kept")).unwrap(), 7);
}

/// The running kernel's BTF is one parse, wherever it is asked from.
#[test]
fn the_running_kernels_btf_is_parsed_once() {
    let Ok(first) = Btf::running() else {
        eprintln!("SKIP: no readable {}", Btf::VMLINUX);
        return;
    };
    let other = std::thread::spawn(Btf::running).join().unwrap().unwrap();
    assert!(Arc::ptr_eq(&first, &other));
    assert_eq!(first.path(), std::path::Path::new(Btf::VMLINUX));
}
