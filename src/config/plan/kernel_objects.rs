//! `--on kmalloc:FUNC`, `kmem_cache_alloc:FUNC` and `tracepoint:GROUP:NAME:ARG`: kernel objects as the
//! kernel allocates them. The source's tracepoint is checked in the kernel's BTF (and tracefs, where
//! mounted), the allocation's call site found in the kernel's symbols, the `$obj` target and the size the
//! requests must have taken from BTF.

use ksymwatch_symbols::SymbolTable;

use crate::config::objects::{self, Allocators};
use crate::config::tracepoints::{self, PointerAt};
use crate::config::typed::{self, Types};
use crate::config::watch::OnMember;
use crate::error::{Error, Result};
use crate::model::target::{self, Base, Target};
use crate::perf::bpf;

use super::host::Host;
use super::kernel::KernelSide;
use super::options::OnRequest;
use super::Placed;

/// The tracepoint objects come from must exist, or nothing would ever be armed: exit 2 before arming.
/// Found in the kernel's BTF (its group in tracefs, where mounted); a built-in source's tracepoint must
/// pass what its program reads where it reads it, and so must the free tracepoints.
fn check_tracepoint(
    source: &objects::Source,
    types: &typed::Types,
    host: &dyn Host,
) -> Result<tracepoints::Event> {
    let events = host.tracefs_events();
    let find = |group: &str, name: &str| -> Result<tracepoints::Event> {
        let btf = types.tracepoint(name)?;
        tracepoints::find(group, name, btf, events.as_deref())
            .map_err(|e| Error::usage(format!("--on {source}: {e}")))
    };
    let unsupported = |e: String| {
        Error::not_permitted(format!("--on {source}: {e}; this source cannot work here"))
    };
    let event = match source {
        objects::Source::Tracepoint { group, name, .. } => return find(group, name),
        objects::Source::User(_) => {
            return Err(Error::runtime(
                "a user-space source has no tracepoint (a bug: it is planned apart)",
            ))
        }
        objects::Source::Kmalloc(_) => {
            let e = find("kmem", "kmalloc")?;
            tracepoints::expect_args(&e, &["call_site", "ptr", "bytes_req"])
                .map_err(unsupported)?;
            e
        }
        objects::Source::KmemCacheAlloc(_) => {
            let e = find("kmem", "kmem_cache_alloc")?;
            tracepoints::expect_args(&e, &["call_site", "ptr", "s"]).map_err(unsupported)?;
            e
        }
    };
    for free in ["kfree", "kmem_cache_free"] {
        tracepoints::expect_args(&find("kmem", free)?, &["call_site", "ptr"])
            .map_err(unsupported)?;
    }
    Ok(event)
}

/// Plans a kernel `--on` source (its tracepoint, the call site in the kernel's symbols) and places its
/// `$obj` target's member (in BTF), left for the stage to size.
pub fn in_kernel(on: &OnRequest, kernel: &KernelSide, host: &dyn Host) -> Result<Placed> {
    let source = &on.source;
    // The source first, whole: its tracepoint, then what it names in the kernel's symbols (where a free
    // slot waits, the call sites it allows) and, for a cache, where kmem_cache keeps its objects' size
    // (refused only if the target's type gives a size to take); then the `$obj` target's member in BTF,
    // and where the source's pointer is (and whether it points to the target's type).
    let event = check_tracepoint(source, &kernel.types, host)?;
    let table = kernel.chains()?;
    let park = park_address(table)?;
    let call_site = call_site(table, source)?;
    let cache_size_at = cache_size_offset(&kernel.types, source);
    let member = resolve_target(&kernel.types, &on.text)?;
    let cast = cast_text(&member.target);
    let (ptr, attach, detail, note) = pointer_and_attach(source, &event, &cast, host)?;
    // The size `--on`'s allocations must have to be watched (the `$obj` type's): a kmalloc request's
    // bytes, or a cache's `object_size`; none for a tracepoint, or a type of unknown size.
    let size = match (source, member.object_size, cache_size_at) {
        (objects::Source::Kmalloc(_), Some(n), _) => Some((bpf::objects::SizeFrom::Requested, n)),
        (objects::Source::KmemCacheAlloc(_), Some(n), Some(at)) => {
            Some((bpf::objects::SizeFrom::Cache(at?), n))
        }
        _ => None,
    };
    Ok(Placed {
        member,
        stand_in: STAND_IN,
        select: bpf::objects::Select {
            ptr,
            call_site,
            size,
        },
        attach,
        detail,
        park,
        allocators: Allocators {
            pids: on.pids.clone(),
            comms: on.comms.clone(),
        },
        reports: source.reports(),
        note: note.map(|note| format!("ksymwatch: note: --on {source}: {note}")),
    })
}

