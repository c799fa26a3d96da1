//! The command-line layer: clap argument types (`args`, a value parsed as it enters through `parsed`),
//! their conversion into the plain request planning takes (`request`), launch mode's command as planning
//! starts it (`launch`), one module per subcommand (`watch` has `config::plan` make the plan, which
//! `execute` arms; `prefetch` is the work it overlaps with planning), opening the files named for output
//! (`output_file`), and the one place an error becomes a line on stderr and a documented exit code.
//!
//! May use every other layer; nothing outside `cli/` imports it.

mod advice;
pub(crate) mod args;
mod check;
pub(crate) mod duration;
mod execute;
mod gives_way;
mod launch;
mod otlp;
mod output_file;
mod parsed;
mod parts;
mod prefetch;
mod request;
mod resolve;
mod ring_size;
mod watch;

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

use clap::Parser;

pub use args::{Cli, Command};

use crate::error::Result;
use crate::model::watch::Access;
use crate::stderr;

/// Parses arguments, runs, and returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            if e.kind() == clap::error::ErrorKind::InvalidUtf8 {
                let args: Vec<OsString> = std::env::args_os().collect();
                if let Some(which) = not_utf8(&args) {
                    stderr::line(format_args!(
                        "ksymwatch: error: {which} is not UTF-8: options, names and targets are read as \
                         UTF-8 (a process name with other bytes cannot be given to --comm); see \
                         `ksymwatch --help`"
                    ));
                    return crate::error::ExitCode::Usage as i32;
                }
            }
            // One line, like every other error, so scripts can log it as is: clap's message up to its first
            // blank line, folded.
            let text = e.render().to_string();
            let message: Vec<&str> = text
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            let message = message.join(" ");
            stderr::line(format_args!(
                "ksymwatch: {}; see `ksymwatch --help`",
                message.trim_end_matches('.')
            ));
            return crate::error::ExitCode::Usage as i32;
        }
        Err(e) => {
            // --help and --version go to stdout and are not errors.
            let _ = e.print();
            return 0;
        }
    };
    let result = run(cli);
    // The symbol cache is written once the watch is armed; the process must not end before it is.
    ksymwatch_symbols::cache::finish_writes();
    match result {
        Ok(code) => code,
        Err(e) => {
            // An error can quote a name from the user's files or a process (a symbol, a path, a comm):
            // escaped, so it stays the one line it is meant to be.
            let text = e.to_string();
            stderr::line(format_args!(
                "ksymwatch: error: {}",
                crate::report::escape::escaped(&text)
            ));
            e.code as i32
        }
    }
}

/// The first argument of `args` (the program's own name first) that is not UTF-8, named for an error: its
/// position, its bytes escaped, and the option before it. Arguments after `--` (a command to launch,
/// passed on as they are) are not looked at.
fn not_utf8(args: &[OsString]) -> Option<String> {
    let mut before: Option<&str> = None;
    for (i, arg) in args.iter().enumerate().skip(1) {
        match arg.to_str() {
            Some("--") => return None,
            Some(text) => before = Some(text),
            None => {
                let escaped: String = arg
                    .as_bytes()
                    .iter()
                    .flat_map(|&b| std::ascii::escape_default(b))
                    .map(char::from)
                    .collect();
                return Some(match before.filter(|b| b.starts_with('-')) {
                    Some(option) => format!("argument {i} (`{escaped}`, after `{option}`)"),
                    None => format!("argument {i} (`{escaped}`)"),
                });
            }
        }
    }
    None
}

/// Runs a command; the exit status on success is 0, except for a launched command's own.
pub fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Write(args) => watch::run(args, Access::Write),
        Command::Rw(args) => watch::run(args, Access::ReadWrite),
        Command::Resolve(args) => resolve::run(args).map(|()| 0),
        Command::Check { json } => check::run(json).map(|()| 0),
    }
}

/// Writes a command's whole answer to stdout. A full disk is an error (exit 1) like any failed output; a
/// closed pipe (`| head -1`) is a normal end, as in `write`.
fn print_answer(text: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(crate::error::Error::runtime("writing output to stdout").caused_by(e)),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStringExt;

    use super::*;

    fn args(list: &[&[u8]]) -> Vec<OsString> {
        list.iter()
            .map(|a| OsString::from_vec(a.to_vec()))
            .collect()
    }

    /// The first argument that is not UTF-8 is named by its place, its bytes and the option before it;
    /// a launched command's arguments (after `--`) are its own.
    #[test]
    fn the_argument_that_is_not_utf8_is_named() {
        let comm = args(&[b"ksymwatch", b"write", b"--comm", b"\xffab", b"x"]);
        assert_eq!(
            not_utf8(&comm).as_deref(),
            Some("argument 3 (`\\xffab`, after `--comm`)")
        );
        let target = args(&[b"ksymwatch", b"write", b"-p", b"1", b"va\xe9r"]);
        assert_eq!(
            not_utf8(&target).as_deref(),
            Some("argument 4 (`va\\xe9r`)")
        );
        let launched = args(&[b"ksymwatch", b"write", b"x", b"--", b"cat", b"\xff"]);
        assert_eq!(not_utf8(&launched), None);
    }
}
