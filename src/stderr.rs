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

/// `eprintln!` that cannot panic: formats `args` and writes it, newline included, with one write.
pub fn line(args: fmt::Arguments<'_>) {
    let mut text = args.to_string();
    text.push('\n');
    let _ = io::stderr().write_all(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_report_success() {
        let mut e = Stderr;
        assert_eq!(e.write(b"").unwrap(), 0);
        assert!(e.flush().is_ok());
    }
}
