//! Numbers and padded fields appended to a line buffer without `core::fmt`. A hit line is a handful of
//! integers and names; at 100k hits a second, `write!`'s dynamic dispatch, padding logic and many small
//! writes were a quarter of the tracer's CPU. Output is byte-for-byte what the `format!` spelling gives.

/// `0x` not included: lower-case hex digits of `v`, as `{:x}`.
pub fn push_hex(out: &mut String, v: u64) {
    let mut buf = [0u8; 16];
    let mut i = buf.len();
    let mut v = v;
    loop {
        i -= 1;
        buf[i] = b"0123456789abcdef"[(v & 0xf) as usize];
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    push_ascii(out, &buf[i..]);
}

/// Decimal, as `{}`.
pub fn push_dec(out: &mut String, v: u64) {
    out.push_str(itoa::Buffer::new().format(v));
}

/// Decimal, zero-padded to `width` digits, as `{:0width$}`.
pub fn push_dec_zero(out: &mut String, v: u64, width: usize) {
    let mut b = itoa::Buffer::new();
    let s = b.format(v);
    pad(out, width.saturating_sub(s.len()), '0');
    out.push_str(s);
}

/// `s` right-aligned in `width` characters, as `{:>width$}`.
pub fn push_right(out: &mut String, s: &str, width: usize) {
    pad(out, width.saturating_sub(chars(s)), ' ');
    out.push_str(s);
}

/// `s` left-aligned in `width` characters, as `{:<width$}`.
pub fn push_left(out: &mut String, s: &str, width: usize) {
    out.push_str(s);
    pad(out, width.saturating_sub(chars(s)), ' ');
}

/// A perf timestamp as ftrace prints it: seconds, a dot, six digits of microseconds.
pub fn push_time(out: &mut String, ns: u64) {
    push_dec(out, ns / 1_000_000_000);
    out.push('.');
    push_dec_zero(out, (ns % 1_000_000_000) / 1000, 6);
}

/// `core::fmt` pads by `char`s, not bytes; a comm can hold any bytes the task chose.
fn chars(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().count()
    }
}

fn pad(out: &mut String, n: usize, c: char) {
    for _ in 0..n {
        out.push(c);
    }
}

fn push_ascii(out: &mut String, digits: &[u8]) {
    for &d in digits {
        out.push(char::from(d));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every helper against the `format!` spelling it replaces, on edge values.
    #[test]
    fn match_core_fmt() {
        let nums = [
            0u64,
            1,
            9,
            10,
            15,
            16,
            999_999,
            1_000_000,
            u32::MAX as u64,
            u64::MAX,
        ];
        for &n in &nums {
            let mut s = String::new();
            push_hex(&mut s, n);
            assert_eq!(s, format!("{n:x}"));
            s.clear();
            push_dec(&mut s, n);
            assert_eq!(s, format!("{n}"));
            s.clear();
            push_dec_zero(&mut s, n, 3);
            assert_eq!(s, format!("{n:03}"));
            s.clear();
            push_time(&mut s, n);
            assert_eq!(
                s,
                format!("{}.{:06}", n / 1_000_000_000, (n % 1_000_000_000) / 1000)
            );
        }
        for text in [
            "",
            "a",
            "writer",
            "sixteen-chars-ab",
            "longer-than-sixteen",
            "ümlaut-ß",
        ] {
            let mut s = String::new();
            push_right(&mut s, text, 16);
            assert_eq!(s, format!("{text:>16}"));
            s.clear();
            push_left(&mut s, text, 7);
            assert_eq!(s, format!("{text:<7}"));
        }
    }
}
