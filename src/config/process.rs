//! Targets inside one process (`write -p PID`, `write ... -- CMD`, `resolve --pid PID`): the TARGET's
//! symbol looked up in the process's own binaries by `ksymwatch_symbols::process`, with the CLI's policy on
//! top as for kernel targets (`crate::config::symbols`): dotted names split longest-symbol-first, `+OFF`
//! applied after the member path, and the exit code each failure gets. [`InProcess`] is also what
//! `resolve --pid` prints, as `key: value` lines or one JSON object.

use std::fmt;
use std::path::Path;

use ksymwatch_symbols::process::{self, ProcessError, ProcessTarget};
use serde::Serialize;

use crate::error::{Error, ExitCode, Result};
use crate::model::target::{Base, Target};

/// Where `/proc` is.
pub const PROC: &str = "/proc";

/// A target resolved in a process, `+OFF` applied.
#[derive(Debug, Clone)]
pub struct InProcess {
    /// The TARGET as given.
    pub text: String,
    pub pid: u32,
    /// The process's name, when it could be read.
    pub comm: Option<String>,
    pub found: ProcessTarget,
    /// Where the target is: the symbol's runtime address plus the member offset and `+OFF`.
    pub addr: u64,
    /// Bytes from the symbol's start to `addr`.
    pub offset: u64,
    /// Bytes from `addr` to the end of the object, when known.
    pub size: Option<u64>,
    /// The C type at `addr`; `None` when unknown, or when `+OFF` lands inside it.
    pub type_name: Option<String>,
}

/// Resolves a symbol TARGET in process `pid` (with `/proc` at `proc_root`). `/LEN` is left to the caller.
pub fn resolve(proc_root: &Path, pid: u32, target: &Target) -> Result<InProcess> {
    let Base::Symbol { object, index, .. } = &target.base else {
        return Err(Error::usage(format!(
            "`{}` is an address, not a symbol; there is nothing to look up",
            target.text
        )));
    };
    let splits = target.symbol_splits();
    let mut last = None;
    for (i, (name, rest)) in splits.iter().enumerate() {
        match process::resolve(proc_root, pid, object.as_deref(), name, *index, rest) {
            // `a.b` is no symbol: try `a` with the field `.b`. The bare name, last, has the error to show.
            Err(ProcessError::Unknown { .. }) if i + 1 < splits.len() => continue,
            r => {
                last = Some(r);
                break;
            }
        }
    }
    let Some(found) = last else {
        return Err(Error::usage(format!("`{}` names no symbol", target.text)));
    };
    let found = found.map_err(|e| process_error(e, &target.text))?;
    let comm = std::fs::read_to_string(proc_root.join(format!("{pid}/comm")))
        .ok()
        .map(|c| c.trim_end().to_string());
    let member_offset = found.addr.wrapping_sub(found.symbol_addr());
    let mut r = InProcess {
        text: target.text.clone(),
        pid,
        comm,
        addr: found.addr,
        offset: member_offset,
        size: found.size,
        type_name: found.type_name.clone(),
        found,
    };
    let off = target.offset;
    if off != 0 {
        if let Some(size) = r.size {
            if off >= size {
                let what = format!(
                    "{}{}",
                    r.found.symbol,
                    r.found.member.as_ref().map_or("", |m| m.path.as_str())
                );
                return Err(Error::usage(format!(
                    "`{}`: offset 0x{off:x} is past the end of `{what}` (size 0x{size:x}); name what is \
                     there, or give the address as 0xADDR",
                    target.text
                )));
            }
        }
        let overflow = || Error::usage(format!("`{}`: address overflows", target.text));
        r.addr = r.addr.checked_add(off).ok_or_else(overflow)?;
        r.offset = r.offset.checked_add(off).ok_or_else(overflow)?;
        r.size = r.size.map(|s| s - off);
        r.type_name = None;
    }
    Ok(r)
}

/// The exit code and wording of a failure: a process that is not there is bad input (2), one we may not
/// read is not permitted (4), a failing read of its maps a run-time error (1).
fn process_error(e: ProcessError, text: &str) -> Error {
    match e {
        ProcessError::NotPermitted { .. } => Error::from_cause(ExitCode::NotPermitted, e),
        ProcessError::Io { .. } => Error::from_cause(ExitCode::Runtime, e),
        // A member-path message names the variable, not the target as typed.
        ProcessError::Field(_) => Error::usage(format!("`{text}`")).caused_by(e),
        e => Error::from_cause(ExitCode::Usage, e),
    }
}

