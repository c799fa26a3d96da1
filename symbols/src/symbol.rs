//! One symbol: a name, an address, an optional size and the `nm`-style type letter.

use std::sync::Arc;

/// What kind of memory a symbol names, from its `nm` type letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SymbolKind {
    /// `T`/`t`, `W`/`w`: code.
    Text,
    /// `D`/`d`, `G`/`g`: initialized data.
    Data,
    /// `B`/`b`, `S`/`s`: zero-initialized data.
    Bss,
    /// `R`/`r`, `V`/`v`: read-only data.
    ReadOnly,
    /// `A`/`a`: an absolute value, not an address in a section.
    Absolute,
    /// Anything else (`U`, `N`, `?`...).
    Other,
}

impl SymbolKind {
    pub fn from_type_char(c: char) -> SymbolKind {
        match c.to_ascii_uppercase() {
            'T' | 'W' => SymbolKind::Text,
            'D' | 'G' => SymbolKind::Data,
            'B' | 'S' => SymbolKind::Bss,
            'R' | 'V' => SymbolKind::ReadOnly,
            'A' => SymbolKind::Absolute,
            _ => SymbolKind::Other,
        }
    }

    /// Data a watchpoint makes sense on (a store may land there).
    pub fn is_data(self) -> bool {
        matches!(
            self,
            SymbolKind::Data | SymbolKind::Bss | SymbolKind::ReadOnly
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    pub name: String,
    pub addr: u64,
    /// Known size in bytes; for kallsyms it is inferred from the next symbol when the table is built.
    pub size: Option<u64>,
    /// The `nm` type letter as the source gave it (lower case = file-local).
    pub type_char: char,
    /// The module for `[module]`-suffixed kallsyms lines; `None` for vmlinux. Shared: a module's thousands
    /// of symbols hold one name, and a frame naming it takes a reference, not a copy.
    pub module: Option<Arc<str>>,
}

impl Symbol {
    pub fn kind(&self) -> SymbolKind {
        SymbolKind::from_type_char(self.type_char)
    }

    /// Global (upper-case type letter) rather than file-local.
    pub fn is_global(&self) -> bool {
        self.type_char.is_ascii_uppercase()
    }
}
