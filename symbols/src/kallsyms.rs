//! The `/proc/kallsyms` text format: `ADDR TYPE NAME [\t[MODULE]]`, one symbol a line.
//!
//! kallsyms carries no sizes; [`crate::table::SymbolTable`] infers them from the next symbol's address.

use crate::columns::Builder;
use crate::error::{Error, LineProblem};
use crate::file::{self, Role};
use crate::symbol::Symbol;
use crate::table::SymbolTable;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// One kallsyms line's fields.
struct Line<'a> {
    addr: u64,
    type_char: char,
    name: &'a str,
    module: Option<&'a str>,
}

/// Parses one line; `Ok(None)` for a blank one, `Err` with what is wrong.
fn parse_line(line: &str) -> Result<Option<Line<'_>>, LineProblem> {
    let mut fields = line.split_ascii_whitespace();
    let Some(addr) = fields.next() else {
        return Ok(None);
    };
    let (Some(ty), Some(name)) = (fields.next(), fields.next()) else {
        return Err(LineProblem::MissingFields);
    };
    let addr = u64::from_str_radix(addr, 16).map_err(|_| LineProblem::BadAddress)?;
    let type_char = match ty.as_bytes() {
        [c] if c.is_ascii_alphabetic() || *c == b'?' => char::from(*c),
        [_] => return Err(LineProblem::TypeNotLetter),
        _ => return Err(LineProblem::TypeTooLong),
    };
    let module = match fields.next() {
        None => None,
        Some(m) if m.starts_with('[') && m.ends_with(']') && m.len() > 2 => {
            Some(&m[1..m.len() - 1])
        }
        Some(_) => return Err(LineProblem::TrailingText),
    };
    if fields.next().is_some() {
        return Err(LineProblem::TrailingText);
    }
    Ok(Some(Line {
        addr,
        type_char,
        name,
        module,
    }))
}

/// Calls `each` with every symbol line of `text`, whose first line is line `first + 1` of the file; the
/// first bad line is an error naming it. Returns the number of lines.
fn for_each_line<'a>(
    text: &'a str,
    first: usize,
    path: &Path,
    mut each: impl FnMut(Line<'a>),
) -> Result<usize, Error> {
    let mut count = 0;
    for (i, line) in text.lines().enumerate() {
        count = i + 1;
        match parse_line(line) {
            Ok(Some(l)) => each(l),
            Ok(None) => {}
            Err(problem) => {
                return Err(Error::Parse {
                    path: path.to_path_buf(),
                    line: first + i + 1,
                    problem,
                })
            }
        }
    }
    Ok(count)
}

/// Parses kallsyms text. Lines are `ffffffff81000000 T _text` or `... t name\t[module]`; blank lines are
/// skipped, anything else is an error naming the line (a truncated or foreign file must not half-load).
/// Module names are shared: one `Arc<str>` per module, not one string per symbol.
pub fn parse(text: &str, path: &Path) -> Result<Vec<Symbol>, Error> {
    // ~40 bytes a line: one allocation for the vector instead of a doubling series.
    let mut symbols = Vec::with_capacity(text.len() / 40);
    let mut modules: Modules = Modules::default();
    for_each_line(text, 0, path, |l| {
        symbols.push(Symbol {
            name: l.name.to_string(),
            addr: l.addr,
            size: None,
            type_char: l.type_char,
            module: l.module.map(|m| modules.intern(m)),
        })
    })?;
    Ok(symbols)
}

/// One shared name per module. kallsyms lists a module's symbols together, so the last one seen answers
/// almost every line.
#[derive(Default)]
struct Modules {
    last: Option<Arc<str>>,
    seen: HashMap<Box<str>, Arc<str>>,
}

impl Modules {
    fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(last) = self.last.as_ref().filter(|l| &***l == name) {
            return last.clone();
        }
        let shared = self
            .seen
            .entry(name.into())
            .or_insert_with(|| Arc::from(name))
            .clone();
        self.last = Some(shared.clone());
        shared
    }
}

