//! The `--if EXPR` condition language: which hits of a watch are worth a sample, decided in the kernel at
//! the trap from the value just stored and the one before it. This module only parses and checks the text;
//! the BPF program that evaluates the tree is generated elsewhere, and the semantics below are what it
//! implements.
//!
//! ```text
//! expr    := and ('||' and)*
//! and     := primary ('&&' primary)*
//! primary := '(' expr ')' | 'changed' | compare
//! compare := operand OP operand          (at least one operand is `value` or `old`, not both the same)
//! operand := ['(s)'] ('value' | 'old') | NUMBER
//! OP      := '==' | '!=' | '<' | '<=' | '>' | '>=' | '&'
//! NUMBER  := ['-'] (DECIMAL | 0xHEX | 0bBINARY)      `_` may separate digits; -2^63 ..= 2^64-1
//! ```
//! `&&` binds tighter than `||`; both associate to the left. Whitespace may go anywhere between tokens.
//! Keywords are case-sensitive (lowercase). `CONST OP value` is stored flipped (`5 < value` is
//! `value > 5`), so the left side of a [`Compare`] is always `value` or `old`.
//!
//! Semantics:
//! - `value` is the integer the store left at the watched address, `len` bytes (1, 2, 4 or 8) in the
//!   machine's byte order; `old` is the `value` of the previous hit on the same watch.
//! - Comparisons are unsigned 64-bit, on the operands zero-extended from the watch length. `(s)` on either
//!   operand makes the comparison signed: both operands are sign-extended from the watch length.
//! - A constant means its bit pattern at the watch length ([`Condition::constant_bits`]): on a 1-byte
//!   watch `value == -1` is `value == 0xff`, and `(s)value < 0xff` is `(s)value < -1`. Constants that do
//!   not fit the watch are refused ([`Condition::check_width`]) rather than silently truncated.
//! - `value & MASK` is true when the value has any bit of MASK set (`value & old`: any bit in common).
//! - `old` is unknown on a watch's first hit (unless the program seeds it): a comparison that reads
//!   `old` is then false, while `changed` (`value != old`) is true, so the first store always counts as
//!   a change.
//!
//! Errors carry the 1-based column (in characters) of the offending token and say what to write
//! instead; the command line prefixes them with the `--if` text.

use std::fmt;

/// How deep parentheses may nest: deep enough for any hand-written condition, shallow enough that the
/// recursive parser (and the code generator walking the tree) cannot overflow the stack.
const MAX_DEPTH: usize = 32;

/// What a comparison reads: the value this store wrote, or the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Value,
    Old,
}

/// The right-hand side of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rhs {
    /// A number as written (sign included), and its 1-based column for width errors.
    Const {
        value: i128,
        column: usize,
    },
    Side(Side),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// `value & MASK` is true when any bit of MASK is set.
    BitAnd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compare {
    pub left: Side,
    pub op: Op,
    pub right: Rhs,
    /// `(s)` was given on either operand: compare sign-extended values.
    pub signed: bool,
    /// 1-based column of the comparison's first token (its `(s)`, if it starts with one).
    pub column: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// `value != old`; true when `old` is unknown.
    Changed,
    Compare(Compare),
    And(Box<Condition>, Box<Condition>),
    Or(Box<Condition>, Box<Condition>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionError {
    /// 1-based, in characters of the text; one past the last character for "unexpected end".
    pub column: usize,
    pub message: String,
}

impl fmt::Display for ConditionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "column {}: {}", self.column, self.message)
    }
}

impl std::error::Error for ConditionError {}

