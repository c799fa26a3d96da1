//! Turning a parsed [`Target`] into a [`Watch`]: an address, a length and an access type a debug register
//! can hold. Every rule about what is watchable lives here, so the tracer below never sees a bad range.

use crate::config::advice::Advised;
use crate::config::objects::ObjectTarget;
use crate::config::process;
use crate::error::{Error, Result};
use crate::model::target::{Base, Member, Target};
use crate::model::watch::{Access, Watch};
use crate::perf::denial::TASK_SIZE_MAX;
use ksymwatch_symbols::{CastType, LookupError, SymbolKind, SymbolTable};

/// What resolving found, plus warnings the user should see before arming.
#[derive(Debug)]
pub struct Resolved {
    pub watch: Watch,
    pub warnings: Vec<String>,
}

/// Lowest address of the kernel half on x86-64 (4-level paging); user space ends below 0x0000_8000_0000_0000.
pub const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// Where x86-64's lower (user) half ends (4-level paging).
const USER_END: u64 = 0x0000_8000_0000_0000;

fn is_canonical(addr: u64) -> bool {
    !(USER_END..KERNEL_START).contains(&addr)
}

/// The widest debug-register length that fits `room` bytes and keeps `addr` naturally aligned.
fn natural_len(addr: u64, room: u64) -> u8 {
    [8u8, 4, 2, 1]
        .into_iter()
        .find(|&l| u64::from(l) <= room && addr.is_multiple_of(u64::from(l)))
        .unwrap_or(1)
}

pub fn resolve(target: &Target, access: Access, table: &SymbolTable) -> Result<Resolved> {
    let mut warnings = Vec::new();
    let (addr, len, label) = match &target.base {
        Base::Address(addr) => (*addr, target.len.unwrap_or(8), format!("0x{addr:x}")),
        Base::Symbol { index, .. } => {
            if !target.path.is_empty()
                && target
                    .symbol_splits()
                    .iter()
                    .all(|(n, _)| table.by_name(n).next().is_none())
            {
                return Err(Error::usage(format!(
                    "`{}`: struct fields and array elements need DWARF type information; pass --vmlinux FILE \
                     with debug info, set DEBUGINFOD_URLS to fetch it, or give the object's type and address: '(struct TYPE)0xADDR.FIELD'",
                    target.text
                )));
            }
            let (name, rest) = target
                .symbol_splits()
                .into_iter()
                .find(|(n, _)| table.by_name(n).next().is_some())
                .unwrap_or_else(|| {
                    (
                        target
                            .symbol_splits()
                            .last()
                            .map(|s| s.0.clone())
                            .unwrap_or_default(),
                        Vec::new(),
                    )
                });
            if !rest.is_empty() {
                return Err(Error::usage(format!(
                    "`{}`: the field path `{}` needs DWARF type information; pass --vmlinux FILE with debug info, set DEBUGINFOD_URLS to fetch it, or cast it to its type: '(struct TYPE){}'",
                    target.text,
                    rest.iter().map(|e| e.to_string()).collect::<String>(),
                    target.text
                )));
            }
            let sym = match target.kernel_module() {
                Some(module) => table.lookup_in_module(&name, module, *index),
                None => table.lookup(&name, *index),
            }
            .map_err(lookup_error)?;
            if sym.module.is_none() {
                check_kernel_address(&target.text, sym.name, sym.addr, None, || {
                    table.by_name(PER_CPU_END).next().map(|s| s.addr)
                })?;
            }
            if sym.kind() == SymbolKind::Text && access == Access::Write {
                warnings.push(format!(
                    "`{}` is a text symbol ({}): nothing writes to code, so expect no hits; data symbols have type D/d, B/b or R/r",
                    sym.name, sym.type_char
                ));
            }
            if let Some(size) = sym.size {
                if target.offset >= size {
                    return Err(Error::usage(format!(
                        "`{}`: offset 0x{:x} is past the end of `{}` (size 0x{size:x}, from the next symbol's address); \
                         name the symbol that is there, or give the address as 0x{:x}",
                        target.text,
                        target.offset,
                        sym.name,
                        sym.addr.wrapping_add(target.offset)
                    )));
                }
            }
            let addr = sym
                .addr
                .checked_add(target.offset)
                .ok_or_else(|| overflows(target))?;
            let room = sym.size.map_or(8, |s| (s - target.offset).min(8));
            let len = target.len.unwrap_or_else(|| natural_len(addr, room));
            let mut label = if target.offset == 0 {
                sym.name.to_string()
            } else {
                format!("{}+0x{:x}", sym.name, target.offset)
            };
            if let Some(module) = target.kernel_module() {
                label = format!("{module}:{label}");
            }
            let mut r = checked(target, access, addr, len, label, warnings)?;
            r.watch.module = sym.module.cloned();
            return Ok(r);
        }
    };
    checked(target, access, addr, len, label, warnings)
}