/// What a source's pointer is: where the program reads it, what it attaches to, the header's words on
/// both, and a note when a tracepoint argument points to another type than the target's.
type Pointer = (
    bpf::objects::PtrAt,
    bpf::objects::Attach,
    Option<String>,
    Option<String>,
);

/// Where `--on`'s program finds the new object's pointer, what it attaches to, and for a tracepoint source
/// the header's words on both and the note on `cast`. An argument (by number, or by a name BTF gives it)
/// is read at the raw tracepoint; a record field that is no argument needs the event's format file and
/// id from tracefs (`event.events`); kmalloc's and kmem_cache_alloc's pointer is their argument 1.
fn pointer_and_attach(
    source: &objects::Source,
    event: &tracepoints::Event,
    cast: &str,
    host: &dyn Host,
) -> Result<Pointer> {
    let objects::Source::Tracepoint {
        group, name, arg, ..
    } = source
    else {
        return Ok((
            bpf::objects::PtrAt::Arg(1),
            bpf::objects::Attach::Raw(source.tracepoint().to_string()),
            None,
            None,
        ));
    };
    let with_note = |how: String| match event.group_note() {
        Some(note) => format!("{how}; {note}"),
        None => how,
    };
    let field = match tracepoints::pointer(event, arg, cast)
        .map_err(|e| Error::usage(format!("--on {source}: {e}")))?
    {
        PointerAt::Arg { index, how, note } => {
            return Ok((
                bpf::objects::PtrAt::Arg(index),
                bpf::objects::Attach::Raw(name.clone()),
                Some(with_note(how)),
                note,
            ))
        }
        PointerAt::Record { field } => field,
    };
    let Some(dir) = &event.events else {
        return Err(Error::runtime(format!(
            "--on {source}: a record field without tracefs (a bug: it was checked)"
        )));
    };
    let event_dir = dir.join(group).join(name);
    let read = |f: &str| {
        host.read_tracefs(&event_dir.join(f)).map_err(|e| {
            Error::not_permitted(format!(
                "--on {source}: reading {}: {e}",
                event_dir.join(f).display()
            ))
        })
    };
    let offset = objects::format_field(&read("format")?, &format!("{group}:{name}"), &field)?;
    let id = read("id")?.trim().parse::<u64>().map_err(|_| {
        Error::runtime(format!(
            "--on {source}: {} is not a number",
            event_dir.join("id").display()
        ))
    })?;
    Ok((
        bpf::objects::PtrAt::Field(offset),
        bpf::objects::Attach::Event(id),
        Some(with_note(format!(
            "field `{field}` of the event's record, from tracefs"
        ))),
        None,
    ))
}

/// A kernel text symbol of `table` named `name`.
fn text_symbol<'t>(table: &'t SymbolTable, name: &str) -> Option<ksymwatch_symbols::SymbolRef<'t>> {
    table
        .lookup(name, None)
        .ok()
        .filter(|s| s.kind() == ksymwatch_symbols::SymbolKind::Text)
}

/// Where a free `--on` slot's breakpoint waits: the kernel's `_text` (or `_stext`).
fn park_address(table: &SymbolTable) -> Result<u64> {
    text_symbol(table, "_text")
        .or_else(|| text_symbol(table, "_stext"))
        .map(|s| s.addr)
        .ok_or_else(|| {
            Error::runtime(
                "the kernel's symbols have no `_text`, where a free slot's breakpoint waits",
            )
        })
}

