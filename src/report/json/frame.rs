//! The JSON spelling of an address and of one frame of a chain: the leaf that the record and the summary
//! types both build on.

use serde::{Serialize, Serializer};

use super::hit::unnamed;
use crate::report::ResolvedFrame;

/// An address as a `0x` hex string.
#[derive(Debug, Clone, Copy)]
pub struct Hex(pub u64);

impl Serialize for Hex {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("0x{:x}", self.0))
    }
}

#[derive(Serialize)]
pub struct Frame<'a> {
    pub addr: Hex,
    pub kernel: bool,
    pub sym: Option<&'a str>,
    pub off: u64,
    pub size: Option<u64>,
    pub module: Option<&'a str>,
    pub binary: Option<&'a str>,
    /// `--lines`: `file:line` of the frame.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<&'a str>,
    /// `--lines`: functions inlined at this frame, innermost first, as `func (file:line) [inlined]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inlined: Option<&'a [String]>,
    /// A user frame with no name and no binary: why (e.g. the process's maps could not be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unnamed: Option<&'a str>,
}

impl<'a> From<&'a ResolvedFrame> for Frame<'a> {
    fn from(f: &'a ResolvedFrame) -> Self {
        Frame {
            addr: Hex(f.addr),
            kernel: f.kernel,
            sym: f.sym.as_deref(),
            off: f.off,
            size: f.size,
            module: f.module.as_deref(),
            binary: f.binary.as_deref(),
            line: f.line.as_ref().map(|l| l.location.as_str()),
            inlined: f
                .line
                .as_ref()
                .map(|l| l.inlined.as_slice())
                .filter(|i| !i.is_empty()),
            unnamed: unnamed(f),
        }
    }
}