impl Side {
    /// The keyword: `value` or `old`.
    pub fn name(self) -> &'static str {
        match self {
            Side::Value => "value",
            Side::Old => "old",
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Op {
    /// How the operator is written: `==`, `&`, ...
    pub fn symbol(self) -> &'static str {
        match self {
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::BitAnd => "&",
        }
    }

    /// The operator with its operands swapped: `a OP b` is `b OP.flipped() a`.
    pub fn flipped(self) -> Op {
        match self {
            Op::Lt => Op::Gt,
            Op::Le => Op::Ge,
            Op::Gt => Op::Lt,
            Op::Ge => Op::Le,
            Op::Eq | Op::Ne | Op::BitAnd => self,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.symbol())
    }
}

impl Condition {
    /// Every constant fits a `len`-byte value (len 1, 2, 4, 8). Unsigned compare: 0..2^(8len), or a
    /// negative constant that fits the signed range (it means its two's complement at that width, e.g.
    /// -1 == 0xff for len 1). Signed compare: the signed range, or a non-negative constant < 2^(8len)
    /// (0xff for len 1 means -1). Both come to -2^(8len-1) ..< 2^(8len). The error points at the
    /// constant's column and names the width.
    pub fn check_width(&self, len: u8) -> Result<(), ConditionError> {
        let bits = width_bits(len);
        let min = -(1i128 << (bits - 1));
        let max = (1i128 << bits) - 1;
        let signed_max = (1i128 << (bits - 1)) - 1;
        let mut result = Ok(());
        self.for_each_compare(&mut |c| {
            let (Ok(()), Rhs::Const { value, column }) = (&result, c.right) else {
                return;
            };
            let message = if value < min || value > max {
                format!(
                    "{value} does not fit the {len}-byte watch (constants from {min} to {max}); use a \
                     smaller constant or a longer watch (TARGET/LEN)"
                )
            } else if c.signed && c.op != Op::BitAnd && value > signed_max {
                // Truncated to the width it would be a negative number: `(s)value < 200` on one byte
                // would silently mean `< -56`.
                format!(
                    "{value} does not fit a signed {len}-byte value ({min} to {signed_max}); compare unsigned \
                     (drop `(s)`), or watch more bytes (TARGET/LEN)"
                )
            } else {
                return;
            };
            result = Err(ConditionError { column, message });
        });
        result
    }

    /// The constant as the 64-bit pattern the kernel compares with: truncated to `len` bytes, and
    /// sign-extended to 64 bits when `signed` (the loaded value is extended the same way, zero- or
    /// sign-). Meant for constants [`check_width`](Self::check_width) accepted; others are truncated
    /// all the same.
    pub fn constant_bits(value: i128, len: u8, signed: bool) -> u64 {
        let bits = width_bits(len);
        // `as u64` keeps the low 64 bits of the two's complement, which is the truncation wanted.
        let low = value as u64;
        if bits == 64 {
            return low;
        }
        let shift = 64 - bits;
        if signed {
            (((low << shift) as i64) >> shift) as u64
        } else {
            low & ((1u64 << bits) - 1)
        }
    }

    /// The condition's verdict on `value` and `old` (`None`: unknown) of a `len`-byte watch, with the
    /// semantics the kernel's program implements (module docs): the tracer's check of a verdict the kernel
    /// made on the value it read at the trap.
    pub fn holds(&self, value: u64, old: Option<u64>, len: u8) -> bool {
        match self {
            Condition::Changed => old.is_none_or(|o| o != value),
            Condition::Compare(c) => {
                let side = |s: Side| match s {
                    Side::Value => Some(value),
                    Side::Old => old,
                };
                let bits = width_bits(len);
                let extend = |v: u64| {
                    let v = if bits == 64 {
                        v
                    } else {
                        v & ((1u64 << bits) - 1)
                    };
                    Condition::constant_bits(i128::from(v), len, c.signed)
                };
                let right = match c.right {
                    Rhs::Const { value, .. } => {
                        Some(Condition::constant_bits(value, len, c.signed))
                    }
                    Rhs::Side(s) => side(s).map(extend),
                };
                let (Some(l), Some(r)) = (side(c.left).map(extend), right) else {
                    return false;
                };
                let ord = if c.signed {
                    (l as i64).cmp(&(r as i64))
                } else {
                    l.cmp(&r)
                };
                match c.op {
                    Op::Eq => ord.is_eq(),
                    Op::Ne => ord.is_ne(),
                    Op::Lt => ord.is_lt(),
                    Op::Le => ord.is_le(),
                    Op::Gt => ord.is_gt(),
                    Op::Ge => ord.is_ge(),
                    Op::BitAnd => l & r != 0,
                }
            }
            Condition::And(a, b) => a.holds(value, old, len) && b.holds(value, old, len),
            Condition::Or(a, b) => a.holds(value, old, len) || b.holds(value, old, len),
        }
    }

    /// Whether evaluating the condition needs the previous value: any `old` operand, or `changed`.
    pub fn uses_old(&self) -> bool {
        match self {
            Condition::Changed => true,
            Condition::Compare(c) => c.left == Side::Old || c.right == Rhs::Side(Side::Old),
            Condition::And(a, b) | Condition::Or(a, b) => a.uses_old() || b.uses_old(),
        }
    }