/// A watch on what a vmlinux or System.map resolved (`crate::config::symbols::resolve`): `addr` is where to arm,
/// and `r.size` the bytes from there to the end of the object (a member's DWARF size, or the symbol's).
pub fn from_resolved(
    target: &Target,
    access: Access,
    r: &ksymwatch_symbols::Resolved,
    addr: u64,
) -> Result<Resolved> {
    let mut warnings = Vec::new();
    if r.symbol.kind() == SymbolKind::Text && access == Access::Write {
        warnings.push(text_warning(&r.symbol.name, r.type_char));
    }
    let mut w = sized(target, access, addr, r.size, r.target.clone(), warnings)?;
    w.watch.module = r.symbol.module.clone();
    Ok(w)
}

/// The section a vmlinux puts per-CPU variables in.
const PERCPU_SECTION: &str = ".data..percpu";

/// The symbol ending the per-CPU area, which x86-64 links at 0.
pub const PER_CPU_END: &str = "__per_cpu_end";

/// Kernel addresses are in the upper half (x86-64: from 0xffff800000000000).
const KERNEL_HALF: u64 = 0xffff_8000_0000_0000;

/// A kernel symbol must name a kernel address to be watched. A per-CPU variable (in `.data..percpu`, or
/// below `__per_cpu_end` where the per-CPU area is linked at 0, as on x86-64, which is how a System.map or a
/// full kallsyms lists it) is only an offset from each CPU's per-CPU base; any other symbol below the
/// kernel half is an absolute value, not an address. Either is exit 2 with the way out, never armed.
pub fn check_kernel_address(
    text: &str,
    name: &str,
    addr: u64,
    section: Option<&str>,
    per_cpu_end: impl FnOnce() -> Option<u64>,
) -> Result<()> {
    // `per_cpu_end` (the address of [`PER_CPU_END`]) is asked only for an address below the kernel half,
    // and callers look it up without `lookup`'s "did you mean" suggestions: a kallsyms without data
    // symbols has no `__per_cpu_end`, and scoring 122k names for a suggestion nobody reads cost a tenth of
    // the start-up.
    let below_percpu_end =
        |addr: u64| per_cpu_end().is_some_and(|end| end < KERNEL_HALF && addr < end);
    let per_cpu = section == Some(PERCPU_SECTION) || (addr < KERNEL_HALF && below_percpu_end(addr));
    if per_cpu {
        return Err(Error::usage(format!(
            "`{text}`: `{name}` is a per-CPU variable (0x{addr:x} is its offset in the per-CPU area, not an \
             address): every CPU has its own copy; watch one CPU's copy by its address: 0xADDR, or \
             '(struct TYPE)0xADDR.FIELD'"
        )));
    }
    if addr < KERNEL_HALF {
        return Err(Error::usage(format!(
            "`{text}`: `{name}` is at 0x{addr:x}, not a kernel address (an absolute symbol or an offset): \
             there is nothing to watch there; give the object's address as 0xADDR"
        )));
    }
    Ok(())
}

/// A write watch on code: allowed (it is a valid address), but said.
fn text_warning(name: &str, type_char: char) -> String {
    format!(
        "`{name}` is a text symbol ({type_char}): nothing writes to code, so expect no hits; data symbols have type D/d, B/b or R/r"
    )
}

