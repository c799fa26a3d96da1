//! The TARGET grammar: what the user asked to watch, parsed without looking anything up.
//!
//! ```text
//! TARGET := ['(' TYPE ')'] BASE [PATH] ['+' NUM] ['/' LEN]
//! TYPE   := ['struct' | 'union' | 'enum'] NAME ['*']
//! BASE   := [OBJECT ':'] SYMBOL ['@' N]  |  0xADDR
//! PATH   := ('.' FIELD | '[' NUM ']')*      (needs DWARF: --vmlinux, or a process binary built with -g;
//!                                             after a cast, the kernel's BTF)
//! NUM    := 0xHEX | DECIMAL                  LEN := 1 | 2 | 4 | 8
//! ```
//! Kernel symbol names may contain dots (`foo.isra.0`, `__key.12`), so a dotted name is kept whole here
//! and split into symbol and field path only when resolving, longest existing symbol first.
//!
//! `(TYPE)` casts the object at BASE to a type the kernel's BTF knows, so a heap object known only by its
//! address (`'(struct task_struct)0xffff888103a4c000.pid'`) has fields. The cast names the type *of the
//! object at BASE*, so a trailing `*` (`(struct sk_buff *)0x...`, as C would spell the pointer) changes
//! nothing, and `struct`/`union` may be left out. It comes first and holds no `:`, so it never collides with
//! `OBJECT:`.
//!
//! `OBJECT:` means what the watch looks in. In a process watch it names a file mapped by the process
//! (`libc.so.6:environ`, `libc:environ`, a path): everything before the last `:` (a path may hold one; a
//! symbol never does). In a kernel watch it names a kernel module (`e1000e:e1000_driver_name`,
//! [`Target::kernel_module`]): the symbol is looked up among that module's kallsyms symbols only.

use ksymwatch_symbols::{CastKind, CastType, PathElem};
use std::fmt;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Base {
    Symbol {
        /// `OBJECT:`, a process's mapped file or a kernel module to look in (see the module docs).
        object: Option<String>,
        /// The part before the first `.` or `[`.
        name: String,
        /// `name@N`: which of several same-named symbols.
        index: Option<usize>,
    },
    Address(u64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `(TYPE)`: the type of the object at the base, whose members the path names (from BTF).
    pub cast: Option<CastType>,
    pub base: Base,
    /// `.field` and `[N]` steps after the name (a dotted symbol name shows up here too; see module docs).
    pub path: Vec<PathElem>,
    pub offset: u64,
    pub len: Option<u8>,
    /// The text as given, for messages and headers.
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetError {
    pub input: String,
    pub message: String,
}

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // An empty input is said in words: a quoted empty token (``) reads as a formatting bug.
        if self.input.is_empty() {
            f.write_str("bad target: ")?;
        } else {
            write!(f, "bad target `{}`: ", self.input)?;
        }
        write!(
            f,
            "{}; expected [OBJECT:]SYMBOL[.FIELD][+OFF][/LEN], 0xADDR[/LEN] or '(TYPE)BASE.FIELD', LEN one of 1, 2, 4, 8",
            self.message
        )
    }
}

impl std::error::Error for TargetError {}

impl Target {
    /// `OBJECT:`, when the target names one.
    pub fn object(&self) -> Option<&str> {
        match &self.base {
            Base::Symbol { object, .. } => object.as_deref(),
            Base::Address(_) => None,
        }
    }

    /// `MODULE:`, what `OBJECT:` names in a kernel watch (see the module docs).
    pub fn kernel_module(&self) -> Option<&str> {
        self.object()
    }

