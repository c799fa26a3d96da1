//! `--on uretprobe:PATH:FUNC` and `--on uprobe:PATH:FUNC:argN`: objects as a program allocates them. The
//! functions are placed in the watched process's files ([`ksymwatch_symbols::uprobe`]: a path, or a
//! library it maps; for `-- CMD`, stopped at its exec, a library it links), the object's type comes from
//! the program's DWARF (or the allocating library's), and the calls that end an object from `--free` or,
//! for the malloc family and C++'s `operator new`, their usual partners. Whatever cannot be placed is
//! exit 2 here, before anything is armed.

use std::path::Path;

use ksymwatch_symbols::uprobe::{self as place, Placement};
use ksymwatch_symbols::{CastType, MemberInfo, PathElem};

use crate::config::objects::{self, Allocators, Reports, SizeArgs, UserArg, UserProbe};
use crate::config::watch::OnMember;
use crate::error::{Error, Result};
use crate::model::scope::Pid;
use crate::model::target::{self, Base, Target};
use crate::perf::bpf::objects::{
    regs, Attach, Probe, PtrAt, Select, SizeFrom, StashSize, UserAlloc, UserProbes,
};

use super::options::OnRequest;
use super::Placed;
use super::Scope;

/// Where a free slot's breakpoint waits in the process: its first page, which is never mapped
/// (`vm.mmap_min_addr`), so nothing can write there.
pub const USER_PARK: u64 = 0x1000;

/// Plans a user-space source in the process `scope` watches: a launched command, or the one `-p` process
/// (each process has its own addresses); without one there is nothing to place the probes in. The
/// target's member is placed by its type, left for the stage to size.
pub fn in_process(on: &OnRequest, probe: &UserProbe, scope: &Scope) -> Result<Placed> {
    // A launched command is read by its own path (which gives `$ORIGIN` for its libraries), its
    // libraries placed as the loader will map them; a running process through /proc, where its mappings
    // are.
    let (pid, launched) = match scope {
        Scope::Launched(c) => (c.pid(), true),
        Scope::Processes(p) if p.len() > 1 => {
            return Err(Error::usage(format!(
                "--on {}: one process at a time (each has its own addresses); give one -p PID",
                on.source
            )))
        }
        Scope::Processes(p) if !p.is_empty() => (p[0], false),
        Scope::Processes(_) | Scope::System => {
            return Err(Error::usage(format!(
            "--on {probe}: a user-space source needs the process whose objects to watch: give -p \
                 PID, or start it with -- CMD"
        )))
        }
    };
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map_err(|e| {
        Error::usage(format!(
            "--on {probe}: reading process {pid}'s program (/proc/{pid}/exe): {e}"
        ))
    })?;
    let place_in = |p: &UserProbe| -> std::result::Result<Placement, String> {
        let placed = if launched {
            place::place_for_launch(&exe, &p.file, &p.func)
        } else {
            place::place(Path::new("/proc"), Some(pid), &p.file, &p.func)
        };
        placed.map_err(|e| e.to_string())
    };
    let alloc = place_in(probe).map_err(|e| Error::usage(format!("--on {probe}: {e}")))?;
    // A running process's program is read through its /proc link: in a container, the path it names is
    // in another mount namespace. (A launched one is ours; its path gives $ORIGIN for its libraries.)
    let program = if launched {
        exe.clone()
    } else {
        std::path::PathBuf::from(format!("/proc/{pid}/exe"))
    };
    let types = |cast: &CastType, path: &[PathElem]| member(pid, &program, &alloc.file, cast, path);
    // The target's member placed by its type first, then the calls that end an object.
    let member = resolve_user_target(&on.text, &types)?;
    let frees = frees(on, probe, &place_in)?;
    let general = probe.at == UserArg::Return && objects::allocator_size(&probe.func).is_some();
    // posix_memalign returns 0 and stores its object through its argument 0: the entry keeps that too.
    let out = match objects::allocator_size(&probe.func) {
        Some(SizeArgs::Out(..)) => general,
        _ => false,
    };
    let size = member
        .object_size
        .filter(|_| general)
        .map(|n| (SizeFrom::AtEntry, n));
    let mut allocs = vec![user_alloc(probe, &alloc, size.is_some())?];
    // realloc ends one object and starts another: where it is one of the frees (the malloc family's
    // default, or named by --free), its return is a source too.
    let ends = if on.frees.is_empty() {
        objects::default_frees(probe)
    } else {
        on.frees.clone()
    };
    // (Not beside an out-pointer source: the programs share one `Select`, and realloc returns its object.)
    if general && !out && ends.iter().any(|f| f.func == "realloc") {
        let realloc = UserProbe {
            func: "realloc".into(),
            ..probe.clone()
        };
        if probe.func != "realloc" {
            if let Ok(placed) = place_in(&realloc) {
                allocs.push(user_alloc(&realloc, &placed, size.is_some())?);
            }
        }
    }
    let mut detail = describe(&alloc, &frees, launched, pid, probe, size.is_some());
    if allocs.len() > 1 {
        detail.push_str("; realloc's new objects taken too");
    }
    Ok(Placed {
        member,
        stand_in: USER_STAND_IN,
        select: Select {
            ptr: match probe.at {
                UserArg::Return if out => PtrAt::Out(regs::RET),
                UserArg::Return => PtrAt::Reg(regs::RET),
                UserArg::Arg(n) => PtrAt::Reg(regs::arg(n).unwrap_or(regs::ARGS[0])),
            },
            call_site: None,
            size,
        },
        attach: Attach::User(UserProbes {
            pid,
            allocs,
            frees: frees
                .iter()
                .map(|(p, reg)| (p.file.clone(), p.func.offset, *reg))
                .collect(),
        }),
        detail: Some(detail),
        park: USER_PARK,
        allocators: Allocators {
            pids: Vec::new(),
            comms: on.comms.clone(),
        },
        reports: reports(probe, &on.frees),
        note: None,
    })
}

