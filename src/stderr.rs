//! stderr for messages, whose failure never changes the outcome. The exit code says how the run went;
//! a warning, the summary line or an error message that cannot be written (`2>/dev/full`, a closed pipe)
//! has nowhere else to be reported, and must neither panic (`eprintln!` does) nor turn a clean run into a
//! runtime error. stdout is the product and keeps its errors; only stderr goes through here.

use std::fmt;
use std::io::{self, Write};

/// A [`Write`] to stderr that reports every write as done: printers take it where they take stdout, and
/// an error from it cannot reach the session's output-error path.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Dropped on purpose, see the module docs.
        let _ = io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stderr().flush();
        Ok(())
    }
}

/// `eprintln!` that cannot panic: formats `args` and writes it, newline included, with one write. Messages
/// quote what the user typed; a 200 KB target or `--if` is cut (see [`bounded`]) rather than echoed whole.
pub fn line(args: fmt::Arguments<'_>) {
    let mut text = bounded(&args.to_string());
    text.push('\n');
    let _ = io::stderr().write_all(text.as_bytes());
}

/// Longest word (a run without spaces: a target, a path, a type name) a message echoes whole.
const WORD_MAX: usize = 120;
/// Longest message: its start (what went wrong) and its end (what to do) are kept.
const LINE_MAX: usize = 2000;

/// The longest prefix of `s` of at most `n` bytes that ends on a character boundary.
fn head(s: &str, n: usize) -> &str {
    let mut end = n.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The longest suffix of `s` of at most `n` bytes that starts on a character boundary.
fn tail(s: &str, n: usize) -> &str {
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// `text` with every word over [`WORD_MAX`] bytes cut in the middle (`first…[N bytes]…last`), then the
/// whole cut to [`LINE_MAX`] keeping its start and end.
pub fn bounded(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(LINE_MAX + 64));
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        if word.len() > WORD_MAX {
            let (a, b) = (head(word, 60), tail(word, 30));
            out.push_str(&format!(
                "{a}…[{} bytes]…{b}",
                word.len() - a.len() - b.len()
            ));
        } else {
            out.push_str(word);
        }
    }
    if out.len() > LINE_MAX {
        let (a, b) = (head(&out, 1200), tail(&out, 600));
        return format!("{a} …[{} bytes cut]… {b}", out.len() - a.len() - b.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_echoes_are_cut_and_short_ones_kept() {
        let short = "bad target `jiffies/3`: length 3 is not 1, 2, 4 or 8";
        assert_eq!(bounded(short), short);
        let huge = format!("bad target `{}`: use a shorter one", "é".repeat(100_000));
        let b = bounded(&huge);
        assert!(b.len() < 300, "{}", b.len());
        assert!(
            b.starts_with("bad target `é") && b.ends_with("`: use a shorter one"),
            "{b}"
        );
        assert!(b.contains("bytes]…"), "{b}");
        let many = format!(
            "--if '{}': too many terms; the advice",
            "value == 1 || ".repeat(20_000)
        );
        let b = bounded(&many);
        assert!(b.len() <= LINE_MAX + 64, "{}", b.len());
        assert!(
            b.starts_with("--if 'value == 1") && b.ends_with("the advice"),
            "{b}"
        );
    }

    #[test]
    fn writes_report_success() {
        let mut e = Stderr;
        assert_eq!(e.write(b"").unwrap(), 0);
        assert!(e.flush().is_ok());
    }
}