    /// Candidate (symbol name, remaining path) splits, longest symbol name first: `a.b.c` tries `a.b.c`,
    /// then `a.b` + `.c`, then `a` + `.b.c`.
    pub fn symbol_splits(&self) -> Vec<(String, Vec<PathElem>)> {
        let Base::Symbol { name, .. } = &self.base else {
            return Vec::new();
        };
        let leading_fields = self
            .path
            .iter()
            .take_while(|e| matches!(e, PathElem::Field(_)))
            .count();
        (0..=leading_fields)
            .rev()
            .map(|k| {
                let mut full = name.clone();
                for e in &self.path[..k] {
                    full.push_str(&e.to_string());
                }
                (full, self.path[k..].to_vec())
            })
            .collect()
    }
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    input: &'a str,
}

impl Parser<'_> {
    fn err(&self, message: impl Into<String>) -> TargetError {
        TargetError {
            input: self.input.to_string(),
            message: message.into(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn take_while(&mut self, f: impl Fn(u8) -> bool) -> &str {
        let start = self.pos;
        while self.peek().is_some_and(&f) {
            self.pos += 1;
        }
        // The predicate only accepts ASCII, so the slice is on char boundaries.
        &self.input[start..self.pos]
    }

    /// The character at the cursor, whole (the input may hold multi-byte UTF-8).
    fn peek_char(&self) -> Option<char> {
        self.input[self.pos..].chars().next()
    }

    /// A number after the grammar's `after` character (`/`, `+`, `@`, `[`; `None` for an address). The
    /// token taken includes a leading sign, so `/-8` is refused as `-8`, the text the user typed, rather
    /// than as an empty token in front of an unexpected `-`.
    fn number(&mut self, what: &str, after: Option<char>) -> Result<u64, TargetError> {
        let start = self.pos;
        if matches!(self.peek(), Some(b'+' | b'-')) {
            self.pos += 1;
        }
        self.take_while(|c| c.is_ascii_alphanumeric());
        let text = &self.input[start..self.pos];
        if text.is_empty() {
            let article = if what.starts_with(['a', 'e', 'i', 'o', 'u']) {
                "an"
            } else {
                "a"
            };
            let message = match (after, self.peek_char()) {
                (Some(a), Some(c)) => {
                    format!("`{a}` must be followed by {article} {what}, not `{c}`")
                }
                (Some(a), None) => format!("`{a}` must be followed by {article} {what}"),
                (None, _) => format!("missing {what}"),
            };
            return Err(self.err(message));
        }
        let (sign, digits) = match text.as_bytes()[0] {
            s @ (b'+' | b'-') => (Some(s), &text[1..]),
            _ => (None, text),
        };
        let message = match (parse_number(digits), sign) {
            (Ok(n), None) => return Ok(n),
            (Err(NumberError::Invalid), _) => {
                format!("{what} `{text}` is not a number (decimal or 0xHEX)")
            }
            (Err(NumberError::Overflow), _) => format!("{what} `{text}` overflows 64 bits"),
            (Ok(_), Some(b'-')) => format!("{what} `{text}` cannot be negative"),
            (Ok(_), Some(_)) => format!("{what} `{text}` takes no sign"),
        };
        Err(self.err(message))
    }
}

/// Why a token is not a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumberError {
    /// Neither `0xHEX` nor decimal digits (a sign counts as neither).
    Invalid,
    /// Well-formed, but more than 64 bits.
    Overflow,
}

/// `0x1f` or `31`.
pub fn parse_number(text: &str) -> Result<u64, NumberError> {
    let (digits, radix) = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None => (text, 10),
    };
    // Checked here because from_str_radix would also take a leading `+`.
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(NumberError::Invalid);
    }
    // Only digits of the radix remain, so the one way left to fail is a value past u64::MAX.
    u64::from_str_radix(digits, radix).map_err(|_| NumberError::Overflow)
}

fn is_name_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$'
}

