//! Turning a sample's raw addresses into named frames, once per hit, for every printer. Kernel frames come
//! from the symbol table; user frames from the writer's own mappings ([`crate::usersym`]). Printers only
//! format a [`ResolvedFrame`]; none looks an address up itself, so all of them agree on every name.

use std::fmt;

use ksymwatch_symbols::SymbolTable;

use crate::record::{Context, Sample};
use crate::usersym::UserSymbols;

/// A source position for a kernel frame. Reserved for a `--lines` source (DWARF line tables): nothing fills
/// it yet, and printers print it only when it is there.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SourceLine {
    pub file: String,
    pub line: u32,
}

/// One frame with whatever is known about it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResolvedFrame {
    pub addr: u64,
    /// The frame ran in the kernel (otherwise user space; hypervisor and guest frames count as user, and
    /// stay unnamed).
    pub kernel: bool,
    /// Function name, demangled for user code; `None` when unknown.
    pub sym: Option<String>,
    /// Offset of `addr` into `sym` (0 when `sym` is unknown).
    pub off: u64,
    pub size: Option<u64>,
    /// Kernel module for kernel frames outside vmlinux.
    pub module: Option<String>,
    /// Basename of the mapped file a user frame is in, when its mapping is known.
    pub binary: Option<String>,
    pub line: Option<SourceLine>,
}

impl ResolvedFrame {
    fn unknown(addr: u64, kernel: bool) -> ResolvedFrame {
        ResolvedFrame {
            addr,
            kernel,
            sym: None,
            off: 0,
            size: None,
            module: None,
            binary: None,
            line: None,
        }
    }

    /// The ftrace form: `func+0xOFF/0xSIZE [module]` for the kernel, `func+0xOFF [binary]` for user code,
    /// `0xADDR` for an unknown kernel frame and `0xADDR [comm]` for an unknown user one.
    pub fn display<'a>(&'a self, comm: &'a str) -> Display<'a> {
        Display { frame: self, comm }
    }

    /// The name a flame graph groups by: the function without offset, `[binary]` when only the mapping is
    /// known, `[unknown]` otherwise (the convention of `stackcollapse-perf.pl`).
    pub fn flame_name(&self) -> String {
        match (&self.sym, &self.binary) {
            (Some(s), _) => s.clone(),
            (None, Some(b)) => format!("[{b}]"),
            (None, None) => "[unknown]".to_string(),
        }
    }
}

pub struct Display<'a> {
    frame: &'a ResolvedFrame,
    comm: &'a str,
}

impl fmt::Display for Display<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fr = self.frame;
        match &fr.sym {
            Some(sym) => {
                write!(f, "{sym}+0x{:x}", fr.off)?;
                if fr.kernel {
                    if let Some(size) = fr.size {
                        write!(f, "/0x{size:x}")?;
                    }
                    if let Some(m) = &fr.module {
                        write!(f, " [{m}]")?;
                    }
                } else if let Some(b) = &fr.binary {
                    write!(f, " [{b}]")?;
                }
            }
            None => {
                write!(f, "0x{:x}", fr.addr)?;
                if !fr.kernel {
                    write!(f, " [{}]", self.comm)?;
                }
            }
        }
        Ok(())
    }
}

/// The one place addresses become names.
pub struct Symbolizer<'a> {
    kernel: &'a SymbolTable,
    user: Option<UserSymbols>,
}

impl<'a> Symbolizer<'a> {
    /// Kernel frames only; user frames stay addresses.
    pub fn new(kernel: &'a SymbolTable) -> Symbolizer<'a> {
        Symbolizer { kernel, user: None }
    }

    /// Also names user frames from each writer's mappings.
    pub fn with_user(kernel: &'a SymbolTable, user: UserSymbols) -> Symbolizer<'a> {
        Symbolizer {
            kernel,
            user: Some(user),
        }
    }

    /// Names the writer's ip and every frame of its chain, into `chain` (cleared first).
    pub fn resolve(&mut self, sample: &Sample, chain: &mut Vec<ResolvedFrame>) -> ResolvedFrame {
        chain.clear();
        for f in &sample.frames {
            chain.push(self.frame(sample.pid, f.addr, f.context == Context::Kernel));
        }
        self.frame(sample.pid, sample.ip, sample.in_kernel())
    }

    pub fn frame(&mut self, pid: u32, addr: u64, kernel: bool) -> ResolvedFrame {
        let mut fr = ResolvedFrame::unknown(addr, kernel);
        if kernel {
            if let Some(s) = self.kernel.symbolize(addr) {
                fr.sym = Some(s.symbol.name.clone());
                fr.off = s.offset;
                fr.size = s.symbol.size;
                fr.module = s.symbol.module.clone();
            }
        } else if let Some(user) = &mut self.user {
            if let Some(u) = user.lookup(pid, addr) {
                fr.binary = Some(u.binary);
                if let Some((sym, off, size)) = u.sym {
                    fr.sym = Some(sym);
                    fr.off = off;
                    fr.size = size;
                }
            }
        }
        fr
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ksymwatch_symbols::kallsyms;
    use std::path::Path;

    #[test]
    fn kernel_frames_print_like_kallsyms_symbolize() {
        let table = kallsyms::from_text(
            "ffffffff81000000 T read_zero\nffffffff81000100 T end\nffffffffc0000000 t helper\t[mod]\nffffffffc0000100 t helper_end\t[mod]\n",
            Path::new("fixture"),
        )
        .unwrap();
        let mut s = Symbolizer::new(&table);
        let f = s.frame(1, 0xffffffff81000077, true);
        assert_eq!(f.display("x").to_string(), "read_zero+0x77/0x100");
        assert_eq!(f.flame_name(), "read_zero");
        let m = s.frame(1, 0xffffffffc0000001, true);
        assert_eq!(m.display("x").to_string(), "helper+0x1/0x100 [mod]");
        let unknown = s.frame(1, 0xffffffffdead0000, true);
        assert_eq!(unknown.display("x").to_string(), "0xffffffffdead0000");
        assert_eq!(unknown.flame_name(), "[unknown]");
        let user = s.frame(1, 0x401000, false);
        assert_eq!(user.display("writer").to_string(), "0x401000 [writer]");
    }

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
        assert_eq!(b.display("comm").to_string(), "0x7f00 [comm]");
        assert_eq!(b.flame_name(), "[libc.so.6]");
    }
}
