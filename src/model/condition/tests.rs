//! Tests of the `--if` language: parsing, errors with their columns, width checks and printing back.

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

/// [`fails`] for each `(text, column, hint)`.
fn fail_all(cases: &[(&str, usize, &str)]) {
    for &(text, column, hint) in cases {
        fails(text, column, hint);
    }
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
    for (text, want) in [
        ("0", 0),
        ("-0", 0),
        ("007", 7),
        ("1_000_000", 1_000_000),
        ("1__0_", 10),
        ("0x1f4", 500),
        ("0X1F4", 500),
        ("0x_dead_beef", 0xdead_beef),
        ("0b101", 5),
        ("0B1111_0000", 0xf0),
        ("-0x80", -128),
        ("-0b1", -1),
        ("18446744073709551615", u64::MAX as i128),
        ("0xffff_ffff_ffff_ffff", u64::MAX as i128),
        ("-9223372036854775808", i64::MIN as i128),
        ("-0x8000000000000000", i64::MIN as i128),
        ("000000000000000000000000000000000000000000001", 1),
    ] {
        assert_eq!(value(text), want, "{text}");
    }
}

#[test]
fn numbers_out_of_range_or_malformed() {
    #[rustfmt::skip]
    let cases = [
        ("value == 18446744073709551616", 10, "out of range"),
        ("value == 0x1_0000_0000_0000_0000", 10, "out of range"),
        ("value == -9223372036854775809", 10, "out of range"),
        ("value == -0x8000000000000001", 10, "out of range"),
        ("value == 999999999999999999999999999999999999999999", 10, "out of range"),
        ("value == 0x", 10, "`0x` is not a number"),
        ("value == 0x1g", 10, "`0x1g` is not a number"),
        ("value == 0b102", 10, "`0b102` is not a number"),
        ("value == 12ab", 10, "`12ab` is not a number"),
        ("value == 0o17", 10, "not a number"),
        ("value == 0x_", 10, "not a number"),
        ("value == - 1", 10, "followed directly by digits"),
        ("value == -x", 10, "followed directly by digits"),
        ("value == -", 10, "followed directly by digits"),
        ("value == --1", 10, "followed directly by digits"),
        ("value - 1 == 5", 7, "arithmetic is not supported"),
    ];
    fail_all(&cases);
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
    #[rustfmt::skip]
    let cases = [
        ("é", 1, "expected `value`, `old`, `changed` or a number, found `é`"),
        ("value == 1 && é", 15, "found `é`"),
    ];
    fail_all(&cases);
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
    #[rustfmt::skip]
    let cases = [
        ("", 1, "the condition is empty"),
        ("   ", 4, "the condition is empty"),
        ("value == 1 value", 12, "unexpected `value` after a complete condition; join"),
        ("value == 1 2", 12, "unexpected `2`"),
        ("changed changed", 9, "join conditions with `&&` or `||`"),
        ("value == 1 && ", 15, "found the end of the condition"),
        ("|| changed", 1, "found `||`"),
        ("&& changed", 1, "expected `value`, `old`, `changed` or a number, found `&&`"),
        ("changed ||", 11, "found the end of the condition"),
        ("changed;", 8, "unexpected `;`"),
    ];
    fail_all(&cases);
}

#[test]
fn parentheses() {
    #[rustfmt::skip]
    let cases = [
        ("(value == 1", 12, "expected `)` to close the `(` at column 1, found the end"),
        ("((changed)", 11, "close the `(` at column 1"),
        ("(changed value", 10, "close the `(` at column 1, found `value`"),
        ("value == 1)", 11, "unmatched `)`"),
        ("changed && changed)", 19, "unmatched `)`"),
        ("()", 2, "expected `value`, `old`, `changed` or a number, found `)`"),
        (")", 1, "found `)`"),
        ("(value) == 1", 7, "expected a comparison after `value`"),
        ("value == (1)", 10, "expected `value`, `old` or a number after `==`, found `(`"),
    ];
    fail_all(&cases);
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
    #[rustfmt::skip]
    let cases = [
        ("value = 1", 7, "`=` is not a comparison; use `==`"),
        ("value === 1", 9, "use `==`"),
        ("value =< 1", 7, "use `<=`"),
        ("value => 1", 7, "use `>=`"),
        ("value <> 1", 7, "use `!=`"),
        ("!changed", 1, "`!` (not) is not supported; use `!=` or swap the comparison"),
        ("!(value == 1)", 1, "use `!=` or swap"),
        ("value !== 1", 9, "use `==`"),
        ("value | 1", 7, "use `||`"),
        ("changed | changed", 9, "use `||`"),
        ("value && 1", 7, "expected a comparison after `value`"),
        ("value &&& 1", 7, "expected a comparison after `value`"),
        ("value ~ 1", 7, "found `~`"),
        ("value + 1 == 2", 7, "found `+`"),
        ("value", 6, "expected a comparison after `value`: `==`, `!=`, `<`, `<=`, `>`, `>=` or `&`, found the end"),
        ("value ==", 9, "expected `value`, `old` or a number after `==`, found the end"),
        ("value < < 1", 9, "after `<`, found `<`"),
    ];
    fail_all(&cases);
}