pub fn parse(input: &str) -> Result<Target, TargetError> {
    let mut p = Parser {
        s: input.as_bytes(),
        pos: 0,
        input,
    };
    if input.is_empty() {
        return Err(p.err("the TARGET argument is empty"));
    }
    let cast = if p.eat(b'(') {
        Some(cast(&mut p)?)
    } else {
        None
    };
    let object = object(&mut p)?;
    let mut base = base(&mut p, object)?;
    let path = member_path(&mut p, &base, cast.is_some())?;
    if p.eat(b'@') {
        let Base::Symbol { index, .. } = &mut base else {
            return Err(p.err("`@N` picks among same-named symbols; an address needs none"));
        };
        let n = p.number("symbol index", Some('@'))?;
        *index = Some(usize::try_from(n).map_err(|_| p.err("symbol index too large"))?);
    }
    let mut offset = 0;
    if p.eat(b'+') {
        offset = p.number("offset", Some('+'))?;
    }
    let len = length(&mut p)?;
    if let Some(c) = p.peek_char() {
        return Err(p.err(format!(
            "unexpected `{c}` at position {}",
            p.input[..p.pos].chars().count() + 1
        )));
    }
    // A typed address keeps `+OFF` for after its member path.
    if let (Base::Address(a), None) = (&base, &cast) {
        let a = *a;
        if offset != 0 {
            base = Base::Address(
                a.checked_add(offset)
                    .ok_or_else(|| p.err("address plus offset overflows"))?,
            );
            offset = 0;
        }
    }
    Ok(Target {
        cast,
        base,
        path,
        offset,
        len,
        text: input.to_string(),
    })
}

/// The `OBJECT` before the last `:` (a kernel module, or a file the process maps), if any; leaves `p`
/// after the `:`.
fn object(p: &mut Parser<'_>) -> Result<Option<String>, TargetError> {
    let start = p.pos;
    // Everything before the last `:` is the object; the rest is parsed as it would be alone.
    let input = p.input;
    Ok(match input[start..].rfind(':').map(|c| c + start) {
        Some(c) if c == start => {
            return Err(p.err("`:` must follow an OBJECT (a kernel module, or a file the process maps such as libc.so.6)"))
        }
        Some(colon) => {
            p.pos = colon + 1;
            Some(input[start..colon].to_string())
        }
        None => None,
    })
}

/// The base after the object: `0xADDR`, or a symbol (in `object`).
fn base(p: &mut Parser<'_>, object: Option<String>) -> Result<Base, TargetError> {
    let rest = &p.input[p.pos..];
    Ok(if rest.starts_with("0x") || rest.starts_with("0X") {
        if object.is_some() {
            return Err(p.err("an address needs no OBJECT:; give it alone as 0xADDR"));
        }
        Base::Address(p.number("address", None)?)
    } else {
        let first = p.peek().unwrap_or(0);
        if object.is_some() && p.peek().is_none() {
            return Err(p.err("`:` must be followed by a symbol"));
        }
        if !(first.is_ascii_alphabetic() || first == b'_') {
            return Err(p.err("a symbol starts with a letter or `_`, an address with 0x"));
        }
        let name = p.take_while(is_name_byte).to_string();
        Base::Symbol {
            object,
            name,
            index: None,
        }
    })
}

/// The `.FIELD` and `[N]` steps after the base; a raw address has them only with a cast.
fn member_path(p: &mut Parser<'_>, base: &Base, cast: bool) -> Result<Vec<PathElem>, TargetError> {
    let mut path = Vec::new();
    loop {
        if p.eat(b'.') {
            if matches!(base, Base::Address(_)) && !cast {
                return Err(p.err(
                    "a raw address has no fields; name its type first: '(struct TYPE)0xADDR.FIELD'",
                ));
            }
            let field = p.take_while(is_name_byte).to_string();
            if field.is_empty() {
                return Err(p.err("`.` must be followed by a field name"));
            }
            path.push(PathElem::Field(field));
        } else if p.eat(b'[') {
            if matches!(base, Base::Address(_)) && !cast {
                return Err(
                    p.err("a raw address has no elements; name its type first: '(TYPE)0xADDR[N]'")
                );
            }
            let i = p.number("index", Some('['))?;
            if !p.eat(b']') {
                return Err(p.err("`[` without a closing `]`"));
            }
            path.push(PathElem::Index(i));
        } else {
            break;
        }
    }
    Ok(path)
}

