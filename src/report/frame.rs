//! A named frame, as every printer formats it. Frames are named once per hit by the tracer's symbolizer;
//! printers only format a [`ResolvedFrame`], so all of them agree on every name.

use std::cell::{OnceCell, RefCell};
use std::fmt;
use std::sync::Arc;

use super::numbers::push_hex;

/// Where a kernel frame is in the source (`--lines`, from DWARF line tables): its `file:line` and the
/// functions inlined at that point, innermost first, each as `func (file:line)`. Printers print it only when
/// it is there.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SourceLine {
    pub location: String,
    pub inlined: Vec<String>,
}

/// One frame with whatever is known about it. Names are shared (`Arc`): the symbolizer hands out the same
/// few names for every hit of a flood, and cloning a frame must not copy them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ResolvedFrame {
    pub addr: u64,
    /// The frame ran in the kernel (otherwise user space; hypervisor and guest frames count as user, and
    /// stay unnamed).
    pub kernel: bool,
    /// Function name, demangled for user code; `None` when unknown.
    pub sym: Option<Arc<str>>,
    /// Offset of `addr` into `sym` (0 when `sym` is unknown).
    pub off: u64,
    pub size: Option<u64>,
    /// Kernel module for kernel frames outside vmlinux.
    pub module: Option<Arc<str>>,
    /// Basename of the mapped file a user frame is in, when its mapping is known.
    pub binary: Option<Arc<str>>,
    pub line: Option<Arc<SourceLine>>,
    /// Why a user frame has no name and no binary (the symbolizer's words), for machine-readable records.
    pub unnamed: Option<&'static str>,
}

impl ResolvedFrame {
    pub fn unknown(addr: u64, kernel: bool) -> ResolvedFrame {
        ResolvedFrame {
            addr,
            kernel,
            sym: None,
            off: 0,
            size: None,
            module: None,
            binary: None,
            line: None,
            unnamed: None,
        }
    }

    /// The ftrace form: `func+0xOFF/0xSIZE [module]` for the kernel, `func+0xOFF [binary]` for user code,
    /// `0xADDR` for an unknown kernel frame, `0xADDR [binary]` for a user one with no symbol in a known
    /// mapping (a static function of a stripped libc) and `0xADDR [comm]` for one outside every known
    /// mapping.
    pub fn display<'a>(&'a self, comm: &'a str) -> Display<'a> {
        Display { frame: self, comm }
    }

    /// The name a flame graph groups by: the function without offset, `[binary]` when only the mapping is
    /// known, `[unknown]` otherwise (the convention of `stackcollapse-perf.pl`). A module's function is
    /// `func [module]`, as in the chain, so it is not merged with a same-named one of vmlinux or another
    /// module.
    pub fn flame_name(&self) -> String {
        match (&self.sym, &self.binary, &self.module) {
            (Some(s), _, Some(m)) if self.kernel => format!("{s} [{m}]"),
            (Some(s), _, _) => s.to_string(),
            (None, Some(b), _) => format!("[{b}]"),
            (None, None, _) => "[unknown]".to_string(),
        }
    }
}

/// A call chain's frames as the printers spell them, made by the first hit on that chain and reused by
/// every later one: a flood repeats a handful of chains, and re-spelling a dozen frames per hit (hex
/// digits, names, JSON escapes) was most of a printer's work. The tracer keeps one per distinct raw chain
/// (see the symbolizer's chain cache) and hands it with each hit; a hit without one is spelled afresh.
///
/// A user frame outside every known mapping prints the hit's comm (`0x7f00 [writer]`), and threads on one
/// chain can have different comms: such a chain's text is kept with the comm it was spelled for, and
/// spelled again for another.
#[derive(Debug, Default)]
pub struct Rendered {
    /// Some frame's text has the comm in it.
    pub(crate) needs_comm: bool,
    /// ftrace: the ip's text and the chain's ` => ` lines.
    pub(crate) text: RefCell<Text>,
    /// `--json`: `"ip":{...},"chain":[...]` (JSON frames never carry the comm).
    pub(crate) json: OnceCell<String>,
    /// `--format otlp-json`: the ip's and the chain's attributes (made only when no frame needs the comm).
    pub(crate) otlp: OnceCell<String>,
}