/// A watch at `addr` on an object `size` bytes long (from there to its end; `None` when unknown): `/LEN`
/// when given (a warning when it reaches past the object), else the widest aligned length that fits, at
/// most 8.
pub(crate) fn sized(
    target: &Target,
    access: Access,
    addr: u64,
    size: Option<u64>,
    label: String,
    mut warnings: Vec<String>,
) -> Result<Resolved> {
    let room = size.filter(|&s| s > 0).map_or(8, |s| s.min(8));
    let len = match target.len {
        Some(len) => {
            if u64::from(len) > room {
                warnings.push(format!(
                    "`{label}` is {room} bytes but /{len} watches {len}: accesses to the bytes after it hit too"
                ));
            }
            len
        }
        None => natural_len(addr, room),
    };
    checked(target, access, addr, len, label, warnings)
}

/// An `--on` target's member, placed by its type on the stand-in object the target was resolved against,
/// before its watch is sized: the stage plans its source first, then sizes this last ([`Self::sized`]).
pub struct OnMember {
    /// The target as given (`text`), parsed with the stand-in's address as `$obj`.
    pub target: Target,
    /// Where the member is on the stand-in, and its size when its type says.
    pub addr: u64,
    pub size: Option<u64>,
    /// The whole type's size, which the allocations taken must have.
    pub object_size: Option<u64>,
}

impl OnMember {
    /// The target's watch on each object: the member's offset from `stand_in`, sized as any watch
    /// (`sized`), with what sizing warned about.
    pub fn sized(self, access: Access, stand_in: u64) -> Result<(ObjectTarget, Vec<String>)> {
        let t = &self.target;
        let r = sized(t, access, self.addr, self.size, t.text.clone(), Vec::new())?;
        Ok((
            ObjectTarget {
                text: self.target.text,
                cast: self.target.cast,
                offset: self.addr - stand_in,
                len: r.watch.len,
                access,
                object_size: self.object_size,
            },
            r.warnings,
        ))
    }
}

/// The watch on member `m` of the object its base resolved to (`base`: the base alone, resolved and
/// checked as a target of its own, [`crate::config::typed::base_target`]): the member placed on that object
/// ([`member_at`]), labelled by the base, sized by the member unless `/LEN` says otherwise. The member is
/// in the base's memory: a module's, the watch still ends when that module goes.
pub fn moved(target: &Target, m: &Member, base: Resolved, access: Access) -> Result<Resolved> {
    let addr = member_at(target, m, base.watch.addr)?;
    let label = member_label(target, m, &base.watch.label);
    let mut moved = sized(target, access, addr, m.size, label, base.warnings)?;
    moved.watch.module = base.watch.module;
    Ok(moved)
}

/// Where member `m` of an object at `base_addr` is, checked as an address such an object can have.
pub fn member_at(target: &Target, m: &Member, base_addr: u64) -> Result<u64> {
    let addr = base_addr
        .checked_add(m.offset)
        .ok_or_else(|| overflows(target))?;
    check_object(target, &m.cast, base_addr, m.offset, addr, m.size)?;
    Ok(addr)
}

/// A member's label: `(CAST)BASE.PATH`, and `+0xOFF` when the target goes on into the member.
pub fn member_label(target: &Target, m: &Member, base: &str) -> String {
    let path: String = target.path.iter().map(|e| e.to_string()).collect();
    let mut label = format!("({}){base}{path}", m.cast);
    if target.offset > 0 {
        label.push_str(&format!("+0x{:x}", target.offset));
    }
    label
}

/// `target`'s address does not fit in 64 bits.
pub fn overflows(target: &Target) -> Error {
    Error::usage(format!("`{}`: address overflows", target.text))
}