/// `/LEN`, if given: 1, 2, 4 or 8 bytes.
fn length(p: &mut Parser<'_>) -> Result<Option<u8>, TargetError> {
    let mut len = None;
    if p.eat(b'/') {
        let n = p.number("length", Some('/'))?;
        match n {
            1 | 2 | 4 | 8 => len = Some(n as u8),
            _ => {
                return Err(p.err(format!(
                    "length {n} is not 1, 2, 4 or 8 (the sizes a debug register can watch)"
                )))
            }
        }
    }
    Ok(len)
}

/// `TYPE)` after the opening `(`: an optional `struct`/`union`/`enum`, a name, an optional `*`.
fn cast(p: &mut Parser<'_>) -> Result<CastType, TargetError> {
    let close = p.input[p.pos..]
        .find(')')
        .ok_or_else(|| p.err("`(` opens a type cast without a closing `)`"))?;
    let inner = &p.input[p.pos..p.pos + close];
    p.pos += close + 1;
    let inner = inner.trim();
    let inner = match inner.strip_suffix('*') {
        Some(rest) if rest.trim_end().ends_with('*') => {
            return Err(p.err(format!(
                "`({inner})` is a pointer to a pointer; the cast names the type of the object at the address, \
                 so read the pointer and give its value as the address"
            )))
        }
        Some(rest) => rest.trim_end(),
        None => inner,
    };
    // Qualifiers change nothing a watch sees: `(const struct T)` is `(struct T)`.
    let words: Vec<&str> = inner
        .split_whitespace()
        .filter(|w| !matches!(*w, "const" | "volatile"))
        .collect();
    const SCALAR: [&str; 6] = ["unsigned", "signed", "long", "int", "short", "char"];
    let scalar;
    let (kind, name) = match words.as_slice() {
        ["struct", n] => (Some(CastKind::Struct), *n),
        ["union", n] => (Some(CastKind::Union), *n),
        ["enum", n] => (Some(CastKind::Enum), *n),
        [k @ ("struct" | "union" | "enum")] => {
            return Err(p.err(format!(
                "`({inner})` names no type after `{k}`; write '({k} NAME)BASE.FIELD'"
            )))
        }
        [n] => (None, *n),
        // `unsigned long`, `long long int`: C's integer names, which BTF spells its own way.
        many if many.len() > 1 && many.iter().all(|w| SCALAR.contains(w)) => {
            scalar = many.join(" ");
            (None, scalar.as_str())
        }
        [] => return Err(p.err("`()` names no type; write '(struct TYPE)BASE.FIELD'")),
        _ => {
            return Err(p.err(format!(
                "`({inner})` is not a type name; write one name, with struct, union or enum when it is one \
                 (`(struct task_struct)`, `(spinlock_t)`, `(unsigned long)`)"
            )))
        }
    };
    // `NAME#ID` picks one of several BTF types of one name by its BTF id.
    let (base_name, id) = match name.split_once('#') {
        Some((n, id)) if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) => (n, Some(id)),
        Some(_) => {
            return Err(p.err(format!(
                "`{name}`: `#` must be followed by a BTF type id (`(struct irq_info#33652)`)"
            )))
        }
        None => (name, None),
    };
    let _ = id;
    let valid = |n: &str| {
        n.split(' ').all(|w| {
            w.as_bytes()
                .first()
                .is_some_and(|&b| b.is_ascii_alphabetic() || b == b'_')
                && w.bytes().all(is_name_byte)
        })
    };
    if !valid(base_name) {
        return Err(p.err(format!("`{name}` in the cast is not a C type name")));
    }
    if p.peek().is_none() {
        return Err(p.err("the cast must be followed by the object's address or symbol"));
    }
    Ok(CastType {
        kind,
        name: name.to_string(),
    })
}