/// [`Rendered::text`].
#[derive(Debug, Default)]
pub(crate) struct Text {
    pub made: bool,
    /// The comm it was spelled for, when [`Rendered::needs_comm`].
    pub comm: String,
    pub ip: String,
    pub lines: String,
}

impl Rendered {
    /// An empty one for the chain of `ip` and `frames`.
    pub fn new(ip: &ResolvedFrame, frames: &[ResolvedFrame]) -> Rendered {
        Rendered {
            needs_comm: std::iter::once(ip)
                .chain(frames)
                .any(|f| !f.kernel && f.sym.is_none() && f.binary.is_none()),
            ..Rendered::default()
        }
    }
}

pub struct Display<'a> {
    frame: &'a ResolvedFrame,
    comm: &'a str,
}

impl fmt::Display for Display<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        self.frame.push_text(&mut s, self.comm);
        f.write_str(&s)
    }
}

impl ResolvedFrame {
    /// Appends the [`ResolvedFrame::display`] form to `out`: the one spelling of a frame, fast enough for
    /// the per-hit path.
    pub fn push_text(&self, out: &mut String, comm: &str) {
        self.spell(out, comm, |out, s| out.push_str(s));
    }

    /// [`ResolvedFrame::push_text`] for text output: every name in it (function, module, binary, comm)
    /// escaped by [`super::escape::push`].
    pub fn push_text_escaped(&self, out: &mut String, comm: &str) {
        self.spell(out, comm, super::escape::push);
    }

    /// The display form, each name appended with `name`.
    fn spell(&self, out: &mut String, comm: &str, name: fn(&mut String, &str)) {
        match &self.sym {
            Some(sym) => {
                name(out, sym);
                out.push_str("+0x");
                push_hex(out, self.off);
                if self.kernel {
                    if let Some(size) = self.size {
                        out.push_str("/0x");
                        push_hex(out, size);
                    }
                    if let Some(m) = &self.module {
                        bracketed(out, m, name);
                    }
                } else if let Some(b) = &self.binary {
                    bracketed(out, b, name);
                }
            }
            None => {
                out.push_str("0x");
                push_hex(out, self.addr);
                // The mapping the address is in, as JSON's `binary` says; the comm only when no mapping
                // is known, as the one hint left of whose code it was.
                if !self.kernel {
                    bracketed(out, self.binary.as_deref().unwrap_or(comm), name);
                }
            }
        }
    }

    /// The [`ResolvedFrame::display`] form escaped for text output.
    pub fn display_escaped(&self, comm: &str) -> String {
        let mut s = String::new();
        self.push_text_escaped(&mut s, comm);
        s
    }
}

fn bracketed(out: &mut String, s: &str, name: fn(&mut String, &str)) {
    out.push_str(" [");
    name(out, s);
    out.push(']');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_frames_print_with_their_binary() {
        let f = ResolvedFrame {
            sym: Some("main".into()),
            off: 0x1c,
            size: Some(0x40),
            binary: Some("writer".into()),
            ..ResolvedFrame::unknown(0x401c, false)
        };
        assert_eq!(f.display("comm").to_string(), "main+0x1c [writer]");
        let b = ResolvedFrame {
            binary: Some("libc.so.6".into()),
            ..ResolvedFrame::unknown(0x7f00, false)
        };
        assert_eq!(
            b.display("writer").to_string(),
            "0x7f00 [libc.so.6]",
            "a frame with no symbol names the mapping it is in, not the program"
        );
        assert_eq!(b.flame_name(), "[libc.so.6]");
        assert!(!Rendered::new(&f, std::slice::from_ref(&b)).needs_comm);
        let outside = ResolvedFrame::unknown(0x7f00, false);
        assert_eq!(outside.display("writer").to_string(), "0x7f00 [writer]");
        assert!(Rendered::new(&f, &[b, outside]).needs_comm);
    }
}