/// The call sites `[lo, hi)` `--on`'s source allows: the instruction at `FUNC+OFF`, or all of `FUNC`;
/// none for a source that names no function.
fn call_site(table: &SymbolTable, source: &objects::Source) -> Result<Option<(u64, u64)>> {
    let Some(site) = source.site() else {
        return Ok(None);
    };
    let f = text_symbol(table, &site.func).ok_or_else(|| {
        Error::usage(format!(
            "--on {source}: `{}` is not a function of the running kernel (its text symbols); \
             give the function that calls {}",
            site.func,
            source.tracepoint()
        ))
    })?;
    Ok(Some(match site.offset {
        Some(off) => (f.addr + off, f.addr + off + 1),
        None => (f.addr, f.addr + f.size.unwrap_or(1)),
    }))
}

/// Where a `kmem_cache` keeps its objects' size (`object_size`, its BTF offset), which a cache source's
/// program reads to take only the caches of the target's type; `None` for any other source.
fn cache_size_offset(types: &typed::Types, source: &objects::Source) -> Option<Result<i16>> {
    let objects::Source::KmemCacheAlloc(_) = source else {
        return None;
    };
    let cast = ksymwatch_symbols::CastType {
        kind: Some(ksymwatch_symbols::CastKind::Struct),
        name: "kmem_cache".into(),
    };
    let path = [ksymwatch_symbols::PathElem::Field("object_size".into())];
    let m = match types.member(&cast, &path) {
        Ok(Ok((m, _))) => m,
        Ok(Err(e)) => {
            return Some(Err(Error::not_permitted(format!(
                "--on {source}: kmem_cache.object_size in the kernel's BTF: {e}"
            ))))
        }
        Err(e) => return Some(Err(e)),
    };
    Some(
        i16::try_from(m.offset).map_err(|_| Error::runtime("kmem_cache.object_size is too far in")),
    )
}

/// The `$obj` target's type as written, which a tracepoint argument's type is compared with.
fn cast_text(target: &Target) -> String {
    target
        .cast
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default()
}

/// The object stand-in's address while the target resolves: aligned to any member, in the kernel half.
const STAND_IN: u64 = 0xffff_8880_0000_0000;

/// Resolves `text`, which must hold `$obj` where an address would be: `'(TYPE)$obj.FIELD'`, its type
/// from BTF.
fn resolve_target(types: &Types, text: &str) -> Result<OnMember> {
    if !text.contains("$obj") {
        return Err(Error::usage(format!(
            "`{text}`: with --on, the target is a field of each new object: write `$obj` for its address, \
             e.g. '(struct pipe_inode_info)$obj.head'"
        )));
    }
    if !text.trim_start().starts_with('(') {
        return Err(Error::usage(format!(
            "`{text}`: `$obj` needs its type to name a field: '(struct TYPE)$obj.FIELD'"
        )));
    }
    let standing = text.replacen("$obj", &format!("0x{STAND_IN:x}"), 1);
    let t = target::parse(&standing)
        .map_err(|e| Error::usage(e.to_string().replace(&standing, text)))?;
    let Some(cast) = t.cast.clone() else {
        return Err(Error::usage(format!(
            "`{text}`: `$obj` needs its type to name a field: '(struct TYPE)$obj.FIELD'"
        )));
    };
    if !matches!(t.base, Base::Address(STAND_IN)) {
        return Err(Error::usage(format!(
            "`{text}`: `$obj` is the base, right after the cast: '(struct TYPE)$obj.FIELD'"
        )));
    }
    let t = Target {
        text: text.to_string(),
        ..t
    };
    let typed = typed::resolve(types, &t, STAND_IN, "$obj")?;
    let object_size = match types.member(&cast, &[])? {
        Ok((m, _)) => m.size,
        Err(_) => None,
    };
    Ok(OnMember {
        target: t,
        addr: typed.addr,
        size: typed.member.size,
        object_size,
    })
}