/// A cast target's member in its type, as BTF gives it: where it is from the object's start (the
/// target's `+OFF` included) and how big, whatever the object's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub cast: CastType,
    /// Bytes from the object's start to the watched ones: the member's offset plus `+OFF`.
    pub offset: u64,
    /// Bytes from there to the end of the member (`None`: BTF does not know, `T[]`).
    pub size: Option<u64>,
    /// The member's C type; `None` after `+OFF`, which lands inside it.
    pub type_name: Option<String>,
    pub btf: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(name: &str) -> Base {
        Base::Symbol {
            object: None,
            name: name.into(),
            index: None,
        }
    }

    #[test]
    fn plain_forms() {
        let t = parse("jiffies").unwrap();
        assert_eq!((t.base, t.offset, t.len), (sym("jiffies"), 0, None));
        let t = parse("__start_init_stack+0x3e00").unwrap();
        assert_eq!((t.base, t.offset), (sym("__start_init_stack"), 0x3e00));
        let t = parse("pid_max+4/4").unwrap();
        assert_eq!((t.offset, t.len), (4, Some(4)));
        let t = parse("0xffffffff83003e00/8").unwrap();
        assert_eq!(
            (t.base, t.len),
            (Base::Address(0xffffffff83003e00), Some(8))
        );
        let t = parse("0x1000+0x10").unwrap();
        assert_eq!((t.base, t.offset), (Base::Address(0x1010), 0));
    }

    #[test]
    fn paths_and_indices() {
        let t = parse("init_uts_ns.name.nodename").unwrap();
        assert_eq!(t.base, sym("init_uts_ns"));
        assert_eq!(
            t.path,
            vec![
                PathElem::Field("name".into()),
                PathElem::Field("nodename".into())
            ]
        );
        let t = parse("sym.field[3].x/4").unwrap();
        assert_eq!(t.path[1], PathElem::Index(3));
        assert_eq!(t.len, Some(4));
        let t = parse("dup_static@1").unwrap();
        assert_eq!(
            t.base,
            Base::Symbol {
                object: None,
                name: "dup_static".into(),
                index: Some(1)
            }
        );
    }

    #[test]
    fn dotted_symbol_names_split_longest_first() {
        let t = parse("foo.isra.0").unwrap();
        let splits = t.symbol_splits();
        assert_eq!(splits[0], ("foo.isra.0".to_string(), vec![]));
        assert_eq!(splits.last().unwrap().0, "foo");
        assert_eq!(splits.len(), 3);
    }

    #[test]
    fn bad_input() {
        for bad in [
            "",
            "+4",
            "jiffies/3",
            "jiffies/16",
            "jiffies+",
            "jiffies+zz",
            "0x",
            "0xzz",
            "sym[1",
            "sym.",
            "0x10.x",
            "a b",
            "jiffies/8x",
            "0x10@1",
            "9abc",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.to_string().contains("bad target"), "{bad}: {e}");
        }
        assert!(parse("jiffies/3")
            .unwrap_err()
            .message
            .contains("1, 2, 4 or 8"));
    }

    fn message(input: &str) -> String {
        parse(input).unwrap_err().message
    }

    #[test]
    fn a_signed_number_is_quoted_with_its_sign() {
        assert_eq!(message("x/-8"), "length `-8` cannot be negative");
        assert_eq!(message("x/+8"), "length `+8` takes no sign");
        assert_eq!(message("x@-1"), "symbol index `-1` cannot be negative");
        assert_eq!(message("x+-1"), "offset `-1` cannot be negative");
        assert_eq!(message("x[-1]"), "index `-1` cannot be negative");
        assert_eq!(
            message("x/-zz"),
            "length `-zz` is not a number (decimal or 0xHEX)"
        );
        assert_eq!(
            message("x/-"),
            "length `-` is not a number (decimal or 0xHEX)"
        );
    }

    #[test]
    fn a_missing_number_names_the_character_it_should_follow() {
        assert_eq!(message("x+"), "`+` must be followed by an offset");
        assert_eq!(message("x/"), "`/` must be followed by a length");
        assert_eq!(message("x@"), "`@` must be followed by a symbol index");
        assert_eq!(message("x["), "`[` must be followed by an index");
        assert_eq!(message("x/ 8"), "`/` must be followed by a length, not ` `");
        assert_eq!(
            parse("").unwrap_err().to_string(),
            "bad target: the TARGET argument is empty; expected [OBJECT:]SYMBOL[.FIELD][+OFF][/LEN], \
             0xADDR[/LEN] or '(TYPE)BASE.FIELD', LEN one of 1, 2, 4, 8"
        );
    }

    #[test]
    fn more_than_64_bits_is_an_overflow_not_garbage() {
        assert_eq!(
            message("0xffffffffffffffffff"),
            "address `0xffffffffffffffffff` overflows 64 bits"
        );
        assert_eq!(
            message("x+18446744073709551616"),
            "offset `18446744073709551616` overflows 64 bits"
        );
        assert_eq!(
            message("x@0x10000000000000000"),
            "symbol index `0x10000000000000000` overflows 64 bits"
        );
        // The largest value still fits.
        assert_eq!(
            parse("0xffffffffffffffff").unwrap().base,
            Base::Address(u64::MAX)
        );
        assert_eq!(parse_number("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse_number("+5"), Err(NumberError::Invalid));
        assert_eq!(parse_number("0x+5"), Err(NumberError::Invalid));
    }

    #[test]
    fn an_object_prefix_names_a_mapped_file() {
        let t = parse("libc.so.6:environ").unwrap();
        assert_eq!(
            t.base,
            Base::Symbol {
                object: Some("libc.so.6".into()),
                name: "environ".into(),
                index: None
            }
        );
        assert_eq!(t.object(), Some("libc.so.6"));
        let t = parse("libc:counters.pts[2].y@1+4/4").unwrap();
        assert_eq!(t.object(), Some("libc"));
        assert_eq!(t.path.len(), 3);
        assert_eq!((t.offset, t.len), (4, Some(4)));
        // A path may hold a `:` of its own; the symbol never does.
        let t = parse("/opt/a:b/libx.so:var").unwrap();
        assert_eq!(
            (t.object(), t.symbol_splits()[0].0.as_str()),
            (Some("/opt/a:b/libx.so"), "var")
        );
        assert_eq!(parse("jiffies").unwrap().object(), None);
        assert_eq!(parse("0x1000").unwrap().object(), None);
    }

    #[test]
    fn an_object_prefix_needs_both_sides_and_a_symbol() {
        assert_eq!(
            message(":environ"),
            "`:` must follow an OBJECT (a kernel module, or a file the process maps such as libc.so.6)"
        );
        assert_eq!(message("libc:"), "`:` must be followed by a symbol");
        assert_eq!(
            message("libc:0x1000"),
            "an address needs no OBJECT:; give it alone as 0xADDR"
        );
        assert_eq!(
            message("libc:9x"),
            "a symbol starts with a letter or `_`, an address with 0x"
        );
        // Positions count from the start of the whole target.
        assert_eq!(message("libc:x y"), "unexpected ` ` at position 7");
    }

    #[test]
    fn a_kernel_watch_reads_the_object_as_a_module() {
        let t = parse("e1000e:e1000_driver_name").unwrap();
        assert_eq!(t.kernel_module(), Some("e1000e"));
        assert_eq!(t.symbol_splits()[0].0, "e1000_driver_name");
        assert_eq!(parse("jiffies").unwrap().kernel_module(), None);
    }

    #[test]
    fn a_multibyte_character_is_quoted_whole() {
        assert_eq!(message("xé"), "unexpected `é` at position 2");
    }

    fn cast_of(input: &str) -> CastType {
        parse(input).unwrap().cast.unwrap()
    }

    #[test]
    fn a_cast_names_the_type_of_the_object_at_the_base() {
        let t = parse("(struct task_struct)0xffff888103a4c000.se.vruntime").unwrap();
        assert_eq!(
            t.cast,
            Some(CastType {
                kind: Some(CastKind::Struct),
                name: "task_struct".into()
            })
        );
        assert_eq!(t.base, Base::Address(0xffff888103a4c000));
        assert_eq!(
            t.path,
            vec![
                PathElem::Field("se".into()),
                PathElem::Field("vruntime".into())
            ]
        );
        // struct/union are optional, and a trailing `*` is the C spelling of the same object's pointer.
        assert_eq!(cast_of("(task_struct)0x1000.pid").kind, None);
        assert_eq!(cast_of("(struct sk_buff *)0x1000.len").name, "sk_buff");
        assert_eq!(cast_of("( struct sk_buff* )0x1000.len").name, "sk_buff");
        assert_eq!(
            cast_of("(union bpf_attr)0x1000").kind,
            Some(CastKind::Union)
        );
        assert_eq!(cast_of("(spinlock_t)0x1000").name, "spinlock_t");
        // A symbol base, with an index, an element, an offset and a length after the path.
        let t = parse("(struct task_struct)init_task.comm[2]+1/1").unwrap();
        assert_eq!(t.base, sym("init_task"));
        assert_eq!(t.path[1], PathElem::Index(2));
        assert_eq!((t.offset, t.len), (1, Some(1)));
        // A typed address keeps its `+OFF` for after the path instead of folding it into the address.
        let t = parse("(task_struct)0x1000.pid+2/2").unwrap();
        assert_eq!((t.base, t.offset), (Base::Address(0x1000), 2));
        assert_eq!(parse("(task_struct)0x1000").unwrap().path, vec![]);
    }

    #[test]
    fn a_cast_does_not_collide_with_an_object_prefix() {
        let t = parse("(struct foo)libc.so.6:counters.x").unwrap();
        assert_eq!(t.cast.as_ref().map(|c| c.name.as_str()), Some("foo"));
        assert_eq!(t.object(), Some("libc.so.6"));
        assert_eq!(
            message("(struct foo):x"),
            "`:` must follow an OBJECT (a kernel module, or a file the process maps such as libc.so.6)"
        );
        assert_eq!(parse("libc:x").unwrap().cast, None);
    }

    #[test]
    fn a_bad_cast_says_what_is_wrong() {
        assert_eq!(
            message("(struct task_struct 0x10"),
            "`(` opens a type cast without a closing `)`"
        );
        assert_eq!(
            message("()0x10"),
            "`()` names no type; write '(struct TYPE)BASE.FIELD'"
        );
        assert!(message("(struct sk_buff **)0x10").contains("pointer to a pointer"));
        assert!(message("(unsigned long x)0x10").contains("is not a type name"));
        assert!(message("(struct)0x10.a").contains("names no type after `struct`"));
        assert!(message("(irq_info#x)0x10.a").contains("BTF type id"));
        assert_eq!(
            parse("(const struct task_struct)0x10.pid")
                .unwrap()
                .cast
                .map(|c| c.name),
            Some("task_struct".into())
        );
        assert_eq!(
            parse("(unsigned long)0x10").unwrap().cast.map(|c| c.name),
            Some("unsigned long".into())
        );
        assert_eq!(
            message("(struct 9x)0x10"),
            "`9x` in the cast is not a C type name"
        );
        assert_eq!(
            message("(struct x)"),
            "the cast must be followed by the object's address or symbol"
        );
        assert!(message("0x10.x").contains("name its type first"));
        assert!(message("0x10[1]").contains("name its type first"));
    }
}