/// How often a user-space source reports one object: as its function says ([`objects::Source::reports`]:
/// once for the malloc family's and `operator new`'s returns), and once for any function whose returns
/// `--free` ends: naming what ends them says each return is a new object, as an allocator's. A function
/// taking an object (`uprobe:…:argN`) may take it again, whatever ends it.
fn reports(probe: &UserProbe, frees: &[UserProbe]) -> Reports {
    match probe.at {
        UserArg::Return if !frees.is_empty() => Reports::Once,
        UserArg::Return | UserArg::Arg(_) => objects::Source::User(probe.clone()).reports(),
    }
}

/// A user-space object's stand-in address while its target resolves: aligned to any member, in the user
/// half.
const USER_STAND_IN: u64 = 0x1000_0000_0000;

/// What a user-space source's `(TYPE)` is: where a member path lands in it and the type's own size (the
/// DWARF of the file that allocates the objects); the error a sentence with the way out.
type UserTypes<'a> = dyn Fn(
        &CastType,
        &[ksymwatch_symbols::PathElem],
    ) -> std::result::Result<(ksymwatch_symbols::MemberInfo, Option<u64>), String>
    + 'a;

/// Resolves a user-space object's target: `'(struct T)$obj.FIELD'` (the type from `types`) or a raw
/// `'$obj+OFF/LEN'`.
fn resolve_user_target(text: &str, types: &UserTypes<'_>) -> Result<OnMember> {
    let forms =
        "'(struct TYPE)$obj.FIELD' (the type from the program's DWARF) or '$obj+OFFSET/LEN'";
    if !text.contains("$obj") {
        return Err(Error::usage(format!(
            "`{text}`: with --on, the target is a field of each new object: write `$obj` for its address, \
             {forms}"
        )));
    }
    let standing = text.replacen("$obj", &format!("0x{USER_STAND_IN:x}"), 1);
    let t = target::parse(&standing).map_err(|e| {
        Error::usage(format!(
            "{}; {forms}",
            e.to_string().replace(&standing, text)
        ))
    })?;
    // `0xADDR+OFF` parses to one address: what is past the stand-in is the offset.
    let base_offset = match t.base {
        Base::Address(a) if (USER_STAND_IN..USER_STAND_IN + (1 << 32)).contains(&a) => {
            a - USER_STAND_IN
        }
        _ => {
            return Err(Error::usage(format!(
                "`{text}`: `$obj` is the base: {forms}"
            )))
        }
    };
    let t = Target {
        text: text.to_string(),
        ..t
    };
    let (addr, size, object_size) = match &t.cast {
        None if t.path.is_empty() => (USER_STAND_IN + base_offset + t.offset, None, None),
        None => {
            return Err(Error::usage(format!(
                "`{text}`: a field by name needs the object's type: {forms}"
            )))
        }
        Some(cast) => {
            let (m, whole) =
                types(cast, &t.path).map_err(|e| Error::usage(format!("`{text}`: {e}")))?;
            (
                USER_STAND_IN + base_offset + m.offset + t.offset,
                m.size,
                whole,
            )
        }
    };
    Ok(OnMember {
        target: t,
        addr,
        size,
        object_size,
    })
}

