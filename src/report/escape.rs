//! The one escaping of names in text output. A thread names itself (`prctl(PR_SET_NAME)`), and symbol,
//! file and module names come from files the user did not necessarily write: printed raw, a newline in one
//! splits a hit line (`"x\n => evil+0x1"` forges a call-chain line) and ESC or CR drive the terminal. Text
//! printers put every such name through [`push`]: control characters become `\n`, `\r`, `\t` or `\xHH`
//! (C1 controls `\u{HH}`), a backslash `\\`, so each hit is one line and a name reads back unambiguously.
//! JSON, OTLP and Perfetto carry names as their formats' strings; `--folded` escapes them too, and turns a
//! `;` (its frame separator) into `:`.

use std::borrow::Cow;

/// Whether `s` needs escaping at all: the per-hit fast path for the names that almost never do. A C1
/// control is two bytes in UTF-8, led by 0xC2.
fn clean(s: &str) -> bool {
    !s.bytes()
        .any(|b| b < 0x20 || b == 0x7f || b == b'\\' || b == 0xc2)
}

/// Appends `s` to `out`, escaped.
pub fn push(out: &mut String, s: &str) {
    if clean(s) {
        out.push_str(s);
        return;
    }
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str("\\x");
                push_hex2(out, c as u32);
            }
            c if ('\u{80}'..='\u{9f}').contains(&c) => {
                out.push_str("\\u{");
                push_hex2(out, c as u32);
                out.push('}');
            }
            c => out.push(c),
        }
    }
}

fn push_hex2(out: &mut String, v: u32) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(char::from(HEX[(v >> 4 & 0xf) as usize]));
    out.push(char::from(HEX[(v & 0xf) as usize]));
}

/// `s` escaped, borrowed when nothing needed it.
pub fn escaped(s: &str) -> Cow<'_, str> {
    if clean(s) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    push(&mut out, s);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_backslash_are_escaped() {
        assert!(matches!(escaped("writer"), Cow::Borrowed("writer")));
        for (raw, want) in [
            ("x\n => evil+0x1", "x\\n => evil+0x1"),
            ("a\rb\tc", "a\\rb\\tc"),
            ("\u{1b}[2J", "\\x1b[2J"),
            ("\0\u{7f}", "\\x00\\x7f"),
            ("back\\slash", "back\\\\slash"),
            ("\u{9b}31m", "\\u{9b}31m"),
        ] {
            assert_eq!(escaped(raw), want, "{raw:?}");
        }
        // Other non-ASCII text is kept: a name may be in any script.
        assert!(matches!(escaped("naïve_ß"), Cow::Borrowed(_)));
        assert_eq!(escaped("Â\u{85}"), "Â\\u{85}");
        // Whatever the name, the escaped form is one line without control characters.
        let all: String = (0u32..0xa0).filter_map(char::from_u32).collect();
        let e = escaped(&all);
        assert!(!e.chars().any(|c| c.is_control()), "{e}");
    }
}
