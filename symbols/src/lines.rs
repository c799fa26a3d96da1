//! Code addresses to source lines: `addr -> [Frame { function, file, line, inlined }]` from the vmlinux
//! line tables and inline-call records, via `addr2line`.
//!
//! Building this reads line programs across the whole DWARF, so it is done only when asked:
//! [`crate::resolve::Resolver::lines`] builds it on first use. It reads straight from the shared mapping,
//! so the symbolizer can live beside the [`Vmlinux`] without borrowing it.

use crate::error::{DwarfProblem, Error};
use crate::vmlinux::Vmlinux;
use gimli::RunTimeEndian;
use memmap2::Mmap;
use std::ops::Deref;
use std::sync::Arc;

/// The whole mapping as a byte slice that can be cloned cheaply and never moves.
#[derive(Debug, Clone)]
struct SharedMap(Arc<Mmap>);

impl Deref for SharedMap {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

// SAFETY: the bytes live in an mmap owned by the Arc; moving or cloning `SharedMap` moves only the Arc
// pointer, never the mapped bytes, so derefs of any clone point at the same stable address until the last
// clone drops. This is the Arc case these traits document as sound.
unsafe impl gimli::StableDeref for SharedMap {}
// SAFETY: as above; a clone shares the same mapping.
unsafe impl gimli::CloneStableDeref for SharedMap {}

type Reader = gimli::EndianReader<RunTimeEndian, SharedMap>;

/// One frame at an address: the innermost inlined call first, the real (out-of-line) function last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// This frame was inlined into the next one; the last frame is never inlined.
    pub inlined: bool,
}

impl Frame {
    /// `file:line`, `file`, or `??` when the debug info does not say.
    pub fn location(&self) -> String {
        match (&self.file, self.line) {
            (Some(f), Some(l)) => format!("{f}:{l}"),
            (Some(f), None) => f.clone(),
            _ => "??".to_string(),
        }
    }
}

impl std::fmt::Display for Frame {
    /// `function at file:line`, with `(inlined)` marking inlined frames, as `addr2line -fi` would show.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.function.as_deref().unwrap_or("??"))?;
        match (&self.file, self.line) {
            (Some(file), Some(line)) => write!(f, " at {file}:{line}")?,
            (Some(file), None) => write!(f, " at {file}")?,
            _ => write!(f, " at ??")?,
        }
        if self.inlined {
            write!(f, " (inlined)")?;
        }
        Ok(())
    }
}

/// The line symbolizer for one vmlinux.
pub struct LineSymbolizer {
    ctx: addr2line::Context<Reader>,
    path: std::path::PathBuf,
}

impl std::fmt::Debug for LineSymbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineSymbolizer")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl LineSymbolizer {
    pub fn new(vm: &Vmlinux) -> Result<LineSymbolizer, Error> {
        if !vm.has_debug_info() {
            return Err(Error::NoDebugInfo {
                path: vm.path().to_path_buf(),
            });
        }
        let endian = crate::dwarf::runtime_endian(vm.little_endian());
        let whole = Reader::new(SharedMap(vm.map().clone()), endian);
        let dwarf = gimli::Dwarf::load(|id| -> Result<Reader, Error> {
            Ok(match vm.section_range(id.name())? {
                Some(r) => whole.range(r),
                None => whole.range(0..0),
            })
        })?;
        let ctx = addr2line::Context::from_dwarf(dwarf).map_err(|e| Error::Dwarf {
            path: vm.path().to_path_buf(),
            problem: DwarfProblem::Read(e),
        })?;
        Ok(LineSymbolizer {
            ctx,
            path: vm.path().to_path_buf(),
        })
    }

    /// The frames at a *link-time* address (the file's addresses; [`crate::resolve::Resolver::frames`] takes
    /// runtime ones). Empty when no line information covers the address (assembly, or another file).
    pub fn frames(&self, link_addr: u64) -> Result<Vec<Frame>, Error> {
        let err = |e: gimli::Error| Error::Dwarf {
            path: self.path.clone(),
            problem: DwarfProblem::Read(e),
        };
        let mut iter = self
            .ctx
            .find_frames(link_addr)
            .skip_all_loads()
            .map_err(err)?;
        let mut out = Vec::new();
        while let Some(frame) = iter.next().map_err(err)? {
            let function = match &frame.function {
                Some(name) => Some(name.raw_name().map_err(err)?.into_owned()),
                None => None,
            };
            out.push(Frame {
                function,
                file: frame
                    .location
                    .as_ref()
                    .and_then(|l| l.file)
                    .map(str::to_string),
                line: frame.location.as_ref().and_then(|l| l.line),
                inlined: true,
            });
        }
        if let Some(last) = out.last_mut() {
            last.inlined = false;
        }
        Ok(out)
    }
}