/// The probes of allocating function `probe`, placed at `placed`; `sized`: its request size is read at
/// its entry (a general allocator's, when the object's type gives the size to take).
fn user_alloc(probe: &UserProbe, placed: &Placement, sized: bool) -> Result<UserAlloc> {
    let reg = |a: u8| regs::arg(a).unwrap_or(regs::ARGS[0]);
    let stash = match objects::allocator_size(&probe.func) {
        Some(SizeArgs::One(a)) if sized => Some(StashSize::One(reg(a))),
        Some(SizeArgs::Product(a, b)) if sized => Some(StashSize::Product(reg(a), reg(b))),
        // Its object is only known through the out-pointer the entry keeps: stashed, sized or not.
        Some(SizeArgs::Out(a, o)) if probe.at == UserArg::Return => {
            Some(StashSize::WithOut(reg(a), reg(o)))
        }
        _ => None,
    };
    let kind = match probe.at {
        UserArg::Return => Probe::Return,
        UserArg::Arg(n) if regs::arg(n).is_some() => Probe::Entry,
        UserArg::Arg(_) => return Err(Error::usage(format!("--on {probe}: at most arg5"))),
    };
    Ok(UserAlloc {
        file: placed.file.clone(),
        offset: placed.func.offset,
        probe: kind,
        stash,
    })
}

/// The calls that end an object, placed: `--free`'s (each must be placed), else the source's usual
/// partners (those the file has).
fn frees(
    on: &OnRequest,
    probe: &UserProbe,
    place_in: &dyn Fn(&UserProbe) -> std::result::Result<Placement, String>,
) -> Result<Vec<(Placement, i16)>> {
    let reg = |p: &UserProbe| match p.at {
        UserArg::Arg(n) => regs::arg(n),
        UserArg::Return => None,
    };
    if !on.frees.is_empty() {
        return on
            .frees
            .iter()
            .map(|f| {
                let placed = place_in(f).map_err(|e| Error::usage(format!("--free {f}: {e}")))?;
                let r = reg(f).ok_or_else(|| Error::usage(format!("--free {f}: at most arg5")))?;
                Ok((placed, r))
            })
            .collect();
    }
    Ok(objects::default_frees(probe)
        .iter()
        .filter_map(|f| Some((place_in(f).ok()?, reg(f)?)))
        .collect())
}

