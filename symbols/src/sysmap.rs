//! `System.map`: the link-time symbol list the kernel build writes beside vmlinux.
//!
//! Same `ADDR TYPE NAME` lines as kallsyms but link-time addresses (KASLR not applied), no modules and
//! no sizes; sizes are inferred from the next symbol as for kallsyms.

use crate::error::{Error, LineProblem};
use crate::file::{self, Role};
use crate::kallsyms;
use crate::symbol::Symbol;
use crate::table::SymbolTable;
use std::path::Path;

/// Debian ships a one-line stand-in at `/boot/System.map-*` that points at the -dbg package.
pub fn is_placeholder(text: &str) -> bool {
    text.contains("The real System.map is in")
}

/// Parses System.map text; a `[module]` column is an error since System.map never has one (the file is
/// probably a saved kallsyms, whose addresses are runtime ones).
pub fn parse(text: &str, path: &Path) -> Result<Vec<Symbol>, Error> {
    if is_placeholder(text) {
        return Err(Error::Placeholder {
            path: path.to_path_buf(),
        });
    }
    let symbols = kallsyms::parse(text, path)?;
    if let Some(i) = symbols.iter().position(|s| s.module.is_some()) {
        return Err(Error::Parse {
            path: path.to_path_buf(),
            line: i + 1,
            problem: LineProblem::ModuleColumn,
        });
    }
    Ok(symbols)
}

/// Loads a System.map file into a table (link-time addresses). Only a regular file of at most
/// [`crate::file::TEXT_LIMIT`] bytes is read ([`crate::file`]).
pub fn load(path: &Path) -> Result<SymbolTable, Error> {
    from_text(&file::read_text(path, Role::SystemMap)?, path)
}

/// Like [`load`], on text already in memory.
pub fn from_text(text: &str, path: &Path) -> Result<SymbolTable, Error> {
    let symbols = parse(text, path)?;
    kallsyms::non_empty(&symbols, path)?;
    Ok(SymbolTable::new(symbols, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_link_time_map_with_sizes() {
        let text = "0000000000000000 D __per_cpu_start\nffffffff81000000 T _text\nffffffff81000000 T _stext\n\
                    ffffffff82a05000 D jiffies\nffffffff82a05008 d some_local\nffffffff82a05040 B end_thing\n";
        let t = from_text(text, Path::new("System.map")).unwrap();
        let j = t.lookup("jiffies", None).unwrap();
        assert_eq!(
            (j.addr, j.size, j.type_char),
            (0xffffffff82a05000, Some(8), 'D')
        );
        assert!(t.by_name("__per_cpu_start").next().is_some());
    }

    #[test]
    fn rejects_placeholder_modules_and_garbage() {
        let ph = "ffffffffffffffff B The real System.map is in the linux-image-6.1.0-1-amd64-dbg package\n";
        let e = from_text(ph, Path::new("m")).unwrap_err();
        assert!(matches!(e, Error::Placeholder { .. }), "{e}");
        assert!(e.to_string().contains("-dbg"), "{e}");
        assert!(from_text("ffffffff81000000 t f\t[mod]\n", Path::new("m")).is_err());
        assert!(from_text("hello\n", Path::new("m")).is_err());
        assert!(matches!(
            from_text("", Path::new("m")),
            Err(Error::Empty { .. })
        ));
    }
}