/// Whether `e` says that the target's `OBJECT:` is not mapped in the process yet (a command still being
/// started may map it later).
pub fn is_not_mapped_yet(e: &Error) -> bool {
    std::error::Error::source(e)
        .and_then(|c| c.downcast_ref::<ProcessError>())
        .is_some_and(ProcessError::is_not_mapped_yet)
}

impl InProcess {
    /// One JSON object; addresses are `"0x..."` strings as everywhere in ksymwatch's JSON, unknown values
    /// `null`.
    pub fn to_json(&self) -> String {
        let hex = |v: u64| format!("0x{v:x}");
        let f = &self.found;
        let json = Json {
            target: &self.text,
            pid: self.pid,
            comm: self.comm.as_deref(),
            object: f.object.to_string_lossy().into_owned(),
            object_name: f.object_name(),
            is_exe: f.is_exe,
            symbol: &f.symbol,
            type_char: f.type_char.to_string(),
            section: f.section.as_deref(),
            file_vaddr: hex(f.file_vaddr),
            load_bias: hex(f.bias),
            symbol_addr: hex(f.symbol_addr()),
            runtime_addr: hex(self.addr),
            offset: self.offset,
            size: self.size,
            symbol_size: f.symbol_size,
            r#type: self.type_name.as_deref(),
            member: f.member.as_ref().map(|m| m.path.as_str()),
            debug_info: f
                .debug_file
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned()),
            notes: &f.notes,
        };
        // Plain strings, numbers and options: nothing here can fail to serialize.
        serde_json::to_string(&json).unwrap_or_default()
    }
}

/// The JSON shape of `resolve --pid`, in this field order.
#[derive(Serialize)]
struct Json<'a> {
    target: &'a str,
    pid: u32,
    comm: Option<&'a str>,
    object: String,
    object_name: String,
    is_exe: bool,
    symbol: &'a str,
    type_char: String,
    section: Option<&'a str>,
    file_vaddr: String,
    load_bias: String,
    symbol_addr: String,
    runtime_addr: String,
    offset: u64,
    size: Option<u64>,
    symbol_size: Option<u64>,
    r#type: Option<&'a str>,
    member: Option<&'a str>,
    debug_info: Option<String>,
    notes: &'a [String],
}