#[test]
fn words_say_what_to_write() {
    #[rustfmt::skip]
    let cases = [
        ("changed and value == 1", 9, "`and` is not an operator; use `&&`"),
        ("changed AND value == 1", 9, "`AND` is not an operator; use `&&`"),
        ("changed or value == 1", 9, "`or` is not an operator; use `||`"),
        ("changed Or value == 1", 9, "use `||`"),
        ("not changed", 1, "`not` is not supported; use `!=` or swap"),
        ("and", 1, "use `&&`"),
        ("new == 1", 1, "expected `value`, `old`, `changed` or a number, found `new`"),
        ("value == x", 10, "expected `value`, `old` or a number after `==`, found `x`"),
        ("value == _", 10, "found `_`"),
        ("Value == 1", 1, "keywords are lowercase: write `value` for `Value`"),
        ("value == OLD", 10, "write `old` for `OLD`"),
        ("CHANGED", 1, "write `changed`"),
        ("value == android", 10, "found `android`"),
        ("values == 1", 1, "found `values`"),
        ("s value == 1", 1, "write `(s)` right before `value` or `old`"),
        ("(S)value == 1", 2, "write `(s)` right before"),
    ];
    fail_all(&cases);
}

#[test]
fn compare_shape_errors() {
    #[rustfmt::skip]
    let cases = [
        ("value == value", 10, "compares `value` with itself"),
        ("old != (s)old", 11, "compares `old` with itself"),
        ("1 == 2", 6, "compares two numbers; one side must be `value` or `old`"),
        ("changed == 1", 9, "`changed` is a condition of its own and takes no `==`"),
        ("changed & 1", 9, "takes no `&`"),
        ("value == changed", 10, "`changed` is a condition of its own and cannot be compared"),
        ("1 < changed", 5, "cannot be compared"),
    ];
    fail_all(&cases);
}

#[test]
fn signed_prefix_errors() {
    #[rustfmt::skip]
    let cases = [
        ("(s)5 < value", 1, "`(s)` goes on `value` or `old`, not on a number"),
        ("value < (s)-1", 9, "not on a number"),
        ("(s)changed", 1, "not on `changed`"),
        ("(s)(s)value < 1", 4, "expected `value` or `old` after `(s)`, found `(`"),
        ("(s)(value < 1)", 4, "after `(s)`, found `(`"),
        ("(s)", 4, "after `(s)`, found the end"),
        ("(s) x", 5, "after `(s)`, found `x`"),
        ("(s", 2, "found `s`"),
    ];
    fail_all(&cases);
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
    for (v, len, want) in [
        (-1, 1, 0xff),
        (-1, 2, 0xffff),
        (-1, 4, 0xffff_ffff),
        (-1, 8, u64::MAX),
        (-128, 1, 0x80),
        (255, 1, 0xff),
        (0x1f4, 2, 0x1f4),
        (-32768, 2, 0x8000),
        (i64::MIN as i128, 8, 0x8000_0000_0000_0000),
        (u64::MAX as i128, 8, u64::MAX),
        (0, 8, 0),
        ((1 << 32) - 1, 4, 0xffff_ffff),
        (i32::MIN as i128, 4, 0x8000_0000),
        // Outside the checked range it still truncates rather than failing.
        (0x1ff, 1, 0xff),
    ] {
        assert_eq!(bits(v, len), want, "{v} in {len} bytes");
    }
}

#[test]
fn constant_bits_signed() {
    let bits = |v: i128, len: u8| Condition::constant_bits(v, len, true);
    for (v, len, want) in [
        (-1, 1, u64::MAX),
        (0xff, 1, u64::MAX),
        (0x7f, 1, 0x7f),
        (0x80, 1, (-128i64) as u64),
        (-128, 1, (-128i64) as u64),
        (-1, 2, u64::MAX),
        (0xffff, 2, u64::MAX),
        (0x7fff, 2, 0x7fff),
        (-1, 4, u64::MAX),
        (0x8000_0000, 4, i32::MIN as i64 as u64),
        (i32::MAX as i128, 4, 0x7fff_ffff),
        (-1, 8, u64::MAX),
        (i64::MIN as i128, 8, 0x8000_0000_0000_0000),
        (u64::MAX as i128, 8, u64::MAX),
        (i64::MAX as i128, 8, i64::MAX as u64),
        (5, 8, 5),
    ] {
        assert_eq!(bits(v, len), want, "{v} in {len} bytes");
    }
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
