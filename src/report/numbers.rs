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
    push_time_right(out, ns, 0);
}

/// [`push_time`] right-aligned in `width` characters, as `{:>width$}` of its text: digits spelled from
/// the right into one buffer, two at a time after the dot, and appended at once (once per hit).
pub fn push_time_right(out: &mut String, ns: u64, width: usize) {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
                                2021222324252627282930313233343536373839\
                                4041424344454647484950515253545556575859\
                                6061626364656667686970717273747576777879\
                                8081828384858687888990919293949596979899";
    // u64::MAX ns is 18446744073.709551: 18 characters; the spaces pad to the usual widths.
    let mut buf = [b' '; 24];
    let micros = ns / 1000;
    let (mut secs, frac) = (micros / 1_000_000, (micros % 1_000_000) as usize);
    let mut i = buf.len();
    for pair in [frac % 100, frac / 100 % 100, frac / 10_000] {
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[2 * pair..2 * pair + 2]);
    }
    i -= 1;
    buf[i] = b'.';
    loop {
        i -= 1;
        buf[i] = b'0' + (secs % 10) as u8;
        secs /= 10;
        if secs == 0 {
            break;
        }
    }
    pad(out, width.saturating_sub(buf.len()), ' ');
    push_ascii(out, &buf[i.min(buf.len().saturating_sub(width))..]);
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
    const SPACES: &str = "                                ";
    const ZEROS: &str = "00000000000000000000000000000000";
    let run = match c {
        ' ' => SPACES,
        '0' => ZEROS,
        _ => "",
    };
    if n <= run.len() {
        out.push_str(&run[..n]);
        return;
    }
    for _ in 0..n {
        out.push(c);
    }
}

/// ASCII bytes (digits, a dot, spaces) appended at once.
fn push_ascii(out: &mut String, ascii: &[u8]) {
    if !ascii.is_ascii() {
        // Never: every caller passes digits. Kept correct rather than trusted.
        return out.extend(ascii.iter().map(|&b| char::from(b)));
    }
    // SAFETY: `ascii` is all ASCII (checked above), so `out` stays valid UTF-8.
    unsafe { out.as_mut_vec() }.extend_from_slice(ascii);
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
            for width in [0, 8, 12, 30] {
                let mut r = String::from("x");
                push_time_right(&mut r, n, width);
                assert_eq!(r, format!("x{s:>width$}"), "{n} in {width}");
            }
            s.clear();
            push_dec_zero(&mut s, n, 40);
            assert_eq!(s, format!("{n:040}"));
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
            s.clear();
            push_right(&mut s, text, 40);
            assert_eq!(s, format!("{text:>40}"), "longer than the run of spaces");
        }
    }
}