    /// Every comparison, in the order of the text.
    pub fn for_each_compare(&self, f: &mut impl FnMut(&Compare)) {
        match self {
            Condition::Changed => {}
            Condition::Compare(c) => f(c),
            Condition::And(a, b) | Condition::Or(a, b) => {
                a.for_each_compare(f);
                b.for_each_compare(f);
            }
        }
    }
}

/// Bits in a `len`-byte watch. Callers pass 1, 2, 4 or 8 (a watch's length); anything else is clamped
/// to 1..=8 bytes so that no shift below can overflow.
fn width_bits(len: u8) -> u32 {
    debug_assert!(matches!(len, 1 | 2 | 4 | 8), "watch length {len}");
    u32::from(len.clamp(1, 8)) * 8
}

impl fmt::Display for Compare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.signed {
            f.write_str("(s)")?;
        }
        write!(f, "{} {} ", self.left, self.op)?;
        match self.right {
            Rhs::Side(side) => write!(f, "{side}"),
            Rhs::Const { value, .. } => write_constant(f, value),
        }
    }
}

/// Hex like the tool's value output, except small numbers (the same in both) and negative ones (which
/// are read as signed quantities) in decimal.
fn write_constant(f: &mut fmt::Formatter<'_>, value: i128) -> fmt::Result {
    if (0..10).contains(&value) || value < 0 {
        write!(f, "{value}")
    } else {
        write!(f, "{value:#x}")
    }
}

/// Canonical spelling: one space around operators, `(s)` on the left operand, constants in hex from 10
/// up and in decimal below (negative ones too), parentheses only where the tree needs them to parse back the same (an `||` under
/// an `&&`, and a right operand of the same operator, since both associate to the left).
impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn part(f: &mut fmt::Formatter<'_>, c: &Condition, parens: bool) -> fmt::Result {
            if parens {
                write!(f, "({c})")
            } else {
                write!(f, "{c}")
            }
        }
        match self {
            Condition::Changed => f.write_str("changed"),
            Condition::Compare(c) => write!(f, "{c}"),
            Condition::And(a, b) => {
                part(f, a, matches!(**a, Condition::Or(..)))?;
                f.write_str(" && ")?;
                part(f, b, matches!(**b, Condition::Or(..) | Condition::And(..)))
            }
            Condition::Or(a, b) => {
                part(f, a, false)?;
                f.write_str(" || ")?;
                part(f, b, matches!(**b, Condition::Or(..)))
            }
        }
    }
}

/// Parses `--if` text into a tree (see the module docs for the grammar). Constants are checked against
/// the 64-bit range only; [`Condition::check_width`] checks them against the watch.
pub fn parse(text: &str) -> Result<Condition, ConditionError> {
    let mut p = Parser {
        chars: text.chars().collect(),
        pos: 0,
        depth: 0,
    };
    let first = p.peek()?;
    if first.token == Token::End {
        return Err(error(
            first.column,
            "the condition is empty; write e.g. `value == 0`, `old != value` or `changed`",
        ));
    }
    let condition = p.expr()?;
    let next = p.peek()?;
    match next.token {
        Token::End => Ok(condition),
        Token::RParen => Err(error(
            next.column,
            "unmatched `)`; remove it or open it with `(` earlier",
        )),
        _ => Err(error(
            next.column,
            format!(
                "unexpected {} after a complete condition; join conditions with `&&` or `||`",
                p.describe(&next)
            ),
        )),
    }
}