impl fmt::Display for InProcess {
    /// The human form of `resolve --pid`: one `key: value` line each, like the kernel form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Names and paths come from the process and its files: escaped, so each stays on its line.
        use crate::report::escape::escaped;
        let t = &self.found;
        let unknown = || "unknown".to_string();
        writeln!(f, "target:       {}", escaped(&self.text))?;
        match &self.comm {
            Some(c) => writeln!(f, "process:      {} ({})", self.pid, escaped(c))?,
            None => writeln!(f, "process:      {}", self.pid)?,
        }
        writeln!(
            f,
            "object:       {}{}",
            escaped(&t.object.display().to_string()),
            if t.is_exe { " (executable)" } else { "" }
        )?;
        writeln!(f, "symbol:       {}", escaped(&t.symbol))?;
        writeln!(
            f,
            "section:      {}",
            escaped(t.section.as_deref().unwrap_or("unknown"))
        )?;
        writeln!(f, "file vaddr:   0x{:016x}", t.file_vaddr)?;
        writeln!(f, "load bias:    0x{:016x}", t.bias)?;
        writeln!(f, "runtime addr: 0x{:016x}", self.addr)?;
        writeln!(f, "offset:       0x{:x}", self.offset)?;
        writeln!(
            f,
            "size:         {}",
            self.size.map_or_else(unknown, |n| n.to_string())
        )?;
        writeln!(
            f,
            "type:         {} ({})",
            escaped(self.type_name.as_deref().unwrap_or("unknown")),
            t.type_char
        )?;
        if let Some(m) = &t.member {
            writeln!(
                f,
                "member:       {} at offset 0x{:x}",
                escaped(&m.path),
                m.offset
            )?;
        }
        write!(
            f,
            "debug info:   {}",
            escaped(
                &t.debug_file
                    .as_ref()
                    .map_or_else(|| "none".to_string(), |p| p.display().to_string())
            )
        )?;
        for n in &t.notes {
            write!(f, "\nnote:         {}", escaped(n))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::watch::resolve_in_process_at;
    use crate::model::target::parse;
    use crate::model::watch::Access;
    use ksymwatch_symbols::testing::fake_proc::{standard, LIBFOO, PIE};

    #[test]
    fn a_watch_takes_its_length_from_the_symbol_and_its_label_from_the_target() {
        let (f, _) = standard("config-len");
        let watch = |text: &str| {
            resolve_in_process_at(&f.root, 42, &parse(text).unwrap(), Access::Write).unwrap()
        };
        let r = watch("counter");
        assert_eq!(
            (r.watch.label.as_str(), r.watch.addr, r.watch.len),
            ("counter", PIE + 0x4010, 8)
        );
        assert!(r.warnings.is_empty());
        // A 4-byte symbol, and a 64-byte one entered 4 bytes in.
        assert_eq!(watch("dup@1").watch.len, 4);
        let r = watch("big+4");
        assert_eq!((r.watch.addr, r.watch.len), (PIE + 0x4044, 4));
        let r = watch("libfoo.so.1:foo_var");
        assert_eq!(
            (r.watch.label.as_str(), r.watch.addr, r.watch.len),
            ("libfoo.so.1:foo_var", LIBFOO + 0x2010, 4)
        );
        // /LEN past the object is allowed, and said; code is allowed, and said.
        let r = watch("dup@0/8");
        assert_eq!((r.watch.len, r.warnings.len()), (8, 1));
        assert!(
            r.warnings[0].contains("is 4 bytes but /8"),
            "{:?}",
            r.warnings
        );
        let r = watch("main");
        assert!(
            r.warnings[0].contains("text symbol (T)"),
            "{:?}",
            r.warnings
        );
        // A raw address needs no lookup.
        assert_eq!(watch("0x1000").watch.addr, 0x1000);
    }

    #[test]
    fn refusals_keep_their_exit_codes() {
        let (f, _) = standard("config-errors");
        let err = |text: &str, pid| {
            resolve_in_process_at(&f.root, pid, &parse(text).unwrap(), Access::Write).unwrap_err()
        };
        let e = err("big+64", 42);
        assert!(e.to_string().contains("past the end of `big`"), "{e}");
        let e = err("counter+4/8", 42);
        assert!(e.to_string().contains("naturally aligned"), "{e}");
        let e = err("libnothere:x", 42);
        assert!(is_not_mapped_yet(&e));
        assert_eq!(e.code, ExitCode::Usage);
        let e = err("nosuch", 42);
        assert!(!is_not_mapped_yet(&e));
        assert!(e
            .to_string()
            .starts_with("unknown symbol `nosuch` in process 42"));
        let e = err("counter", 99);
        assert_eq!(
            (e.code, e.to_string().as_str()),
            (
                ExitCode::Usage,
                "no process 99; give the pid of a running process (pgrep NAME)"
            )
        );
        // Fields without DWARF: the fix is named.
        let e = err("counter.hits", 42);
        assert!(e.to_string().contains("rebuild it with -g"), "{e}");
    }

    #[test]
    fn resolve_prints_every_address_and_where_it_came_from() {
        let (f, app) = standard("config-print");
        let r = resolve(&f.root, 42, &parse("counter+2").unwrap()).unwrap();
        assert_eq!(
            r.to_string(),
            format!(
                "target:       counter+2\nprocess:      42\nobject:       {} (executable)\nsymbol:       counter\n\
                 section:      .data\nfile vaddr:   0x0000000000004010\nload bias:    0x0000555555550000\n\
                 runtime addr: 0x0000555555554012\noffset:       0x2\nsize:         6\ntype:         unknown (D)\n\
                 debug info:   none",
                app.display()
            )
        );
        let j: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(j["runtime_addr"], "0x555555554012");
        assert_eq!(j["symbol_addr"], "0x555555554010");
        assert_eq!(j["file_vaddr"], "0x4010");
        assert_eq!(j["load_bias"], "0x555555550000");
        assert_eq!(
            (j["offset"].as_u64(), j["size"].as_u64()),
            (Some(2), Some(6))
        );
        assert!(j["type"].is_null() && j["member"].is_null() && j["comm"].is_null());
        assert_eq!(j["object_name"], "app");
    }

    /// A process name or an ELF file's symbol name with control characters cannot add lines to
    /// `resolve --pid`'s answer (issue 38 item 6): they are escaped; JSON keeps them as they are.
    #[test]
    fn resolve_escapes_names_from_the_process_and_its_files() {
        let (f, _) = standard("config-escape");
        let mut r = resolve(&f.root, 42, &parse("counter").unwrap()).unwrap();
        r.comm = Some("x\n => evil".into());
        r.found.symbol = "sym\u{1b}[2J\r".into();
        let text = r.to_string();
        assert_eq!(text.lines().count(), 12, "{text}");
        assert!(text.contains("process:      42 (x\\n => evil)\n"), "{text}");
        assert!(text.contains("symbol:       sym\\x1b[2J\\r\n"), "{text}");
        let j: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(j["comm"], "x\n => evil");
    }
}