/// The object a cast lays over memory must be one that can exist there: at a canonical address, ending
/// before 2^64, and (when the member sits at an aligned offset in its type, as all but packed members do)
/// at an address that aligns it. Otherwise the address is wrong, and watching it would report nothing or
/// some other object: exit 2, never a silently narrowed watch.
fn check_object(
    target: &Target,
    cast: &CastType,
    base_addr: u64,
    offset: u64,
    addr: u64,
    size: Option<u64>,
) -> Result<()> {
    let t = &target.text;
    if !is_canonical(base_addr) || !is_canonical(addr) {
        return Err(Error::usage(format!(
            "`{t}`: 0x{base_addr:x} is not a canonical x86-64 address (bits 63..47 must be all 0 or all 1), so no \
             ({cast}) can be there; check the address"
        )));
    }
    if let Some(size) = size {
        if addr.checked_add(size).is_none() || !is_canonical(addr + size.saturating_sub(1)) {
            return Err(Error::usage(format!(
                "`{t}`: the member's {size} bytes at 0x{addr:x} would run past the end of the address space; \
                 check the address"
            )));
        }
        if matches!(size, 2 | 4 | 8) && offset.is_multiple_of(size) && !addr.is_multiple_of(size) {
            return Err(Error::usage(format!(
                "`{t}`: this {size}-byte member lands at 0x{addr:x}, which is not {size}-byte aligned, because the \
                 object's address 0x{base_addr:x} is not aligned as a ({cast}) is; check the address"
            )));
        }
    }
    Ok(())
}

/// The checks every watch passes, however it was resolved: a debug register can hold it.
fn checked(
    target: &Target,
    access: Access,
    addr: u64,
    len: u8,
    label: String,
    warnings: Vec<String>,
) -> Result<Resolved> {
    if addr == 0 {
        return Err(Error::usage(format!(
            "`{}`: address 0 cannot be watched",
            target.text
        )));
    }
    if !is_canonical(addr) || !is_canonical(addr.saturating_add(u64::from(len) - 1)) {
        return Err(Error::usage(format!(
            "`{}`: 0x{addr:x} is not a canonical x86-64 address (user space is below 0x800000000000, the kernel at or above 0x{KERNEL_START:x})",
            target.text
        )));
    }
    // The last page below the kernel-space boundary is canonical, but no process can map it, and the
    // kernel counts a breakpoint reaching it as a kernel one: refused as a kernel address, on a machine
    // that refuses those, the user would be sent to watch a user address, which this looks like.
    let last = addr.saturating_add(u64::from(len) - 1);
    if (TASK_SIZE_MAX..USER_END).contains(&addr) || (TASK_SIZE_MAX..USER_END).contains(&last) {
        return Err(Error::usage(format!(
            "`{}`: 0x{addr:x}/{len} reaches into the guard page at the top of user space (user addresses \
             end at 0x{:x}), which no process maps; check the address",
            target.text,
            TASK_SIZE_MAX - 1
        )));
    }
    if !addr.is_multiple_of(u64::from(len)) {
        return Err(Error::usage(format!(
            "`{}`: 0x{addr:x}/{len} is not naturally aligned; a debug register watches {len} bytes only at a multiple of {len}; \
             use a smaller /LEN (0x{addr:x}/{}) or an aligned address",
            target.text,
            natural_len(addr, 8)
        )));
    }
    Ok(Resolved {
        watch: Watch {
            label,
            addr,
            len,
            access,
            module: None,
            per_cpu: None,
        },
        warnings,
    })
}

fn lookup_error(e: LookupError) -> Error {
    Error::from_cause(crate::error::ExitCode::Usage, Advised(e))
}

/// A target in process `pid`'s own binaries (`[OBJECT:]SYMBOL...`, see [`process::resolve`]), or a raw
/// address. The label is the target as given; the default length follows the symbol's (or member's)
/// size as for a kernel target.
pub fn resolve_in_process(pid: u32, target: &Target, access: Access) -> Result<Resolved> {
    resolve_in_process_at(std::path::Path::new(process::PROC), pid, target, access)
}

/// [`resolve_in_process`] with `/proc` at `proc_root`.
pub fn resolve_in_process_at(
    proc_root: &std::path::Path,
    pid: u32,
    target: &Target,
    access: Access,
) -> Result<Resolved> {
    match address_in_process(target, access) {
        Some(resolved) => resolved,
        None => in_process(target, access, process::resolve(proc_root, pid, target)?),
    }
}

