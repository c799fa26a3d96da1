//! A member path below a variable: `.name.nodename`, `[3].x`. Parsed by the caller's target grammar and
//! resolved against DWARF (or BTF) type information.

/// One step below a variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathElem {
    /// `.field`
    Field(String),
    /// `[N]`
    Index(u64),
}

impl std::fmt::Display for PathElem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PathElem::Field(name) => write!(f, ".{name}"),
            PathElem::Index(i) => write!(f, "[{i}]"),
        }
    }
}
