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
        let mut left = self.and()?;
        loop {
            let next = self.peek()?;
            if next.token != Token::OrOr {
                return Ok(left);
            }
            self.bump(&next);
            let right = self.and()?;
            left = Condition::Or(Box::new(left), Box::new(right));
        }
    }

    fn and(&mut self) -> Result<Condition, ConditionError> {
        let mut left = self.primary()?;
        loop {
            let next = self.peek()?;
            if next.token != Token::AndAnd {
                return Ok(left);
            }
            self.bump(&next);
            let right = self.primary()?;
            left = Condition::And(Box::new(left), Box::new(right));
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
mod tests {
    use super::*;

    fn cmp(left: Side, op: Op, right: Rhs, signed: bool, column: usize) -> Condition {
        Condition::Compare(Compare {
            left,
            op,
            right,
            signed,
            column,
        })
    }

    fn k(value: i128, column: usize) -> Rhs {
        Rhs::Const { value, column }
    }

    fn and(a: Condition, b: Condition) -> Condition {
        Condition::And(Box::new(a), Box::new(b))
    }

    fn or(a: Condition, b: Condition) -> Condition {
        Condition::Or(Box::new(a), Box::new(b))
    }

    fn ok(text: &str) -> Condition {
        match parse(text) {
            Ok(c) => c,
            Err(e) => panic!("`{text}`: {e}"),
        }
    }

    /// The error's column and message, for texts that must fail.
    fn err(text: &str) -> (usize, String) {
        match parse(text) {
            Ok(c) => panic!("`{text}` parsed as {c:?}"),
            Err(e) => (e.column, e.message),
        }
    }

    /// Asserts the error column and that the message contains `hint`.
    fn fails(text: &str, column: usize, hint: &str) {
        let (c, message) = err(text);
        assert_eq!(c, column, "`{text}`: {message}");
        assert!(
            message.contains(hint),
            "`{text}`: `{message}` lacks `{hint}`"
        );
    }

    /// The tree with every column zeroed: what must survive a Display round trip.
    fn strip(c: &Condition) -> Condition {
        match c {
            Condition::Changed => Condition::Changed,
            Condition::Compare(c) => {
                let right = match c.right {
                    Rhs::Const { value, .. } => k(value, 0),
                    side => side,
                };
                cmp(c.left, c.op, right, c.signed, 0)
            }
            Condition::And(a, b) => and(strip(a), strip(b)),
            Condition::Or(a, b) => or(strip(a), strip(b)),
        }
    }

    fn round_trip(text: &str) -> String {
        let tree = ok(text);
        let shown = tree.to_string();
        let again = ok(&shown);
        assert_eq!(strip(&again), strip(&tree), "`{text}` shown as `{shown}`");
        assert_eq!(again.to_string(), shown, "`{shown}` is not a fixed point");
        shown
    }

    #[test]
    fn every_operator() {
        for (text, op) in [
            ("==", Op::Eq),
            ("!=", Op::Ne),
            ("<", Op::Lt),
            ("<=", Op::Le),
            (">", Op::Gt),
            (">=", Op::Ge),
            ("&", Op::BitAnd),
        ] {
            let source = format!("value {text} 7");
            let column = 8 + text.len();
            assert_eq!(
                ok(&source),
                cmp(Side::Value, op, k(7, column), false, 1),
                "{source}"
            );
            assert_eq!(
                ok(&format!("old{text}7")).to_string(),
                format!("old {text} 7")
            );
        }
    }

    #[test]
    fn changed_alone_and_joined() {
        assert_eq!(ok("changed"), Condition::Changed);
        assert_eq!(ok("  changed  "), Condition::Changed);
        assert_eq!(ok("(changed)"), Condition::Changed);
        assert_eq!(
            ok("changed && value == 0"),
            and(
                Condition::Changed,
                cmp(Side::Value, Op::Eq, k(0, 21), false, 12)
            )
        );
    }

    #[test]
    fn sides_against_each_other() {
        assert_eq!(
            ok("value != old"),
            cmp(Side::Value, Op::Ne, Rhs::Side(Side::Old), false, 1)
        );
        // `old OP value` stays as written: both operands are loaded either way.
        assert_eq!(
            ok("old < value"),
            cmp(Side::Old, Op::Lt, Rhs::Side(Side::Value), false, 1)
        );
        assert_eq!(
            ok("value & old"),
            cmp(Side::Value, Op::BitAnd, Rhs::Side(Side::Old), false, 1)
        );
    }

    #[test]
    fn constant_on_the_left_is_flipped() {
        for (text, op) in [
            ("5 < value", Op::Gt),
            ("5 <= value", Op::Ge),
            ("5 > value", Op::Lt),
            ("5 >= value", Op::Le),
            ("5 == value", Op::Eq),
            ("5 != value", Op::Ne),
            ("5 & value", Op::BitAnd),
        ] {
            assert_eq!(ok(text), cmp(Side::Value, op, k(5, 1), false, 1), "{text}");
        }
        assert_eq!(
            ok("  -3 >= old"),
            cmp(Side::Old, Op::Le, k(-3, 3), false, 3)
        );
        assert_eq!(ok("0x10 < (s)value").to_string(), "(s)value > 0x10");
        for op in [Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge, Op::BitAnd] {
            assert_eq!(op.flipped().flipped(), op);
        }
    }

    #[test]
    fn signed_prefix_on_either_operand() {
        assert_eq!(
            ok("(s)value < -1"),
            cmp(Side::Value, Op::Lt, k(-1, 12), true, 1)
        );
        assert_eq!(
            ok("( s ) value < -1"),
            cmp(Side::Value, Op::Lt, k(-1, 15), true, 1)
        );
        assert_eq!(
            ok("old >= (s)value"),
            cmp(Side::Old, Op::Ge, Rhs::Side(Side::Value), true, 1)
        );
        assert_eq!(
            ok("(s)old >= (s)value"),
            cmp(Side::Old, Op::Ge, Rhs::Side(Side::Value), true, 1)
        );
        assert_eq!(ok("-5 > (s)old"), cmp(Side::Old, Op::Lt, k(-5, 1), true, 1));
        // A group that happens to start with `(s)` is still a group.
        assert_eq!(
            ok("((s)value < 0)"),
            cmp(Side::Value, Op::Lt, k(0, 13), true, 2)
        );
        assert_eq!(ok("value < 0"), cmp(Side::Value, Op::Lt, k(0, 9), false, 1));
    }

    #[test]
    fn numbers() {
        let value = |text: &str| match ok(&format!("value == {text}")) {
            Condition::Compare(Compare {
                right: Rhs::Const { value, column: 10 },
                ..
            }) => value,
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(value("0"), 0);
        assert_eq!(value("-0"), 0);
        assert_eq!(value("007"), 7);
        assert_eq!(value("1_000_000"), 1_000_000);
        assert_eq!(value("1__0_"), 10);
        assert_eq!(value("0x1f4"), 500);
        assert_eq!(value("0X1F4"), 500);
        assert_eq!(value("0x_dead_beef"), 0xdead_beef);
        assert_eq!(value("0b101"), 5);
        assert_eq!(value("0B1111_0000"), 0xf0);
        assert_eq!(value("-0x80"), -128);
        assert_eq!(value("-0b1"), -1);
        assert_eq!(value("18446744073709551615"), u64::MAX as i128);
        assert_eq!(value("0xffff_ffff_ffff_ffff"), u64::MAX as i128);
        assert_eq!(value("-9223372036854775808"), i64::MIN as i128);
        assert_eq!(value("-0x8000000000000000"), i64::MIN as i128);
        assert_eq!(value("000000000000000000000000000000000000000000001"), 1);
    }

    #[test]
    fn numbers_out_of_range_or_malformed() {
        fails("value == 18446744073709551616", 10, "out of range");
        fails("value == 0x1_0000_0000_0000_0000", 10, "out of range");
        fails("value == -9223372036854775809", 10, "out of range");
        fails("value == -0x8000000000000001", 10, "out of range");
        fails(
            "value == 999999999999999999999999999999999999999999",
            10,
            "out of range",
        );
        fails("value == 0x", 10, "`0x` is not a number");
        fails("value == 0x1g", 10, "`0x1g` is not a number");
        fails("value == 0b102", 10, "`0b102` is not a number");
        fails("value == 12ab", 10, "`12ab` is not a number");
        fails("value == 0o17", 10, "not a number");
        fails("value == 0x_", 10, "not a number");
        fails("value == - 1", 10, "followed directly by digits");
        fails("value == -x", 10, "followed directly by digits");
        fails("value == -", 10, "followed directly by digits");
        fails("value == --1", 10, "followed directly by digits");
        fails("value - 1 == 5", 7, "arithmetic is not supported");
    }

    #[test]
    fn precedence_and_associativity() {
        let a = || cmp(Side::Value, Op::Eq, k(1, 10), false, 1);
        assert_eq!(
            ok("value == 1 || changed && old == 2"),
            or(
                a(),
                and(
                    Condition::Changed,
                    cmp(Side::Old, Op::Eq, k(2, 33), false, 26)
                )
            )
        );
        assert_eq!(
            ok("value == 1 && changed || old == 2"),
            or(
                and(a(), Condition::Changed),
                cmp(Side::Old, Op::Eq, k(2, 33), false, 26)
            )
        );
        assert_eq!(
            ok("value == 1 && (changed || old == 2)"),
            and(
                a(),
                or(
                    Condition::Changed,
                    cmp(Side::Old, Op::Eq, k(2, 34), false, 27)
                )
            )
        );
        // Left-associative chains.
        assert_eq!(
            ok("changed || changed || changed"),
            or(
                or(Condition::Changed, Condition::Changed),
                Condition::Changed
            )
        );
        assert_eq!(
            ok("changed && changed && changed"),
            and(
                and(Condition::Changed, Condition::Changed),
                Condition::Changed
            )
        );
    }

    #[test]
    fn whitespace_anywhere() {
        let tight = ok("(s)value<=-1&&(old!=0x2||changed)");
        let loose = ok(" \t( s )value <= -1 &&\n( old != 0x2 || changed ) ");
        assert_eq!(strip(&tight), strip(&loose));
        assert_eq!(tight.to_string(), "(s)value <= -1 && (old != 2 || changed)");
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        // `é` is two bytes in UTF-8 but one column.
        fails(
            "é",
            1,
            "expected `value`, `old`, `changed` or a number, found `é`",
        );
        fails("value == 1 && é", 15, "found `é`");
        assert_eq!(
            ok("\u{a0}value == 1"),
            cmp(Side::Value, Op::Eq, k(1, 11), false, 2)
        );
    }

    #[test]
    fn display_is_canonical() {
        let cases = [
            ("value==500", "value == 0x1f4"),
            (
                "value == 0x1f4 && (old != 5 || changed)",
                "value == 0x1f4 && (old != 5 || changed)",
            ),
            (
                "(value == 9) || (value == 10)",
                "value == 9 || value == 0xa",
            ),
            ("old > -1", "old > -1"),
            ("(s)value < -200", "(s)value < -200"),
            ("value < (s)old", "(s)value < old"),
            ("0x10 & value", "value & 0x10"),
            (
                "-9223372036854775808 == value",
                "value == -9223372036854775808",
            ),
            (
                "value == 18446744073709551615",
                "value == 0xffffffffffffffff",
            ),
            ("(changed)", "changed"),
            (
                "((changed || changed) && changed)",
                "(changed || changed) && changed",
            ),
            (
                "changed && (changed && changed)",
                "changed && (changed && changed)",
            ),
            (
                "changed || (changed || changed)",
                "changed || (changed || changed)",
            ),
            (
                "changed || (changed && changed)",
                "changed || changed && changed",
            ),
            (
                "(changed && changed) || changed",
                "changed && changed || changed",
            ),
            (
                "((changed || changed)) && ((changed || changed))",
                "(changed || changed) && (changed || changed)",
            ),
        ];
        for (text, shown) in cases {
            assert_eq!(round_trip(text), shown, "{text}");
        }
        // A canonical text parses back to exactly the same tree, columns included.
        let canonical = "value == 0x1f4 && (old != 5 || changed)";
        assert_eq!(ok(&ok(canonical).to_string()), ok(canonical));
    }

    #[test]
    fn display_round_trips_every_shape() {
        let leaves = [
            "changed",
            "value == 1",
            "(s)old < -1",
            "old & value",
            "0xff >= value",
        ];
        let mut texts: Vec<String> = leaves.iter().map(|s| s.to_string()).collect();
        for a in leaves {
            for b in leaves {
                for c in ["changed", "value > 0x100"] {
                    for (x, y) in [("&&", "||"), ("||", "&&"), ("&&", "&&"), ("||", "||")] {
                        texts.push(format!("{a} {x} {b} {y} {c}"));
                        texts.push(format!("({a} {x} {b}) {y} {c}"));
                        texts.push(format!("{a} {x} ({b} {y} {c})"));
                    }
                }
            }
        }
        for text in &texts {
            round_trip(text);
        }
    }

    #[test]
    fn uses_old() {
        assert!(ok("changed").uses_old());
        assert!(ok("old == 1").uses_old());
        assert!(ok("value != old").uses_old());
        assert!(ok("old < value").uses_old());
        assert!(ok("value == 1 || (value == 2 && changed)").uses_old());
        assert!(!ok("value == 1").uses_old());
        assert!(!ok("value == 1 && (value & 4 || 3 < value)").uses_old());
    }

    #[test]
    fn for_each_compare_in_text_order() {
        let mut columns = Vec::new();
        ok("value == 1 || (changed && old < 2) && 3 > value")
            .for_each_compare(&mut |c| columns.push(c.column));
        assert_eq!(columns, [1, 27, 39]);
    }

    #[test]
    fn empty_and_trailing() {
        fails("", 1, "the condition is empty");
        fails("   ", 4, "the condition is empty");
        fails(
            "value == 1 value",
            12,
            "unexpected `value` after a complete condition; join",
        );
        fails("value == 1 2", 12, "unexpected `2`");
        fails("changed changed", 9, "join conditions with `&&` or `||`");
        fails("value == 1 && ", 15, "found the end of the condition");
        fails("|| changed", 1, "found `||`");
        fails(
            "&& changed",
            1,
            "expected `value`, `old`, `changed` or a number, found `&&`",
        );
        fails("changed ||", 11, "found the end of the condition");
        fails("changed;", 8, "unexpected `;`");
    }

    #[test]
    fn parentheses() {
        fails(
            "(value == 1",
            12,
            "expected `)` to close the `(` at column 1, found the end",
        );
        fails("((changed)", 11, "close the `(` at column 1");
        fails(
            "(changed value",
            10,
            "close the `(` at column 1, found `value`",
        );
        fails("value == 1)", 11, "unmatched `)`");
        fails("changed && changed)", 19, "unmatched `)`");
        fails(
            "()",
            2,
            "expected `value`, `old`, `changed` or a number, found `)`",
        );
        fails(")", 1, "found `)`");
        fails("(value) == 1", 7, "expected a comparison after `value`");
        fails(
            "value == (1)",
            10,
            "expected `value`, `old` or a number after `==`, found `(`",
        );
        let deep = |n: usize| format!("{}changed{}", "(".repeat(n), ")".repeat(n));
        assert_eq!(ok(&deep(MAX_DEPTH)), Condition::Changed);
        fails(
            &deep(MAX_DEPTH + 1),
            MAX_DEPTH + 1,
            "nest more than 32 deep",
        );
        fails(&"(".repeat(100_000), MAX_DEPTH + 1, "nest more than");
    }

    #[test]
    fn wrong_operators_say_what_to_write() {
        fails("value = 1", 7, "`=` is not a comparison; use `==`");
        fails("value === 1", 9, "use `==`");
        fails("value =< 1", 7, "use `<=`");
        fails("value => 1", 7, "use `>=`");
        fails("value <> 1", 7, "use `!=`");
        fails(
            "!changed",
            1,
            "`!` (not) is not supported; use `!=` or swap the comparison",
        );
        fails("!(value == 1)", 1, "use `!=` or swap");
        fails("value !== 1", 9, "use `==`");
        fails("value | 1", 7, "use `||`");
        fails("changed | changed", 9, "use `||`");
        fails("value && 1", 7, "expected a comparison after `value`");
        fails("value &&& 1", 7, "expected a comparison after `value`");
        fails("value ~ 1", 7, "found `~`");
        fails("value + 1 == 2", 7, "found `+`");
        fails("value", 6, "expected a comparison after `value`: `==`, `!=`, `<`, `<=`, `>`, `>=` or `&`, found the end");
        fails(
            "value ==",
            9,
            "expected `value`, `old` or a number after `==`, found the end",
        );
        fails("value < < 1", 9, "after `<`, found `<`");
    }

    #[test]
    fn words_say_what_to_write() {
        fails(
            "changed and value == 1",
            9,
            "`and` is not an operator; use `&&`",
        );
        fails(
            "changed AND value == 1",
            9,
            "`AND` is not an operator; use `&&`",
        );
        fails(
            "changed or value == 1",
            9,
            "`or` is not an operator; use `||`",
        );
        fails("changed Or value == 1", 9, "use `||`");
        fails("not changed", 1, "`not` is not supported; use `!=` or swap");
        fails("and", 1, "use `&&`");
        fails(
            "new == 1",
            1,
            "expected `value`, `old`, `changed` or a number, found `new`",
        );
        fails(
            "value == x",
            10,
            "expected `value`, `old` or a number after `==`, found `x`",
        );
        fails("value == _", 10, "found `_`");
        fails(
            "Value == 1",
            1,
            "keywords are lowercase: write `value` for `Value`",
        );
        fails("value == OLD", 10, "write `old` for `OLD`");
        fails("CHANGED", 1, "write `changed`");
        fails("value == android", 10, "found `android`");
        fails("values == 1", 1, "found `values`");
        fails(
            "s value == 1",
            1,
            "write `(s)` right before `value` or `old`",
        );
        fails("(S)value == 1", 2, "write `(s)` right before");
    }

    #[test]
    fn compare_shape_errors() {
        fails("value == value", 10, "compares `value` with itself");
        fails("old != (s)old", 11, "compares `old` with itself");
        fails(
            "1 == 2",
            6,
            "compares two numbers; one side must be `value` or `old`",
        );
        fails(
            "changed == 1",
            9,
            "`changed` is a condition of its own and takes no `==`",
        );
        fails("changed & 1", 9, "takes no `&`");
        fails(
            "value == changed",
            10,
            "`changed` is a condition of its own and cannot be compared",
        );
        fails("1 < changed", 5, "cannot be compared");
    }

    #[test]
    fn signed_prefix_errors() {
        fails(
            "(s)5 < value",
            1,
            "`(s)` goes on `value` or `old`, not on a number",
        );
        fails("value < (s)-1", 9, "not on a number");
        fails("(s)changed", 1, "not on `changed`");
        fails(
            "(s)(s)value < 1",
            4,
            "expected `value` or `old` after `(s)`, found `(`",
        );
        fails("(s)(value < 1)", 4, "after `(s)`, found `(`");
        fails("(s)", 4, "after `(s)`, found the end");
        fails("(s) x", 5, "after `(s)`, found `x`");
        fails("(s", 2, "found `s`");
    }

    #[test]
    fn error_display() {
        let e = parse("value = 1").unwrap_err();
        assert_eq!(e.to_string(), "column 7: `=` is not a comparison; use `==`");
    }

    #[test]
    fn check_width_bounds_per_length() {
        for (len, min, max) in [
            (1u8, -128i128, 255i128),
            (2, -32768, 65535),
            (4, -(1i128 << 31), (1i128 << 32) - 1),
            (8, i64::MIN as i128, u64::MAX as i128),
        ] {
            for signed in ["", "(s)"] {
                let at = |v: i128| ok(&format!("{signed}value == {v}")).check_width(len);
                assert_eq!(at(min), Ok(()), "len {len} {signed} {min}");
                let max = if signed.is_empty() {
                    max
                } else {
                    (max - 1) / 2
                };
                assert_eq!(at(max), Ok(()), "len {len} {signed} {max}");
                assert_eq!(at(-1), Ok(()));
                assert_eq!(at(0), Ok(()));
                if len < 8 {
                    let too_big = at(max + 1).unwrap_err();
                    assert_eq!(too_big.column, 10 + signed.len());
                    let want = if signed.is_empty() {
                        format!(
                            "{} does not fit the {len}-byte watch (constants from {min} to {max})",
                            max + 1
                        )
                    } else {
                        format!(
                            "{} does not fit a signed {len}-byte value ({min} to {max})",
                            max + 1
                        )
                    };
                    assert!(too_big.message.starts_with(&want), "{}", too_big.message);
                    let too_small = at(min - 1).unwrap_err();
                    assert_eq!(too_small.column, 10 + signed.len());
                    assert!(too_small
                        .message
                        .contains(&format!("{} does not fit", min - 1)));
                }
            }
        }
    }

    /// `(s)value < 200` on one byte once meant `< -56`: a constant past the signed range of a signed
    /// comparison is refused, on `value` and `old`, at every width and operator but `&` (a mask is bits).
    #[test]
    fn a_signed_comparison_refuses_a_constant_past_its_range() {
        for (len, over) in [(1u8, 128i128), (2, 32768), (4, 1 << 31)] {
            for op in ["==", "!=", "<", "<=", ">", ">="] {
                for side in ["value", "old"] {
                    let text = format!("(s){side} {op} {over}");
                    let e = ok(&text).check_width(len).unwrap_err();
                    assert!(
                        e.message.contains("does not fit a signed"),
                        "{text}: {}",
                        e.message
                    );
                    assert!(e.message.contains("drop `(s)`"), "{}", e.message);
                    let fits = format!("(s){side} {op} {}", over - 1);
                    assert_eq!(ok(&fits).check_width(len), Ok(()), "{fits}");
                    let unsigned = format!("{side} {op} {over}");
                    assert_eq!(ok(&unsigned).check_width(len), Ok(()), "{unsigned}");
                }
            }
            let mask = format!("(s)value & {over}");
            assert_eq!(ok(&mask).check_width(len), Ok(()), "{mask}");
        }
        let e = ok("(s)value < 200").check_width(1).unwrap_err();
        assert!(
            e.message
                .starts_with("200 does not fit a signed 1-byte value (-128 to 127)"),
            "{}",
            e.message
        );
    }

    #[test]
    fn check_width_reports_the_first_bad_constant() {
        let c = ok("value == 1 || (old == 300 && 70000 < value)");
        assert_eq!(c.check_width(4), Ok(()));
        assert_eq!(c.check_width(2).unwrap_err().column, 30);
        let e = c.check_width(1).unwrap_err();
        assert_eq!(e.column, 23);
        assert!(
            e.message.starts_with("300 does not fit the 1-byte watch"),
            "{}",
            e.message
        );
        assert_eq!(ok("changed && value != old").check_width(1), Ok(()));
        assert_eq!(ok("value == 0x1f4").check_width(1).unwrap_err().column, 10);
    }

    #[test]
    fn constant_bits_unsigned() {
        let bits = |v: i128, len: u8| Condition::constant_bits(v, len, false);
        assert_eq!(bits(-1, 1), 0xff);
        assert_eq!(bits(-1, 2), 0xffff);
        assert_eq!(bits(-1, 4), 0xffff_ffff);
        assert_eq!(bits(-1, 8), u64::MAX);
        assert_eq!(bits(-128, 1), 0x80);
        assert_eq!(bits(255, 1), 0xff);
        assert_eq!(bits(0x1f4, 2), 0x1f4);
        assert_eq!(bits(-32768, 2), 0x8000);
        assert_eq!(bits(i64::MIN as i128, 8), 0x8000_0000_0000_0000);
        assert_eq!(bits(u64::MAX as i128, 8), u64::MAX);
        assert_eq!(bits(0, 8), 0);
        assert_eq!(bits((1 << 32) - 1, 4), 0xffff_ffff);
        assert_eq!(bits(i32::MIN as i128, 4), 0x8000_0000);
        // Outside the checked range it still truncates rather than failing.
        assert_eq!(bits(0x1ff, 1), 0xff);
    }

    #[test]
    fn constant_bits_signed() {
        let bits = |v: i128, len: u8| Condition::constant_bits(v, len, true);
        assert_eq!(bits(-1, 1), u64::MAX);
        assert_eq!(bits(0xff, 1), u64::MAX);
        assert_eq!(bits(0x7f, 1), 0x7f);
        assert_eq!(bits(0x80, 1), (-128i64) as u64);
        assert_eq!(bits(-128, 1), (-128i64) as u64);
        assert_eq!(bits(-1, 2), u64::MAX);
        assert_eq!(bits(0xffff, 2), u64::MAX);
        assert_eq!(bits(0x7fff, 2), 0x7fff);
        assert_eq!(bits(-1, 4), u64::MAX);
        assert_eq!(bits(0x8000_0000, 4), i32::MIN as i64 as u64);
        assert_eq!(bits(i32::MAX as i128, 4), 0x7fff_ffff);
        assert_eq!(bits(-1, 8), u64::MAX);
        assert_eq!(bits(i64::MIN as i128, 8), 0x8000_0000_0000_0000);
        assert_eq!(bits(u64::MAX as i128, 8), u64::MAX);
        assert_eq!(bits(i64::MAX as i128, 8), i64::MAX as u64);
        assert_eq!(bits(5, 8), 5);
    }

    #[test]
    fn width_accepted_constants_keep_their_meaning() {
        // What check_width accepts, constant_bits turns into the pattern the loaded value will have:
        // a negative constant equals its two's complement, either way of comparing.
        for len in [1u8, 2, 4, 8] {
            let bits = u32::from(len) * 8;
            let top = if bits == 64 {
                u64::MAX
            } else {
                (1u64 << bits) - 1
            };
            assert_eq!(
                Condition::constant_bits(-1, len, false),
                Condition::constant_bits(top as i128, len, false)
            );
            assert_eq!(
                Condition::constant_bits(-1, len, true),
                Condition::constant_bits(top as i128, len, true)
            );
            let min = -(1i128 << (bits - 1));
            assert_eq!(
                Condition::constant_bits(min, len, true),
                (min as i64) as u64,
                "len {len}"
            );
        }
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        fn leaf() -> impl Strategy<Value = Condition> {
            let side = prop_oneof![Just(Side::Value), Just(Side::Old)];
            let op = prop_oneof![
                Just(Op::Eq),
                Just(Op::Ne),
                Just(Op::Lt),
                Just(Op::Le),
                Just(Op::Gt),
                Just(Op::Ge),
                Just(Op::BitAnd)
            ];
            let constant = prop_oneof![
                (i64::MIN..=0i64).prop_map(i128::from),
                any::<u64>().prop_map(i128::from),
                (-20i128..20)
            ];
            let compare = (side, op, proptest::option::of(constant), any::<bool>()).prop_map(
                |(left, op, constant, signed)| {
                    let right = match constant {
                        Some(value) => k(value, 0),
                        None if left == Side::Value => Rhs::Side(Side::Old),
                        None => Rhs::Side(Side::Value),
                    };
                    cmp(left, op, right, signed, 0)
                },
            );
            prop_oneof![Just(Condition::Changed), compare]
        }

        fn tree() -> impl Strategy<Value = Condition> {
            leaf().prop_recursive(5, 32, 2, |inner| {
                prop_oneof![
                    (inner.clone(), inner.clone()).prop_map(|(a, b)| and(a, b)),
                    (inner.clone(), inner).prop_map(|(a, b)| or(a, b)),
                ]
            })
        }

        proptest! {
            #[test]
            fn display_parses_back_to_the_tree(tree in tree()) {
                let shown = tree.to_string();
                let parsed = parse(&shown);
                prop_assert!(parsed.is_ok(), "`{}`: {:?}", shown, parsed);
                prop_assert_eq!(strip(&parsed.unwrap()), tree);
            }

            #[test]
            fn never_panics_and_columns_stay_in_the_text(text in "[ ()svalueoldchng0-9x_&|=!<>-]{0,40}") {
                if let Err(e) = parse(&text) {
                    prop_assert!(e.column >= 1 && e.column <= text.chars().count() + 1, "{}: {}", text, e);
                }
            }
        }
    }
}