/// A raw address `target` in a process, as it is (`None` for a symbol, which the process's binaries
/// place: [`in_process`]).
pub fn address_in_process(target: &Target, access: Access) -> Option<Result<Resolved>> {
    matches!(target.base, Base::Address(_))
        .then(|| resolve(target, access, &SymbolTable::default()))
}

/// A symbol `target` as process `p`'s binaries place it, sized as a watch of `access`, with what the
/// lookup noted (a write watch on code is warned about).
pub fn in_process(target: &Target, access: Access, p: process::InProcess) -> Result<Resolved> {
    let mut warnings = p.found.notes.clone();
    if p.found.is_code() && access == Access::Write {
        warnings.push(text_warning(&p.found.symbol, p.found.type_char));
    }
    sized(
        target,
        access,
        p.addr,
        p.size,
        target.text.clone(),
        warnings,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::model::target::parse;
    use ksymwatch_symbols::kallsyms;
    use std::path::Path;

    const SYMS: &str = "\
ffffffff81000000 T _text
ffffffff81000040 T do_thing
ffffffff83000000 D __start_init_stack
ffffffff83000006 D tiny_thing
ffffffff83000008 D __start_once
ffffffff83100000 D __stop_once
";

    fn table() -> SymbolTable {
        kallsyms::from_text(SYMS, Path::new("fixture")).unwrap()
    }

    fn go(text: &str) -> Result<Resolved> {
        resolve(&parse(text).unwrap(), Access::Write, &table())
    }

    /// `__per_cpu_end` is looked up only for an address below the kernel half: a kernel address or a
    /// symbol in `.data..percpu` is decided without it (a vmlinux builds its whole table to answer it).
    #[test]
    fn the_per_cpu_end_is_asked_for_only_below_the_kernel_half() {
        let never = || -> Option<u64> { panic!("__per_cpu_end asked for") };
        assert!(
            check_kernel_address("jiffies", "jiffies", 0xffffffff82a079c0, None, never).is_ok()
        );
        let msg = |r: Result<()>| r.unwrap_err().to_string();
        let percpu = msg(check_kernel_address(
            "runqueues",
            "runqueues",
            0x31804,
            Some(PERCPU_SECTION),
            never,
        ));
        assert!(percpu.contains("is a per-CPU variable"), "{percpu}");
        let below = msg(check_kernel_address("t", "t", 0x31804, None, || {
            Some(0x40000)
        }));
        assert!(below.contains("is a per-CPU variable"), "{below}");
        for end in [Some(0x40000), None] {
            let above = msg(check_kernel_address("a", "a", 0x100000, None, || end));
            assert!(above.contains("not a kernel address"), "{end:?}: {above}");
        }
    }

    #[test]
    fn symbol_plus_offset() {
        let r = go("__start_once+0x3e00").unwrap();
        assert_eq!(
            r.watch,
            Watch {
                label: "__start_once+0x3e00".into(),
                addr: 0xffffffff83003e08,
                len: 8,
                access: Access::Write,
                module: None,
                per_cpu: None,
            }
        );
    }

    #[test]
    fn default_length_follows_size_and_alignment() {
        assert_eq!(go("__start_init_stack").unwrap().watch.len, 4);
        assert_eq!(go("tiny_thing").unwrap().watch.len, 2);
        assert_eq!(go("__start_init_stack+1").unwrap().watch.len, 1);
        assert_eq!(go("__start_init_stack+4").unwrap().watch.len, 2);
    }

    #[test]
    fn refusals() {
        assert!(go("tiny_thing+2")
            .unwrap_err()
            .to_string()
            .contains("past the end"));
        assert!(go("0x1001/8")
            .unwrap_err()
            .to_string()
            .contains("naturally aligned"));
        assert!(go("0x1001").unwrap_err().to_string().contains("/1"));
        assert!(go("0x0").unwrap_err().to_string().contains("address 0"));
        assert!(go("0x0000900000000000")
            .unwrap_err()
            .to_string()
            .contains("canonical"));
        let e = go("jiffies").unwrap_err();
        assert_eq!(e.code, crate::error::ExitCode::Usage);
        assert!(e.to_string().contains("CONFIG_KALLSYMS_ALL"));
        assert!(go("init_uts_ns.name.nodename")
            .unwrap_err()
            .to_string()
            .contains("--vmlinux"));
    }

    fn dwarf(addr: u64, size: Option<u64>) -> ksymwatch_symbols::Resolved {
        ksymwatch_symbols::Resolved {
            target: "v.f".into(),
            symbol: ksymwatch_symbols::Symbol {
                name: "v".into(),
                addr,
                size,
                type_char: 'D',
                module: None,
            },
            offset: 0,
            link_addr: Some(addr),
            runtime_addr: Some(addr),
            size,
            section: Some(".data".into()),
            type_char: 'D',
            type_name: Some("char[3]".into()),
            source: ksymwatch_symbols::Source::Vmlinux("vmlinux".into()),
            kernel_match: ksymwatch_symbols::KernelMatch::Running,
        }
    }

    #[test]
    fn dwarf_sizes_set_the_default_length() {
        let w = |text: &str, addr, size| {
            from_resolved(
                &parse(text).unwrap(),
                Access::Write,
                &dwarf(addr, size),
                addr,
            )
        };
        let base = 0xffffffff83000000;
        assert_eq!(w("v.f", base, Some(3)).unwrap().watch.len, 2);
        assert_eq!(w("v.f", base + 4, Some(65)).unwrap().watch.len, 4);
        assert_eq!(w("v.f", base, Some(65)).unwrap().watch.len, 8);
        assert_eq!(w("v.f", base + 1, None).unwrap().watch.len, 1);
        let r = w("v.f/8", base, Some(2)).unwrap();
        assert_eq!((r.watch.len, r.warnings.len()), (8, 1));
        assert!(w("v.f/8", base + 2, Some(2))
            .unwrap_err()
            .to_string()
            .contains("naturally aligned"));
        assert_eq!(w("v.f", base, Some(4)).unwrap().watch.label, "v.f");
    }

    fn in_modules(text: &str) -> Result<Resolved> {
        let t = kallsyms::from_text(
            ksymwatch_symbols::testing::MODULES_KALLSYMS,
            Path::new("fixture"),
        )
        .unwrap();
        resolve(&parse(text).unwrap(), Access::Write, &t)
    }

    #[test]
    fn a_module_prefix_looks_in_that_module_and_the_watch_remembers_it() {
        let w = in_modules("foo:counter").unwrap().watch;
        assert_eq!(
            (w.addr, w.len, w.label.as_str()),
            (0xffffffffc0001080, 8, "foo:counter")
        );
        assert_eq!(w.module.as_deref(), Some("foo"));
        let w = in_modules("bar:counter+4").unwrap().watch;
        assert_eq!((w.addr, w.len), (0xffffffffc0002044, 4));
        assert_eq!(w.module.as_deref(), Some("bar"));
        // A plain name of a module symbol is that module's too; a vmlinux one is nobody's.
        assert_eq!(
            in_modules("foo_flags").unwrap().watch.module.as_deref(),
            Some("foo")
        );
        assert!(
            in_modules("counter").is_err(),
            "three `counter`s: ambiguous"
        );
        assert_eq!(in_modules("counter@0").unwrap().watch.module, None);
        let e = in_modules("foo:bar_end").unwrap_err().to_string();
        assert!(e.contains("module `foo` has no symbol `bar_end`"), "{e}");
    }

    #[test]
    fn an_unknown_module_names_both_meanings_of_the_prefix() {
        let e = in_modules("libc.so.6:environ").unwrap_err();
        assert_eq!(e.code, crate::error::ExitCode::Usage);
        assert_eq!(
            e.to_string(),
            "`libc.so.6:environ`: no module `libc.so.6` in these symbols (modules: bar, foo); in a kernel \
             watch `libc.so.6:` names a kernel module (see /proc/modules); for a file mapped by a process, \
             watch the process (-p PID, or -- CMD ARGS; `resolve --pid PID`)"
        );
    }

    #[test]
    fn text_symbol_warns() {
        let r = go("do_thing").unwrap();
        assert_eq!(r.warnings.len(), 1);
        assert!(r.warnings[0].contains("text symbol"));
    }
}