/// Loads a kallsyms file into a table, refusing empty files and kptr_restrict-zeroed addresses. Only a
/// regular file of at most [`crate::file::TEXT_LIMIT`] bytes is read ([`crate::file`]).
///
/// The kernel generates `/proc/kallsyms` as it is read, which is most of the time this takes: this thread
/// reads it in pieces while a second one parses the pieces already read, so the parsing is done by the
/// time the kernel is.
pub fn load(path: &Path) -> Result<SymbolTable, Error> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(64);
    std::thread::scope(|scope| {
        let parser = scope.spawn(move || parse_pieces(rx, path));
        // A parser that stopped early (a bad line) drops its end of the channel, which stops the read.
        let read = file::read_chunks(path, Role::Kallsyms, CHUNK, |piece| tx.send(piece).is_ok());
        drop(tx);
        let parsed = match parser.join() {
            Ok(parsed) => parsed,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        // A read error explains a short or odd parse better than the parse error does.
        read.and(parsed)
    })
}

/// What one `read` of kallsyms asks for: small enough that the heap reuses the pieces the parser is done
/// with (no fresh pages to fault in), large enough that system calls are a small part of the read.
const CHUNK: usize = 64 << 10;

/// Parses kallsyms text arriving in pieces cut anywhere: whole lines are parsed as they arrive, the
/// cut line waits for its end.
fn parse_pieces(
    pieces: std::sync::mpsc::Receiver<Vec<u8>>,
    path: &Path,
) -> Result<SymbolTable, Error> {
    let not_utf8 = || Error::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ),
    };
    let mut b = Builder::with_capacity(1 << 17, 1 << 22);
    let mut nonzero = false;
    let mut lines = 0;
    let mut carry: Vec<u8> = Vec::new();
    let mut parse = |bytes: &[u8], lines: &mut usize| -> Result<(), Error> {
        let text = std::str::from_utf8(bytes).map_err(|_| not_utf8())?;
        *lines += for_each_line(text, *lines, path, |l| {
            nonzero |= l.addr != 0;
            b.push(l.name, l.addr, None, l.type_char, l.module);
        })?;
        Ok(())
    };
    for piece in pieces {
        let Some(cut) = piece.iter().rposition(|&c| c == b'\n') else {
            carry.extend_from_slice(&piece);
            continue;
        };
        // A UTF-8 character never spans a newline, so each run of whole lines is valid on its own.
        if carry.is_empty() {
            parse(&piece[..=cut], &mut lines)?;
        } else {
            carry.extend_from_slice(&piece[..=cut]);
            parse(&carry, &mut lines)?;
            carry.clear();
        }
        carry.extend_from_slice(&piece[cut + 1..]);
    }
    parse(&carry, &mut lines)?;
    checked(b, nonzero, path)
}

