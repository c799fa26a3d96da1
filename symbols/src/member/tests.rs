//! The shared walk on a tiny in-memory type graph: each feature of a path (anonymous members, arrays of
//! arrays, typedef and qualifier peeling, bitfields, declarations) and each way a path fails, without
//! DWARF or BTF in between.

use std::borrow::Cow;

use super::graph::{peel, size, Kind, Member, Qualifier, TypeGraph};
use super::name::type_name;
use super::walk::{containing_word, walk, Landing};
use super::{FieldError, MemberInfo};
use crate::error::{BtfProblem, Cycle, DwarfProblem, Error};
use crate::path::PathElem;

/// One type; a handle is its index in [`Graph::nodes`], and 0 is void.
enum Node {
    Void,
    Record {
        kind: Kind,
        name: &'static str,
        size: u64,
        /// `(name, type, bit offset, bitfield width)`
        members: Vec<(&'static str, usize, u64, Option<u32>)>,
        declared: bool,
    },
    Refers(Kind, &'static str, usize),
    Array(usize, Option<u64>),
    Named(&'static str, u64),
}

struct Graph {
    nodes: Vec<Node>,
}

impl Graph {
    fn new() -> Graph {
        Graph {
            nodes: vec![Node::Void],
        }
    }
    fn add(&mut self, n: Node) -> usize {
        self.nodes.push(n);
        self.nodes.len() - 1
    }
    fn int(&mut self, name: &'static str, size: u64) -> usize {
        self.add(Node::Named(name, size))
    }
    fn strukt(
        &mut self,
        name: &'static str,
        size: u64,
        members: &[(&'static str, usize, u64)],
    ) -> usize {
        let members = members
            .iter()
            .map(|&(n, t, o)| (n, t, o * 8, None))
            .collect();
        self.record(Kind::Struct, name, size, members)
    }
    fn record(
        &mut self,
        kind: Kind,
        name: &'static str,
        size: u64,
        members: Vec<(&'static str, usize, u64, Option<u32>)>,
    ) -> usize {
        self.add(Node::Record {
            kind,
            name,
            size,
            members,
            declared: false,
        })
    }
    fn refers(&mut self, kind: Kind, name: &'static str, to: usize) -> usize {
        self.add(Node::Refers(kind, name, to))
    }
    fn array(&mut self, elem: usize, len: Option<u64>) -> usize {
        self.add(Node::Array(elem, len))
    }
    fn node(&self, t: usize) -> Result<&Node, FieldError> {
        self.nodes.get(t).ok_or(FieldError::Load(Error::Btf {
            path: "graph".into(),
            problem: BtfProblem::TypeIdOutOfRange {
                id: t as u32,
                last: self.nodes.len() as u32,
            },
        }))
    }
}

impl TypeGraph for Graph {
    type Type = usize;
    type Members<'s> = std::vec::IntoIter<Result<Member<'s, usize>, FieldError>>;

    fn kind(&self, t: usize) -> Result<Kind, FieldError> {
        Ok(match self.node(t)? {
            Node::Void => Kind::Void,
            Node::Record { kind, .. } | Node::Refers(kind, ..) => *kind,
            Node::Array(..) => Kind::Array,
            Node::Named(..) => Kind::Named,
        })
    }
    fn name(&self, t: usize) -> Result<Cow<'_, str>, FieldError> {
        Ok(Cow::Borrowed(match self.node(t)? {
            Node::Record { name, .. } | Node::Refers(_, name, _) | Node::Named(name, _) => name,
            Node::Void | Node::Array(..) => "",
        }))
    }
    fn target(&self, t: usize) -> Result<usize, FieldError> {
        Ok(match self.node(t)? {
            Node::Refers(_, _, to) | Node::Array(to, _) => *to,
            _ => 0,
        })
    }
    fn array_len(&self, t: usize) -> Result<Option<u64>, FieldError> {
        Ok(match self.node(t)? {
            Node::Array(_, len) => *len,
            _ => None,
        })
    }
    fn own_size(&self, t: usize) -> Result<Option<u64>, FieldError> {
        Ok(match self.node(t)? {
            Node::Record { declared: true, .. } => None,
            Node::Record { size, .. } | Node::Named(_, size) => Some(*size),
            Node::Refers(Kind::Pointer, ..) => Some(8),
            _ => None,
        })
    }
    fn is_declaration(&self, t: usize) -> Result<bool, FieldError> {
        Ok(matches!(self.node(t)?, Node::Record { declared: true, .. }))
    }
    fn members(&self, t: usize) -> Result<Self::Members<'_>, FieldError> {
        let members = match self.node(t)? {
            Node::Record { members, .. } => members.as_slice(),
            _ => &[],
        };
        let out: Vec<_> = members
            .iter()
            .map(|&(name, ty, bit_offset, bits)| {
                Ok(Member {
                    name: Cow::Borrowed(name),
                    ty,
                    bit_offset,
                    bits,
                })
            })
            .collect();
        Ok(out.into_iter())
    }
    fn corrupt(&self, t: usize, cycle: Cycle) -> FieldError {
        FieldError::Load(Error::Dwarf {
            path: "graph".into(),
            problem: DwarfProblem::Cycle {
                die: t as u64,
                cycle,
            },
        })
    }
}

fn path(s: &str) -> Vec<PathElem> {
    crate::testing::member_path(s)
}

fn exact(g: &Graph, ty: usize, p: &str) -> Result<MemberInfo, FieldError> {
    walk(g, ty, "x".into(), &path(p))?.exact(g)
}

fn widened(g: &Graph, ty: usize, p: &str) -> Result<MemberInfo, FieldError> {
    walk(g, ty, "x".into(), &path(p))?.widened(g)
}

fn info(offset: u64, size: Option<u64>, type_name: &str) -> MemberInfo {
    MemberInfo {
        offset,
        size,
        type_name: type_name.into(),
    }
}

/// `struct outer { long id; union { int as_int; struct { short lo, hi; } halves; }; int grid[3][4];
/// const volatile ulong_t counter; struct point *ptr; unsigned flags : 3; int (*cb)(); }`
fn outer() -> (Graph, usize) {
    let mut g = Graph::new();
    let long = g.int("long", 8);
    let int = g.int("int", 4);
    let short = g.int("short", 2);
    let ulong = g.int("long unsigned int", 8);
    let halves = g.strukt("", 4, &[("lo", short, 0), ("hi", short, 2)]);
    let union = g.record(
        Kind::Union,
        "",
        4,
        vec![("as_int", int, 0, None), ("halves", halves, 0, None)],
    );
    let row = g.array(int, Some(4));
    let grid = g.array(row, Some(3));
    let ulong_t = g.refers(Kind::Typedef, "ulong_t", ulong);
    let volatile = g.refers(Kind::Qualifier(Qualifier::Volatile), "", ulong_t);
    let counter = g.refers(Kind::Qualifier(Qualifier::Const), "", volatile);
    let point = g.strukt("point", 8, &[("x", int, 0), ("y", int, 4)]);
    let ptr = g.refers(Kind::Pointer, "", point);
    let uint = g.int("unsigned int", 4);
    let func = g.refers(Kind::Function, "", int);
    let cb = g.refers(Kind::Pointer, "", func);
    let outer = g.record(
        Kind::Struct,
        "outer",
        96,
        vec![
            ("id", long, 0, None),
            ("", union, 64, None),
            ("grid", grid, 128, None),
            ("counter", counter, 512, None),
            ("ptr", ptr, 576, None),
            ("flags", uint, 645, Some(3)),
            ("cb", cb, 704, None),
        ],
    );
    (g, outer)
}

#[test]
fn fields_arrays_and_anonymous_members_land_where_c_puts_them() {
    let (g, outer) = outer();
    assert_eq!(
        exact(&g, outer, "").unwrap(),
        info(0, Some(96), "struct outer")
    );
    assert_eq!(exact(&g, outer, "id").unwrap(), info(0, Some(8), "long"));
    // Through the anonymous union, then a named struct inside it.
    assert_eq!(exact(&g, outer, "as_int").unwrap(), info(8, Some(4), "int"));
    assert_eq!(
        exact(&g, outer, "halves.hi").unwrap(),
        info(10, Some(2), "short")
    );
    assert_eq!(
        exact(&g, outer, "grid").unwrap(),
        info(16, Some(48), "int[3][4]")
    );
    assert_eq!(
        exact(&g, outer, "grid[1]").unwrap(),
        info(32, Some(16), "int[4]")
    );
    assert_eq!(
        exact(&g, outer, "grid[2][3]").unwrap(),
        info(60, Some(4), "int")
    );
    let through_pointer = exact(&g, outer, "ptr.x").unwrap_err().to_string();
    assert!(
        through_pointer.contains("pointers are not followed"),
        "{through_pointer}"
    );
    // The same walk ends the same in both ways when no bitfield is involved.
    for p in ["id", "halves.lo", "grid[1][2]", "counter", "ptr"] {
        assert_eq!(
            exact(&g, outer, p).unwrap(),
            widened(&g, outer, p).unwrap(),
            "{p}"
        );
    }
}

#[test]
fn types_are_spelled_as_c_writes_them() {
    let (g, outer) = outer();
    let name = |p: &str| exact(&g, outer, p).unwrap().type_name;
    assert_eq!(name("counter"), "const volatile ulong_t");
    assert_eq!(name("ptr"), "struct point *");
    assert_eq!(name("cb"), "int (*)()");
    assert_eq!(name("halves"), "struct <anonymous>");
    let mut g = Graph::new();
    let char_t = g.int("char", 1);
    let p = g.refers(Kind::Pointer, "", char_t);
    let const_p = g.refers(Kind::Qualifier(Qualifier::Const), "", p);
    let tagged = g.refers(Kind::Qualifier(Qualifier::Tag), "", const_p);
    let flex = g.array(tagged, None);
    let atomic = g.refers(Kind::Qualifier(Qualifier::Atomic), "", char_t);
    let func = g.refers(Kind::Function, "", 0);
    assert_eq!(type_name(&g, const_p).unwrap(), "char * const");
    // A type tag is no part of the C type.
    assert_eq!(type_name(&g, tagged).unwrap(), "char * const");
    assert_eq!(type_name(&g, flex).unwrap(), "char * const[]");
    assert_eq!(type_name(&g, atomic).unwrap(), "_Atomic char");
    assert_eq!(type_name(&g, func).unwrap(), "void ()");
    assert_eq!(type_name(&g, 0).unwrap(), "void");
}

#[test]
fn typedefs_and_qualifiers_are_looked_through_for_size_and_steps() {
    let mut g = Graph::new();
    let int = g.int("int", 4);
    let s = g.strukt("s", 8, &[("a", int, 0), ("b", int, 4)]);
    let s_t = g.refers(Kind::Typedef, "s_t", s);
    let c = g.refers(Kind::Qualifier(Qualifier::Const), "", s_t);
    let arr = g.array(c, Some(2));
    let arr_t = g.refers(Kind::Typedef, "pair_t", arr);
    assert_eq!(peel(&g, c).unwrap(), s);
    assert_eq!(size(&g, arr_t).unwrap(), Some(16));
    assert_eq!(exact(&g, arr_t, "[1].b").unwrap(), info(12, Some(4), "int"));
    assert_eq!(exact(&g, arr_t, "").unwrap(), info(0, Some(16), "pair_t"));
    assert_eq!(exact(&g, arr_t, "[1]").unwrap().type_name, "const s_t");
}

#[test]
fn a_bitfield_is_refused_exactly_and_widened_otherwise() {
    let (g, outer) = outer();
    // `flags` is 3 bits at bit 645: byte 80, bits 5..8.
    let e = exact(&g, outer, "flags").unwrap_err();
    let FieldError::Bitfield {
        at,
        bits,
        bit_offset,
        word_offset,
        word_size,
    } = e
    else {
        panic!("{e:?}")
    };
    assert_eq!((at.as_str(), bits, bit_offset), ("x.flags", 3, 645));
    assert_eq!((word_offset, word_size), (80, 1));
    assert_eq!(
        widened(&g, outer, "flags").unwrap(),
        info(80, Some(1), "unsigned int : 3")
    );
    assert_eq!(containing_word(13, 6), (0, 4));
    assert_eq!(containing_word(52, 8), (6, 2));
    assert_eq!(containing_word(33, 20), (4, 4));
    assert_eq!(containing_word(8, 56), (0, 8));
    // Straddling two 8-byte words: the bytes spanned.
    assert_eq!(containing_word(60, 10), (7, 2));
}

#[test]
fn a_misspelled_field_names_what_is_there() {
    let (g, outer) = outer();
    let e = exact(&g, outer, "halfs").unwrap_err();
    let FieldError::NoSuchField {
        at,
        field,
        type_name,
        available,
    } = e
    else {
        panic!("{e:?}")
    };
    assert_eq!((at.as_str(), field.as_str()), ("x", "halfs"));
    assert_eq!(type_name, "struct outer");
    // Members of anonymous members are fields too.
    assert_eq!(
        available,
        ["id", "as_int", "halves", "grid", "counter", "ptr", "flags", "cb"]
    );
    // A struct with many fields names the ones close to what was typed.
    let mut g = Graph::new();
    let int = g.int("int", 4);
    const NAMES: [&str; 30] = [
        "a0",
        "a1",
        "a2",
        "a3",
        "a4",
        "a5",
        "a6",
        "a7",
        "a8",
        "a9",
        "b0",
        "b1",
        "b2",
        "b3",
        "b4",
        "b5",
        "b6",
        "b7",
        "b8",
        "b9",
        "c0",
        "c1",
        "c2",
        "c3",
        "c4",
        "c5",
        "nr_running",
        "c7",
        "c8",
        "c9",
    ];
    let members = NAMES
        .iter()
        .enumerate()
        .map(|(i, n)| (*n, int, i as u64 * 4))
        .collect::<Vec<_>>();
    let big = g.strukt("big", 120, &members);
    let msg = exact(&g, big, "nr_runing").unwrap_err().to_string();
    assert!(msg.contains("did you mean nr_running"), "{msg}");
    assert!(msg.contains("30 fields"), "{msg}");
}

#[test]
fn steps_that_do_not_apply_say_what_the_object_is() {
    let (g, outer) = outer();
    assert!(matches!(
        exact(&g, outer, "id.x").unwrap_err(),
        FieldError::NotAStruct { at, type_name, .. } if at == "x.id" && type_name == "long"
    ));
    assert!(matches!(
        exact(&g, outer, "id[0]").unwrap_err(),
        FieldError::NotAnArray { at, index: 0, .. } if at == "x.id"
    ));
    assert!(matches!(
        exact(&g, outer, "grid[3]").unwrap_err(),
        FieldError::IndexOutOfRange { index: 3, len: 3, type_name, .. } if type_name == "int[3][4]"
    ));
    assert!(matches!(
        exact(&g, outer, "grid[0][4]").unwrap_err(),
        FieldError::IndexOutOfRange { at, len: 4, .. } if at == "x.grid[0]"
    ));
}

#[test]
fn declarations_and_unbounded_arrays() {
    let mut g = Graph::new();
    let int = g.int("int", 4);
    let fwd = g.add(Node::Record {
        kind: Kind::Struct,
        name: "opaque",
        size: 0,
        members: Vec::new(),
        declared: true,
    });
    let flex = g.array(int, None);
    let holder = g.strukt(
        "holder",
        8,
        &[("o", fwd, 0), ("n", int, 0), ("data", flex, 4)],
    );
    assert!(matches!(
        exact(&g, holder, "o.x").unwrap_err(),
        FieldError::Incomplete { at, type_name } if at == "x.o" && type_name == "struct opaque"
    ));
    // `T[]` has no length to check and no size; exactly it is a size-less answer, widened (DWARF,
    // whose declaration may lack what the definition has) it is incomplete.
    assert_eq!(
        exact(&g, holder, "data[1000]").unwrap(),
        info(4004, Some(4), "int")
    );
    assert_eq!(exact(&g, holder, "data").unwrap(), info(4, None, "int[]"));
    assert!(matches!(
        widened(&g, holder, "data").unwrap_err(),
        FieldError::Incomplete { .. }
    ));
    assert!(matches!(
        widened(&g, holder, "o").unwrap_err(),
        FieldError::Incomplete { .. }
    ));
    // An array of declared structs has no stride.
    let fwds = g.array(fwd, Some(2));
    assert!(matches!(
        exact(&g, fwds, "[1]").unwrap_err(),
        FieldError::Incomplete { type_name, .. } if type_name == "struct opaque"
    ));
    // Void has no size, and is not incomplete.
    assert_eq!(widened(&g, 0, "").unwrap(), info(0, None, "void"));
}

/// A zero-length array (`int data[0]`, the GNU flexible array idiom many kernel structs still use) bounds
/// nothing, as `T[]` does: gcc's DWARF gives it `DW_AT_count 0`, BTF gives both 0 elements. A DWARF walk
/// refused `hz.z.data[2]` of a live program ("0 elements (valid: 0..=0)", even `[0]`), where a BTF cast of
/// the same struct reached it.
#[test]
fn a_zero_length_array_is_unbounded_like_a_flexible_one() {
    let mut g = Graph::new();
    let int = g.int("int", 4);
    let zero = g.array(int, Some(0));
    let holder = g.strukt("zero", 4, &[("n", int, 0), ("data", zero, 4)]);
    assert_eq!(
        exact(&g, holder, "data[2]").unwrap(),
        info(12, Some(4), "int")
    );
    assert_eq!(
        exact(&g, holder, "data[0]").unwrap(),
        info(4, Some(4), "int")
    );
}

#[test]
fn cycles_end_in_errors() {
    let mut g = Graph::new();
    // typedef a -> typedef b -> typedef a.
    let a = g.refers(Kind::Typedef, "a", 2);
    g.refers(Kind::Typedef, "b", a);
    let e = exact(&g, a, "x").unwrap_err();
    assert!(matches!(e, FieldError::Load(_)), "{e:?}");
    assert!(e.to_string().contains("a cycle?"), "{e}");
    // An array of itself.
    let arr = g.array(g.nodes.len(), Some(2));
    assert!(size(&g, arr)
        .unwrap_err()
        .to_string()
        .contains("nests arrays"));
    // Its name is cut off, at 17 bounds per level and 17 levels.
    let name = type_name(&g, arr).unwrap();
    assert!(name.starts_with("...[2]"), "{name}");
    assert_eq!(name.matches("[2]").count(), 17 * 17);
    // A struct whose anonymous member is itself: depth-bounded, so a plain "no such field".
    let looped = g.record(Kind::Struct, "loop", 4, vec![("", g.nodes.len(), 0, None)]);
    assert!(matches!(
        exact(&g, looped, "x"),
        Err(FieldError::NoSuchField { .. })
    ));
    // Thousands of anonymous members that are each the struct again: bounded by visits.
    let mut g = Graph::new();
    let wide = g.record(Kind::Struct, "wide", 4, vec![("", 1, 0, None); 2000]);
    let e = exact(&g, wide, "x").unwrap_err();
    assert!(e.to_string().contains("visits more than"), "{e}");
}

#[test]
fn a_models_bitfield_hook_sees_only_the_member_found() {
    /// Marks every member it is shown as a 1-bit field, to show when it runs.
    struct Marking(Graph);
    impl TypeGraph for Marking {
        type Type = usize;
        type Members<'s> = <Graph as TypeGraph>::Members<'s>;
        fn kind(&self, t: usize) -> Result<Kind, FieldError> {
            self.0.kind(t)
        }
        fn name(&self, t: usize) -> Result<Cow<'_, str>, FieldError> {
            self.0.name(t)
        }
        fn target(&self, t: usize) -> Result<usize, FieldError> {
            self.0.target(t)
        }
        fn array_len(&self, t: usize) -> Result<Option<u64>, FieldError> {
            self.0.array_len(t)
        }
        fn own_size(&self, t: usize) -> Result<Option<u64>, FieldError> {
            self.0.own_size(t)
        }
        fn is_declaration(&self, t: usize) -> Result<bool, FieldError> {
            self.0.is_declaration(t)
        }
        fn members(&self, t: usize) -> Result<Self::Members<'_>, FieldError> {
            self.0.members(t)
        }
        fn settle_bitfield<'s>(
            &'s self,
            m: Member<'s, usize>,
        ) -> Result<Member<'s, usize>, FieldError> {
            Ok(Member {
                bit_offset: m.bit_offset + 1,
                bits: Some(1),
                ..m
            })
        }
        fn corrupt(&self, t: usize, cycle: Cycle) -> FieldError {
            self.0.corrupt(t, cycle)
        }
    }
    let (g, outer) = outer();
    let g = Marking(g);
    // `halves` and `hi` are settled (one bit each), inside the anonymous union and then moved by its
    // offset; the anonymous union searched through is not.
    let land: Landing<usize> = walk(&g, outer, "x".into(), &path("halves.hi")).unwrap();
    assert_eq!((land.bit_offset, land.bits), (64 + 1 + 16 + 1, Some(1)));
}