fn error(column: usize, message: impl Into<String>) -> ConditionError {
    ConditionError {
        column,
        message: message.into(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    LParen,
    RParen,
    AndAnd,
    OrOr,
    Op(Op),
    Word(String),
    Number(i128),
    /// A character no token starts with; the parser says what it expected instead.
    Other(char),
    End,
}

#[derive(Debug, Clone)]
struct Lexed {
    token: Token,
    /// 1-based column of the first character.
    column: usize,
    /// Index (in chars) just past the token.
    end: usize,
}

/// An operand as written, before the comparison decides which side it goes on.
#[derive(Debug, Clone, Copy)]
enum Operand {
    Side(Side),
    Const(i128),
}

/// Where an operand stands, for its error messages.
#[derive(Debug, Clone, Copy)]
enum Position {
    /// The first operand of a comparison, where `changed` and `(` would also do.
    First,
    /// After this operator.
    After(Op),
}

/// A recursive-descent parser over the text's characters, lexing on demand so that the first error in
/// the text is the one reported.
struct Parser {
    chars: Vec<char>,
    pos: usize,
    depth: usize,
}

impl Parser {
    /// The token at the cursor, without consuming it.
    fn peek(&self) -> Result<Lexed, ConditionError> {
        self.lex_at(self.pos)
    }

    fn bump(&mut self, lexed: &Lexed) {
        self.pos = lexed.end;
    }

    /// The token as the user wrote it, quoted, or "the end of the condition".
    fn describe(&self, lexed: &Lexed) -> String {
        if lexed.token == Token::End {
            return "the end of the condition".to_string();
        }
        let text: String = self.chars[lexed.column - 1..lexed.end].iter().collect();
        format!("`{text}`")
    }

    fn lex_at(&self, start: usize) -> Result<Lexed, ConditionError> {
        let chars = &self.chars;
        let mut i = start;
        while chars.get(i).is_some_and(|c| c.is_whitespace()) {
            i += 1;
        }
        let column = i + 1;
        let lexed = |token, len| {
            Ok(Lexed {
                token,
                column,
                end: i + len,
            })
        };
        let Some(&c) = chars.get(i) else {
            return lexed(Token::End, 0);
        };
        let next = chars.get(i + 1).copied();
        match (c, next) {
            ('(', _) => lexed(Token::LParen, 1),
            (')', _) => lexed(Token::RParen, 1),
            ('&', Some('&')) => lexed(Token::AndAnd, 2),
            ('&', _) => lexed(Token::Op(Op::BitAnd), 1),
            ('|', Some('|')) => lexed(Token::OrOr, 2),
            ('|', _) => Err(error(
                column,
                "`|` is not an operator; use `||` to join conditions, or `&` to test bits",
            )),
            ('=', Some('=')) => lexed(Token::Op(Op::Eq), 2),
            ('=', Some('<')) => Err(error(column, "`=<` is not an operator; use `<=`")),
            ('=', Some('>')) => Err(error(column, "`=>` is not an operator; use `>=`")),
            ('=', _) => Err(error(column, "`=` is not a comparison; use `==`")),
            ('!', Some('=')) => lexed(Token::Op(Op::Ne), 2),
            ('!', _) => Err(error(
                column,
                "`!` (not) is not supported; use `!=` or swap the comparison (`value < 5` for \
                 not `value >= 5`)",
            )),
            ('<', Some('=')) => lexed(Token::Op(Op::Le), 2),
            ('<', Some('>')) => Err(error(column, "`<>` is not an operator; use `!=`")),
            ('<', _) => lexed(Token::Op(Op::Lt), 1),
            ('>', Some('=')) => lexed(Token::Op(Op::Ge), 2),
            ('>', _) => lexed(Token::Op(Op::Gt), 1),
            ('-', _) | ('0'..='9', _) => self.lex_number(i),
            (c, _) if c.is_ascii_alphabetic() || c == '_' => {
                let len = chars[i..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
                    .count();
                let word: String = chars[i..i + len].iter().collect();
                match word.to_ascii_lowercase().as_str() {
                    "and" => Err(error(
                        column,
                        format!("`{word}` is not an operator; use `&&`"),
                    )),
                    "or" => Err(error(
                        column,
                        format!("`{word}` is not an operator; use `||`"),
                    )),
                    "not" => Err(error(
                        column,
                        format!(
                            "`{word}` is not supported; use `!=` or swap the comparison \
                             (`value < 5` for not `value >= 5`)"
                        ),
                    )),
                    _ => lexed(Token::Word(word), len),
                }
            }
            (c, _) => lexed(Token::Other(c), 1),
        }
    }

    /// A number starting at `i` (a digit or `-`). The token runs over every letter, digit and `_` that
    /// follows, so `0x1g` or `12ab` is refused whole rather than split into a number and a word.
    fn lex_number(&self, i: usize) -> Result<Lexed, ConditionError> {
        let chars = &self.chars;
        let column = i + 1;
        let negative = chars[i] == '-';
        let digits_start = i + usize::from(negative);
        if !chars.get(digits_start).is_some_and(|c| c.is_ascii_digit()) {
            return Err(error(
                column,
                "`-` must be followed directly by digits, as in `-1`; arithmetic is not supported",
            ));
        }
        let end = digits_start
            + chars[digits_start..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
                .count();
        let text: String = chars[i..end].iter().collect();
        let digits: String = chars[digits_start..end].iter().collect();
        let magnitude = match parse_magnitude(&digits) {
            Magnitude::Invalid => {
                return Err(error(
                    column,
                    format!(
                        "`{text}` is not a number; write decimal (`500`), hex (`0x1f4`) or binary \
                         (`0b101`), with `_` between digits if you like"
                    ),
                ))
            }
            Magnitude::TooBig => None,
            Magnitude::Ok(m) => Some(m),
        };
        let value = match (magnitude, negative) {
            (Some(m), false) if m <= u128::from(u64::MAX) => Some(m as i128),
            (Some(m), true) if m <= 1u128 << 63 => Some(-(m as i128)),
            _ => None,
        };
        match value {
            Some(value) => Ok(Lexed {
                token: Token::Number(value),
                column,
                end,
            }),
            None => Err(error(
                column,
                format!(
                    "`{text}` is out of range; constants go from -2^63 ({}) to 2^64-1 ({:#x})",
                    i64::MIN,
                    u64::MAX
                ),
            )),
        }
    }

    fn expr(&mut self) -> Result<Condition, ConditionError> {
        self.left_assoc(Token::OrOr, Self::and, Condition::Or)
    }

    fn and(&mut self) -> Result<Condition, ConditionError> {
        self.left_assoc(Token::AndAnd, Self::primary, Condition::And)
    }

    /// `operand (joiner operand)*`, folded to the left: `||` and `&&` differ only in their token, what
    /// they join and the node they build.
    fn left_assoc(
        &mut self,
        joiner: Token,
        operand: fn(&mut Self) -> Result<Condition, ConditionError>,
        node: fn(Box<Condition>, Box<Condition>) -> Condition,
    ) -> Result<Condition, ConditionError> {
        let mut left = operand(self)?;
        loop {
            let next = self.peek()?;
            if next.token != joiner {
                return Ok(left);
            }
            self.bump(&next);
            let right = operand(self)?;
            left = node(Box::new(left), Box::new(right));
        }
    }

    fn primary(&mut self) -> Result<Condition, ConditionError> {
        let open = self.peek()?;
        match &open.token {
            Token::LParen if self.signed_prefix(&open).is_none() => {
                if self.depth >= MAX_DEPTH {
                    return Err(error(
                        open.column,
                        format!(
                            "parentheses nest more than {MAX_DEPTH} deep; simplify the condition"
                        ),
                    ));
                }
                self.bump(&open);
                self.depth += 1;
                let inner = self.expr()?;
                self.depth -= 1;
                let close = self.peek()?;
                if close.token != Token::RParen {
                    return Err(error(
                        close.column,
                        format!(
                            "expected `)` to close the `(` at column {}, found {}",
                            open.column,
                            self.describe(&close)
                        ),
                    ));
                }
                self.bump(&close);
                Ok(inner)
            }
            Token::Word(w) if w == "changed" => {
                self.bump(&open);
                let next = self.peek()?;
                if let Token::Op(op) = next.token {
                    return Err(error(
                        next.column,
                        format!(
                            "`changed` is a condition of its own and takes no `{op}`; use `changed` \
                             alone, or compare `value` with `old`"
                        ),
                    ));
                }
                Ok(Condition::Changed)
            }
            _ => self.compare(),
        }
    }

    /// When `open` (a `(`) starts `(s)`, the index just past its `)`.
    fn signed_prefix(&self, open: &Lexed) -> Option<usize> {
        // Lexing errors here are left for the parse proper to meet in the order of the text.
        let s = self.lex_at(open.end).ok()?;
        if s.token != Token::Word("s".to_string()) {
            return None;
        }
        let close = self.lex_at(s.end).ok()?;
        (close.token == Token::RParen).then_some(close.end)
    }

    fn compare(&mut self) -> Result<Condition, ConditionError> {
        let column = self.peek()?.column;
        let (left, left_signed, left_column) = self.operand(Position::First)?;
        let next = self.peek()?;
        let Token::Op(op) = next.token else {
            let left_text = match left {
                Operand::Side(side) => side.name().to_string(),
                Operand::Const(value) => value.to_string(),
            };
            return Err(error(
                next.column,
                format!(
                    "expected a comparison after `{left_text}`: `==`, `!=`, `<`, `<=`, `>`, `>=` or \
                     `&`, found {}",
                    self.describe(&next)
                ),
            ));
        };
        self.bump(&next);
        let (right, right_signed, right_column) = self.operand(Position::After(op))?;
        let (left, op, right) = match (left, right) {
            (Operand::Side(a), Operand::Side(b)) if a == b => {
                return Err(error(
                    right_column,
                    format!(
                        "this compares `{a}` with itself; compare `value` with `old` or a number"
                    ),
                ))
            }
            (Operand::Side(a), Operand::Side(b)) => (a, op, Rhs::Side(b)),
            (Operand::Side(a), Operand::Const(value)) => (
                a,
                op,
                Rhs::Const {
                    value,
                    column: right_column,
                },
            ),
            (Operand::Const(value), Operand::Side(b)) => (
                b,
                op.flipped(),
                Rhs::Const {
                    value,
                    column: left_column,
                },
            ),
            (Operand::Const(_), Operand::Const(_)) => {
                return Err(error(
                    right_column,
                    "this compares two numbers; one side must be `value` or `old`",
                ))
            }
        };
        Ok(Condition::Compare(Compare {
            left,
            op,
            right,
            signed: left_signed || right_signed,
            column,
        }))
    }

    /// One operand with its `(s)` flag and the column of the operand proper (after any `(s)`).
    fn operand(&mut self, position: Position) -> Result<(Operand, bool, usize), ConditionError> {
        let first = self.peek()?;
        let mut signed_column = None;
        if first.token == Token::LParen {
            if let Some(end) = self.signed_prefix(&first) {
                signed_column = Some(first.column);
                self.pos = end;
            }
        }
        let lexed = self.peek()?;
        let expected = match (signed_column, position) {
            (Some(_), _) => "`value` or `old` after `(s)`".to_string(),
            (None, Position::First) => "`value`, `old`, `changed` or a number".to_string(),
            (None, Position::After(op)) => format!("`value`, `old` or a number after `{op}`"),
        };
        let operand = match &lexed.token {
            Token::Word(w) if w == "value" => Operand::Side(Side::Value),
            Token::Word(w) if w == "old" => Operand::Side(Side::Old),
            Token::Number(value) => {
                if let Some(column) = signed_column {
                    return Err(error(
                        column,
                        "`(s)` goes on `value` or `old`, not on a number; a negative constant is \
                         written as is (`(s)value < -1`)",
                    ));
                }
                Operand::Const(*value)
            }
            Token::Word(w) if w == "changed" => {
                return Err(match signed_column {
                    Some(column) => error(
                        column,
                        "`(s)` goes on `value` or `old`, not on `changed`; write `changed` alone",
                    ),
                    None => error(
                        lexed.column,
                        "`changed` is a condition of its own and cannot be compared; use `changed` \
                         alone, or compare `value` with `old`",
                    ),
                });
            }
            Token::Word(w) if ["value", "old", "changed"].contains(&w.to_lowercase().as_str()) => {
                return Err(error(
                    lexed.column,
                    format!(
                        "keywords are lowercase: write `{}` for `{w}`",
                        w.to_lowercase()
                    ),
                ));
            }
            Token::Word(w) if w == "s" || w == "S" => {
                return Err(error(
                    lexed.column,
                    format!(
                        "expected {expected}, found `{w}`; for a signed comparison write `(s)` \
                         right before `value` or `old`"
                    ),
                ));
            }
            _ => {
                return Err(error(
                    lexed.column,
                    format!("expected {expected}, found {}", self.describe(&lexed)),
                ))
            }
        };
        self.bump(&lexed);
        Ok((operand, signed_column.is_some(), lexed.column))
    }
}

enum Magnitude {
    Ok(u128),
    /// Valid digits, but more than 128 bits.
    TooBig,
    Invalid,
}

/// `500`, `0x1f4`, `0b101`, `1_000`: the digits after any `-`. Digits are checked before size so that
/// a long mistyped token is called "not a number" rather than "out of range".
fn parse_magnitude(text: &str) -> Magnitude {
    let (radix, digits) = if let Some(d) = text.strip_prefix("0x").or(text.strip_prefix("0X")) {
        (16, d)
    } else if let Some(d) = text.strip_prefix("0b").or(text.strip_prefix("0B")) {
        (2, d)
    } else {
        (10, text)
    };
    let mut value = Some(0u128);
    let mut any_digit = false;
    for c in digits.chars().filter(|&c| c != '_') {
        let Some(d) = c.to_digit(radix) else {
            return Magnitude::Invalid;
        };
        any_digit = true;
        value = value
            .and_then(|v| v.checked_mul(u128::from(radix)))
            .and_then(|v| v.checked_add(u128::from(d)));
    }
    match (any_digit, value) {
        (false, _) => Magnitude::Invalid,
        (true, Some(v)) => Magnitude::Ok(v),
        (true, None) => Magnitude::TooBig,
    }
}

#[cfg(test)]
mod tests;
