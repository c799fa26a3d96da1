//! What a call-chain printer adds to a kernel frame: the `file:line` after it and the inlined calls before
//! it, behind a small interface ([`LineSource`]) the printer can call without knowing where the lines come
//! from.
//!
//! A printer holds an `Option<&dyn LineSource>`; for each kernel frame it has already printed as
//! `func+0xOFF/0xSIZE`, [`annotate`] gives the `file:line` printed after it and the inlined frames
//! to print before it, innermost first, the way a call chain reads:
//!
//! ```text
//!  => helper (a.c:44) [inlined]
//!  => use_inline+0x10/0x23 (a.c:49)
//! ```
//!
//! Every address in a ksymwatch chain points *after* the instruction of interest: a data breakpoint traps
//! once the writing instruction has retired, and the frames above it are return addresses. [`annotate`]
//! therefore looks up `addr - 1`, which lies inside the write or the call; [`LineSource::lines`] itself
//! looks up exactly the address it is given.
//!
//! The [`LineSource`] over a vmlinux is [`crate::resolve::VmlinuxLines`], beside the resolver it asks.

/// One source-level frame at a code address: the vmlinux line table's own [`crate::lines::Frame`], which
/// every [`LineSource`] answers with.
pub use crate::lines::Frame as LineFrame;

/// Anything that maps a runtime kernel code address to source frames.
pub trait LineSource {
    /// Frames at exactly `addr`, innermost inlined call first and the out-of-line function last; empty
    /// when the address has no line information (not in the vmlinux, or in code built without `-g`).
    fn lines(&self, addr: u64) -> Vec<LineFrame>;
}

/// What a printer adds to one chain frame.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Annotation {
    /// `file:line` of the frame's `func+0xOFF/0xSIZE`; empty when unknown.
    pub location: String,
    /// Whole frames (`helper (a.c:44) [inlined]`) to print as ` => ` lines before this frame, innermost first.
    pub inlined: Vec<String>,
}

/// Annotates the chain frame at `addr` (a trap ip or a return address; see the module docs).
pub fn annotate(source: &dyn LineSource, addr: u64) -> Annotation {
    let frames = source.lines(addr.saturating_sub(1));
    let Some((outer, inner)) = frames.split_last() else {
        return Annotation::default();
    };
    Annotation {
        location: outer.location(),
        inlined: inner
            .iter()
            .map(|f| {
                format!(
                    "{} ({}) [inlined]",
                    f.function.as_deref().unwrap_or("??"),
                    f.location()
                )
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One inlined call at 0x100, looked up one byte before the chain's address.
    struct Fake;

    impl LineSource for Fake {
        fn lines(&self, addr: u64) -> Vec<LineFrame> {
            let f = |function: &str, file: Option<&str>, line, inlined| LineFrame {
                function: Some(function.into()),
                file: file.map(str::to_string),
                line,
                inlined,
            };
            match addr {
                0xff => vec![
                    f("helper", Some("a.c"), Some(44), true),
                    f("use_inline", Some("a.c"), Some(49), false),
                ],
                0x1ff => vec![f("asm_entry", Some("entry.S"), None, false)],
                0x2ff => vec![f("mystery", None, None, false)],
                _ => vec![],
            }
        }
    }

    #[test]
    fn annotates_the_instruction_before_the_address() {
        let a = annotate(&Fake, 0x100);
        assert_eq!(a.location, "a.c:49");
        assert_eq!(a.inlined, vec!["helper (a.c:44) [inlined]".to_string()]);
        assert_eq!(annotate(&Fake, 0x200).location, "entry.S");
        assert_eq!(annotate(&Fake, 0x300).location, "??");
        assert_eq!(annotate(&Fake, 0x0), Annotation::default());
    }
}