/// Refuses a file that parsed to no symbols at all.
pub(crate) fn non_empty(symbols: &[Symbol], path: &Path) -> Result<(), Error> {
    if symbols.is_empty() {
        return Err(Error::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// Like [`load`], on text already in memory (tests, fixtures). The lines go straight into the table's
/// columns: no string is allocated per symbol.
pub fn from_text(text: &str, path: &Path) -> Result<SymbolTable, Error> {
    // ~44 bytes a line, ~20 of them the name.
    let lines = text.len() / 44;
    let mut b = Builder::with_capacity(lines, lines * 22);
    let mut nonzero = false;
    for_each_line(text, 0, path, |l| {
        nonzero |= l.addr != 0;
        b.push(l.name, l.addr, None, l.type_char, l.module);
    })?;
    checked(b, nonzero, path)
}

/// The table, refusing a file with no symbols or only zero addresses (kptr_restrict).
fn checked(b: Builder, nonzero: bool, path: &Path) -> Result<SymbolTable, Error> {
    let table = SymbolTable::from_columns(b.finish(true));
    if table.is_empty() {
        return Err(Error::Empty {
            path: path.to_path_buf(),
        });
    }
    if !nonzero {
        return Err(Error::ZeroedAddresses {
            path: path.to_path_buf(),
        });
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("fixture")
    }

    #[test]
    fn parses_plain_and_module_lines() {
        let text = "ffffffff81000000 T _text\nffffffff83000000 D __start_init_stack\n\nffffffffc0001000 t foo_init\t[foo]\n";
        let syms = parse(text, p()).unwrap();
        assert_eq!(syms.len(), 3);
        assert_eq!(syms[0].name, "_text");
        assert_eq!(syms[0].addr, 0xffffffff81000000);
        assert_eq!(syms[1].type_char, 'D');
        assert_eq!(syms[2].module.as_deref(), Some("foo"));
        assert_eq!(syms[2].type_char, 't');
    }

    #[test]
    fn rejects_garbage_with_line_number() {
        let err = parse("ffffffff81000000 T ok\nhello world\n", p()).unwrap_err();
        match err {
            Error::Parse { line, .. } => assert_eq!(line, 2),
            other => panic!("unexpected {other:?}"),
        }
        assert!(parse("zzzz T x\n", p()).is_err());
        assert!(parse("ffff TT x\n", p()).is_err());
        assert!(parse("ffff T x junk\n", p()).is_err());
    }

    fn in_pieces(text: &str, size: usize) -> Result<SymbolTable, Error> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1024);
        for piece in text.as_bytes().chunks(size) {
            tx.send(piece.to_vec()).unwrap();
        }
        drop(tx);
        parse_pieces(rx, p())
    }

    #[test]
    fn pieces_cut_anywhere_parse_as_the_whole_text() {
        let text = "ffffffff81000000 T _text\nffffffff81000010 t caf\u{e9}_fn\n\nffffffffc0001000 t foo_init\t[foo]\nffffffffc0001040 t foo_exit\t[foo]";
        let whole = from_text(text, p()).unwrap();
        for size in 1..text.len() + 2 {
            let t = in_pieces(text, size).unwrap();
            assert!(t.iter().eq(whole.iter()), "pieces of {size}");
        }
        for size in [1, 7, 30] {
            match in_pieces("ffffffff81000000 T ok\n\nffff TT x\n", size) {
                Err(Error::Parse { line, .. }) => assert_eq!(line, 3, "pieces of {size}"),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(matches!(
            in_pieces("0000000000000000 T _text\n", 5),
            Err(Error::ZeroedAddresses { .. })
        ));
    }

    #[test]
    fn load_reads_a_file_as_from_text_parses_it() {
        let d =
            std::env::temp_dir().join(format!("ksymwatch-kallsyms-load-{}", std::process::id()));
        let mut text = String::new();
        for i in 0..20_000u64 {
            text.push_str(&format!("{:016x} t fn_{i}\n", 0xffffffff81000000 + i * 16));
        }
        std::fs::write(&d, &text).unwrap();
        let loaded = load(&d).unwrap();
        std::fs::remove_file(&d).unwrap();
        assert_eq!(loaded.len(), 20_000);
        assert!(loaded.iter().eq(from_text(&text, p()).unwrap().iter()));
        assert!(matches!(
            load(Path::new("/nonexistent/kallsyms")),
            Err(Error::Io { .. })
        ));
    }

    #[test]
    fn empty_and_zeroed_files_are_errors() {
        assert!(matches!(from_text("\n\n", p()), Err(Error::Empty { .. })));
        let zeroed = "0000000000000000 T _text\n0000000000000000 t foo\n";
        let err = from_text(zeroed, p()).unwrap_err();
        assert!(matches!(err, Error::ZeroedAddresses { .. }));
        assert!(err.to_string().contains("kptr_restrict"));
    }
}
