//! The TARGET grammar: what the user asked to watch, parsed without looking anything up.
//!
//! ```text
//! TARGET := BASE [PATH] ['+' NUM] ['/' LEN]
//! BASE   := SYMBOL ['@' N]  |  0xADDR
//! PATH   := ('.' FIELD | '[' NUM ']')*      (needs DWARF: --vmlinux)
//! NUM    := 0xHEX | DECIMAL                  LEN := 1 | 2 | 4 | 8
//! ```
//! Kernel symbol names may contain dots (`foo.isra.0`, `__key.12`), so a dotted name is kept whole here
//! and split into symbol and field path only when resolving, longest existing symbol first.

use ksymwatch_symbols::PathElem;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Base {
    Symbol {
        /// The part before the first `.` or `[`.
        name: String,
        /// `name@N`: which of several same-named symbols.
        index: Option<usize>,
    },
    Address(u64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
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
        write!(
            f,
            "bad target `{}`: {}; expected SYMBOL[.FIELD][+OFF][/LEN] or 0xADDR[/LEN], LEN one of 1, 2, 4, 8",
            self.input, self.message
        )
    }
}

impl std::error::Error for TargetError {}

impl Target {
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

    fn number(&mut self, what: &str) -> Result<u64, TargetError> {
        let text = self.take_while(|c| c.is_ascii_alphanumeric()).to_string();
        parse_number(&text).ok_or_else(|| {
            self.err(format!(
                "{what} `{text}` is not a number (decimal or 0xHEX)"
            ))
        })
    }
}

/// `0x1f` or `31`; `None` if neither (or out of range).
pub fn parse_number(text: &str) -> Option<u64> {
    if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        if hex.is_empty() {
            return None;
        }
        u64::from_str_radix(hex, 16).ok()
    } else if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        text.parse().ok()
    } else {
        None
    }
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
        return Err(p.err("it is empty"));
    }
    let base = if input.starts_with("0x") || input.starts_with("0X") {
        Base::Address(p.number("address")?)
    } else {
        let first = p.peek().unwrap_or(0);
        if !(first.is_ascii_alphabetic() || first == b'_') {
            return Err(p.err("a symbol starts with a letter or `_`, an address with 0x"));
        }
        let name = p.take_while(is_name_byte).to_string();
        Base::Symbol { name, index: None }
    };
    let mut path = Vec::new();
    loop {
        if p.eat(b'.') {
            if matches!(base, Base::Address(_)) {
                return Err(p.err("a raw address has no fields"));
            }
            let field = p.take_while(is_name_byte).to_string();
            if field.is_empty() {
                return Err(p.err("`.` must be followed by a field name"));
            }
            path.push(PathElem::Field(field));
        } else if p.eat(b'[') {
            if matches!(base, Base::Address(_)) {
                return Err(p.err("a raw address has no elements"));
            }
            let i = p.number("index")?;
            if !p.eat(b']') {
                return Err(p.err("`[` without a closing `]`"));
            }
            path.push(PathElem::Index(i));
        } else {
            break;
        }
    }
    let mut base = base;
    if p.eat(b'@') {
        let Base::Symbol { index, .. } = &mut base else {
            return Err(p.err("`@N` picks among same-named symbols; an address needs none"));
        };
        let n = p.number("symbol index")?;
        *index = Some(usize::try_from(n).map_err(|_| p.err("symbol index too large"))?);
    }
    let mut offset = 0;
    if p.eat(b'+') {
        offset = p.number("offset")?;
    }
    let mut len = None;
    if p.eat(b'/') {
        let n = p.number("length")?;
        match n {
            1 | 2 | 4 | 8 => len = Some(n as u8),
            _ => {
                return Err(p.err(format!(
                    "length {n} is not 1, 2, 4 or 8 (the sizes a debug register can watch)"
                )))
            }
        }
    }
    if let Some(c) = p.peek() {
        return Err(p.err(format!(
            "unexpected `{}` at position {}",
            c as char,
            p.pos + 1
        )));
    }
    if let Base::Address(a) = base {
        if offset != 0 {
            base = Base::Address(
                a.checked_add(offset)
                    .ok_or_else(|| p.err("address plus offset overflows"))?,
            );
            offset = 0;
        }
    }
    Ok(Target {
        base,
        path,
        offset,
        len,
        text: input.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(name: &str) -> Base {
        Base::Symbol {
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
}