/// The header's parenthesis: where the probes are, what ends an object, what is not known.
fn describe(
    alloc: &Placement,
    frees: &[(Placement, i16)],
    launched: bool,
    pid: u32,
    probe: &UserProbe,
    sized: bool,
) -> String {
    let mut parts = vec![format!(
        "{} at 0x{:x} of {} in process {pid}",
        alloc.func.symbol, alloc.func.offset, alloc.shown
    )];
    if frees.is_empty() {
        parts.push(
            "no free function: an object stays armed until evicted (--free uprobe:PATH:FUNC:argN)"
                .into(),
        );
    } else {
        let names: Vec<&str> = frees.iter().map(|(p, _)| p.func.symbol.as_str()).collect();
        parts.push(format!("freed by {}", names.join(", ")));
    }
    if !sized && objects::allocator_size(&probe.func).is_some() && probe.at == UserArg::Return {
        parts.push("every request taken: name the object's type to take only its size".into());
    }
    if !launched {
        parts.push("objects allocated before the start are not known".into());
    }
    parts.join("; ")
}

/// `(cast)` and `path` in the program's DWARF, else in that of the file the objects come from.
fn member(
    pid: u32,
    exe: &Path,
    source_file: &Path,
    cast: &CastType,
    path: &[PathElem],
) -> std::result::Result<(MemberInfo, Option<u64>), String> {
    match place::types::object_member(pid, exe, cast, path) {
        Ok(found) => Ok(found),
        Err(e) if source_file != exe => {
            place::types::object_member(pid, source_file, cast, path).map_err(|_| e)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::watch::Access;

    /// [`resolve_user_target`] sized as a write watch.
    fn target(text: &str, types: &UserTypes<'_>) -> Result<objects::ObjectTarget> {
        Ok(resolve_user_target(text, types)?
            .sized(Access::Write, USER_STAND_IN)?
            .0)
    }

    /// Naming the free of what a function returns says each return is a new object: the function is an
    /// allocator, reporting each object once, as the malloc family's are whatever ends them. A function
    /// taking an object may take it again, whatever ends it.
    #[test]
    fn a_return_whose_free_is_named_is_reported_once() {
        let named = [objects::parse_free("uprobe:./app:widget_free:arg0").unwrap()];
        let probe = |source: &str| match objects::parse_source(source).unwrap() {
            objects::Source::User(p) => p,
            s => panic!("not a user-space source: {s}"),
        };
        let widget_new = probe("uretprobe:./app:widget_new");
        assert_eq!(reports(&widget_new, &[]), Reports::Again);
        assert_eq!(reports(&widget_new, &named), Reports::Once);
        let malloc = probe("uretprobe:libc:malloc");
        assert_eq!(reports(&malloc, &[]), Reports::Once);
        assert_eq!(reports(&malloc, &named), Reports::Once);
        let init = probe("uprobe:./app:widget_init:arg0");
        assert_eq!(reports(&init, &[]), Reports::Again);
        assert_eq!(reports(&init, &named), Reports::Again);
    }

    /// A user-space target: a raw offset and length, or a member of a type the program's DWARF gives
    /// (here a stand-in), with the type's size for the allocator's filter.
    #[test]
    fn user_targets_resolve_raw_or_by_type() {
        let types = |cast: &CastType, path: &[ksymwatch_symbols::PathElem]| {
            if cast.name != "widget" {
                return Err(format!("no `{cast}`"));
            }
            let offset = if path.is_empty() { 0 } else { 48 };
            let size = if path.is_empty() { 64 } else { 4 };
            Ok((
                ksymwatch_symbols::MemberInfo {
                    offset,
                    size: Some(size),
                    type_name: "int".into(),
                },
                Some(64),
            ))
        };
        let raw = target("$obj+0x30/4", &types).unwrap();
        assert_eq!(
            (raw.offset, raw.len, raw.object_size, raw.cast.is_none()),
            (48, 4, None, true)
        );
        assert_eq!(raw.label(2, 0x5000), "0x5000+0x30#2");
        let typed = target("(struct widget)$obj.count", &types).unwrap();
        assert_eq!(
            (typed.offset, typed.len, typed.object_size),
            (48, 4, Some(64))
        );
        assert_eq!(typed.label(0, 0x5000), "(struct widget)0x5000.count#0");
        for (bad, says) in [
            ("(struct gadget)$obj.count", "no `struct gadget`"),
            ("0x5000", "write `$obj`"),
            ("$obj.count", "name its type"),
        ] {
            let e = target(bad, &types).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
