//! Typed targets, `'(struct task_struct)0xffff888103a4c000.se.vruntime'`: a cast names the type of the
//! object at the base, and the kernel's BTF (`/sys/kernel/btf/vmlinux`, 5 MB, always the running kernel's)
//! gives the member's offset, size and C type. No debug package is needed, and the base may be any
//! address: a heap object from a crash log, a `%px`, a bpftrace map, a user buffer the kernel fills.
//!
//! Resolution is two steps so every base keeps its own rules: the base alone ([`base_target`]: a symbol
//! by whatever source answers symbols, or an address) resolves as a plain target would, then it is moved
//! by the member path: the member found here ([`member`], an offset and a size whatever the object's
//! address), placed on the base and sized by `config::watch` ([`watch::moved`]). Module types are looked for in `/sys/kernel/btf/MODULE` (split BTF on
//! top of vmlinux's) when vmlinux's BTF has no type of that name.
//!
//! A plan's [`Types`] are made once, by the host (the real machine's read on first use), and asked by
//! each stage in one visit: the kernel stage for `--btf`'s check, `--dump-on`'s tracepoints and what BTF
//! says of its targets' variables ([`variables`]: per-CPU ones, and `SYMBOL.FIELD` typed without DWARF),
//! the process stage, first, for each target's member ([`watched_members`]).

use std::cell::OnceCell;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ksymwatch_symbols::{
    Btf, CastKind, CastType, FieldError, MemberInfo, PathElem, SymbolTable, TracepointInfo,
};

use crate::config::advice::Advised;
use crate::config::watch;
use crate::error::{Error, Result};
use crate::model::target::{Base, Member, Target};
use crate::model::watch::Access;

/// Where the running kernel publishes its BTF.
pub const DEFAULT_BTF: &str = Btf::VMLINUX;

/// The BTF that casts are resolved in, as the host gives it to planning (`plan::host::Host::types`): the
/// real machine's are read on first use (a run without casts never reads them), a made-up machine's are
/// given whole.
pub struct Types {
    path: PathBuf,
    file: OnceCell<BtfFile>,
    vmlinux: OnceCell<std::result::Result<Arc<Btf>, String>>,
    modules: OnceCell<Vec<Btf>>,
}

/// What a BTF file is, as far as `--btf`'s checks go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BtfFile {
    pub exists: bool,
    pub dir: bool,
    /// An ELF file (a vmlinux), not raw BTF.
    pub elf: bool,
    /// Whether it is the running kernel's BTF: `Some(false)` when it differs from
    /// `/sys/kernel/btf/vmlinux` (another kernel's types: its offsets would be wrong here), `None` when that
    /// cannot be told (either file unreadable; the default path is the running kernel's by definition).
    pub running: Option<bool>,
}

impl BtfFile {
    /// The file at `path`, as this machine has it.
    pub fn read(path: &Path) -> BtfFile {
        let mut magic = [0u8; 4];
        let elf = std::fs::File::open(path)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
            .is_ok()
            && &magic == b"\x7fELF";
        BtfFile {
            exists: path.exists(),
            dir: path.is_dir(),
            elf,
            running: btf_is_running(path),
        }
    }
}

/// Whether a `--btf FILE` is the running kernel's BTF ([`BtfFile::running`]).
fn btf_is_running(path: &Path) -> Option<bool> {
    let running = Path::new(Btf::VMLINUX);
    if path == running {
        return Some(true);
    }
    let (Ok(mine), Ok(_)) = (std::fs::metadata(path), std::fs::metadata(running)) else {
        return None;
    };
    if mine.is_dir() || !mine.is_file() {
        return None;
    }
    // The sysfs file reports no size: compare the bytes (a few MB).
    same_bytes(path, running).ok()
}

/// Whether files `a` and `b` hold the same bytes, read side by side a block at a time (neither is held
/// whole), up to the first block that differs.
fn same_bytes(a: &Path, b: &Path) -> std::io::Result<bool> {
    use std::io::Read;
    const BLOCK: u64 = 1 << 16;
    let (mut a, mut b) = (std::fs::File::open(a)?, std::fs::File::open(b)?);
    let (mut x, mut y) = (Vec::new(), Vec::new());
    loop {
        x.clear();
        y.clear();
        (&mut a).take(BLOCK).read_to_end(&mut x)?;
        (&mut b).take(BLOCK).read_to_end(&mut y)?;
        if x != y {
            return Ok(false);
        }
        if x.is_empty() {
            return Ok(true);
        }
    }
}

/// `--btf` names a raw BTF file: a directory, or an ELF file (a vmlinux, whose `.BTF` section is what is
/// wanted), is told what to give instead.
fn check_btf_file(path: &Path, file: &BtfFile) -> std::result::Result<(), String> {
    let shown = path.display();
    if file.dir {
        return Err(format!(
            "--btf {shown}: a directory; name the raw BTF file itself (the running kernel's is {DEFAULT_BTF})"
        ));
    }
    if file.elf {
        return Err(format!(
            "--btf {shown}: an ELF file, not raw BTF; extract its .BTF section and pass that: objcopy -O binary \
             --only-section=.BTF {shown} vmlinux.btf (or pass --vmlinux {shown} for DWARF)"
        ));
    }
    Ok(())
}

/// `resolve`'s word on a `--btf FILE` that is not the running kernel's.
pub fn btf_note(path: &Path) -> Option<String> {
    (btf_is_running(path) == Some(false)).then(|| {
        format!(
            "--btf {} is not the running kernel's BTF: offsets and sizes are that kernel's",
            path.display()
        )
    })
}

impl Types {
    /// The BTF at `path`, read from this machine's files on first use.
    pub fn new(path: &Path) -> Types {
        Types {
            path: path.to_path_buf(),
            file: OnceCell::new(),
            vmlinux: OnceCell::new(),
            modules: OnceCell::new(),
        }
    }

    /// Types given whole, nothing read: the file `path` is, and its BTF (else why there is none).
    #[cfg(test)]
    pub fn given(path: &Path, file: BtfFile, vmlinux: std::result::Result<Btf, String>) -> Types {
        Types {
            path: path.to_path_buf(),
            file: OnceCell::from(file),
            vmlinux: OnceCell::from(vmlinux.map(Arc::new)),
            modules: OnceCell::from(Vec::new()),
        }
    }

    /// What the BTF file is.
    fn file(&self) -> &BtfFile {
        self.file.get_or_init(|| BtfFile::read(&self.path))
    }

    /// A live watch takes member offsets from `--btf FILE`: from another kernel's BTF they would put the
    /// watch on the wrong bytes, so that is refused (exit 2); `resolve` may still use it (see [`btf_note`]).
    pub fn check_for_live_watch(&self) -> Result<()> {
        let path = &self.path;
        let file = self.file();
        check_btf_file(path, file).map_err(Error::usage)?;
        match file.running {
            Some(false) => Err(Error::usage(format!(
                "--btf {}: not the running kernel's BTF (it differs from {}): its member offsets belong to another \
                 kernel and would put the watch on the wrong bytes; leave out --btf, or give a copy of {} \
                 (`ksymwatch resolve` may use another kernel's BTF)",
                path.display(),
                Btf::VMLINUX,
                Btf::VMLINUX
            ))),
            _ => Ok(()),
        }
    }

    /// The kernel's own BTF (not a module's), opened on first use: the running kernel's is the one parse
    /// the whole run shares ([`Btf::running`]), a `--btf FILE` elsewhere a parse of its own.
    pub fn vmlinux(&self) -> Result<&Arc<Btf>> {
        let opened = self.vmlinux.get_or_init(|| {
            let btf = match self.path == Path::new(DEFAULT_BTF) {
                true => Btf::running(),
                false => Btf::open(&self.path).map(Arc::new),
            };
            btf.map_err(|e| self.unavailable(Advised(e).to_string()))
        });
        opened.as_ref().map_err(|e| Error::usage(e.clone()))
    }

    /// Why there are no types, `e` being why the file did not load.
    fn unavailable(&self, e: String) -> String {
        let file = self.file();
        if let Err(e) = check_btf_file(&self.path, file) {
            return e;
        }
        if !file.exists && self.path == Path::new(DEFAULT_BTF) {
            format!(
                "a typed target needs the kernel's BTF, and this kernel publishes none at {DEFAULT_BTF} \
                 (built without CONFIG_DEBUG_INFO_BTF); pass --btf FILE with its raw BTF, or use \
                 --vmlinux FILE (with DWARF) and SYMBOL.FIELD"
            )
        } else {
            format!("{e}; pass --btf FILE with the kernel's raw BTF")
        }
    }

    /// Split BTF of loaded modules, next to vmlinux's (`/sys/kernel/btf/MODULE`); unreadable ones are
    /// passed over, since a type found elsewhere does not need them.
    fn modules(&self, base: &Arc<Btf>) -> &[Btf] {
        self.modules.get_or_init(|| {
            // Module BTF lives beside the kernel's own, in /sys/kernel/btf; a --btf FILE elsewhere (a copy in
            // a home directory) has no modules beside it, and the files there are none of ours to read.
            let Some(dir) = self
                .path
                .parent()
                .filter(|d| *d == Path::new(DEFAULT_BTF).parent().unwrap_or(d))
            else {
                return Vec::new();
            };
            let Ok(entries) = std::fs::read_dir(dir) else {
                return Vec::new();
            };
            let mut paths: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| *p != self.path && p.is_file())
                .collect();
            paths.sort();
            paths
                .iter()
                .filter_map(|p| Btf::open_split(p, Arc::clone(base)).ok())
                .collect()
        })
    }

    /// The raw tracepoint `name` as the kernel's BTF describes it (a loaded module's, when vmlinux's has
    /// none): `Ok(None)` when there is no BTF to ask, `Ok(Some(Err(nearest)))` when none has it (the
    /// nearest names it has). The error: corrupt BTF.
    pub fn tracepoint(
        &self,
        name: &str,
    ) -> Result<Option<std::result::Result<TracepointInfo, Vec<String>>>> {
        let Ok(vmlinux) = self.vmlinux() else {
            return Ok(None);
        };
        let corrupt = |e: FieldError| {
            Error::runtime(format!(
                "reading tracepoint `{name}` from {}",
                self.path.display()
            ))
            .caused_by(e)
        };
        if let Some(t) = vmlinux.tracepoint(name).map_err(corrupt)? {
            return Ok(Some(Ok(t)));
        }
        for m in self.modules(vmlinux) {
            if let Some(t) = m.tracepoint(name).map_err(corrupt)? {
                return Ok(Some(Ok(t)));
            }
        }
        Ok(Some(Err(vmlinux.suggest_tracepoints(name))))
    }

    /// The member `path` of an object of type `cast`, and the BTF file that described it. The outer error:
    /// no BTF to look in.
    pub fn member(
        &self,
        cast: &CastType,
        path: &[PathElem],
    ) -> Result<std::result::Result<(MemberInfo, PathBuf), FieldError>> {
        let vmlinux = self.vmlinux()?;
        let mut found = vmlinux
            .member(cast, path)
            .map(|info| (info, self.path.clone()));
        if let Err(FieldError::NoType { .. }) = found {
            for m in self.modules(vmlinux) {
                match m.member(cast, path) {
                    Err(FieldError::NoType { .. }) => continue,
                    r => {
                        found = r.map(|info| (info, m.path().to_path_buf()));
                        break;
                    }
                }
            }
        }
        Ok(found)
    }
}

/// The base of a typed target as a target of its own: `(T)init_task.se.x+8/4` resolves `init_task`, and
/// `(T)0xADDR.f` the address. `/1` keeps a base that is only 4-aligned from being refused as an 8-byte watch:
/// the length watched is the member's, chosen in [`apply`].
pub fn base_target(t: &Target) -> Target {
    if t.cast.is_none() {
        return t.clone();
    }
    let text = match &t.base {
        Base::Address(a) => format!("0x{a:x}"),
        Base::Symbol {
            object,
            name,
            index,
        } => {
            let mut s = object.as_ref().map_or(String::new(), |o| format!("{o}:"));
            s.push_str(name);
            if let Some(i) = index {
                s.push_str(&format!("@{i}"));
            }
            s
        }
    };
    Target {
        cast: None,
        base: t.base.clone(),
        path: Vec::new(),
        offset: 0,
        len: Some(1),
        text,
    }
}

/// A per-CPU variable (`runqueues.nr_running`, `cpu_number`), as BTF records it: what to cast each CPU's copy
/// to, and where in the per-CPU area it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerCpuVariable {
    pub name: String,
    /// The cast that names the variable's type, as the target grammar spells it (`struct rq`).
    pub cast: CastType,
    /// The member path after the variable (`.nr_running`; empty for the whole variable).
    pub path: Vec<PathElem>,
    pub offset_in_section: u64,
}

impl PerCpuVariable {
    /// The path as written (`.nr_running`).
    pub fn path_text(&self) -> String {
        self.path.iter().map(|e| e.to_string()).collect()
    }
}

/// What the kernel's BTF says of the variable a target names.
#[derive(Debug)]
pub enum Variable {
    /// Nothing that changes the target (no such variable, no BTF, or not asked).
    Untyped,
    /// A per-CPU variable: each CPU has its own copy.
    PerCpu(PerCpuVariable),
    /// `SYMBOL.PATH` as a cast on the symbol (see [`btf_variable`]), or why it cannot be one.
    Cast(Result<Target>),
}

/// What the kernel stage asks of the types for its targets, in one question ([`variables`]).
pub struct Asked<'a> {
    /// Member offsets go live (a cast, a member path, `--control`): another kernel's `--btf` is refused.
    pub live: bool,
    /// A target may name a per-CPU variable (a system-wide watch).
    pub percpu: bool,
    /// The kallsyms table, when the symbols are one: a bare name it knows is no per-CPU variable to ask
    /// BTF about (loading the kernel's BTF for every plain `jiffies` would cost every start-up
    /// milliseconds).
    pub known: Option<&'a SymbolTable>,
    /// No DWARF places a member path: a `SYMBOL.PATH` whose variable BTF knows becomes a cast on the
    /// symbol, as [`btf_variable`] makes it.
    pub cast: bool,
}

/// The kernel stage's question to the types: `--btf` checked for a live watch, then what BTF says of
/// each of `targets`' variables, in order, asked of vmlinux's BTF once (read only when some target asks):
/// a per-CPU variable (named with a member path, `runqueues.nr_running`, or bare, `cpu_number`, where
/// the symbols do not know it), or a `SYMBOL.PATH` to type as a cast.
pub fn variables(types: &Types, targets: &[Target], asked: &Asked<'_>) -> Result<Vec<Variable>> {
    if asked.live {
        types.check_for_live_watch()?;
    }
    let unknown = |name: &str| {
        asked
            .known
            .is_some_and(|table| table.by_name(name).next().is_none())
    };
    let maybe_percpu = |t: &Target| match &t.base {
        _ if !asked.percpu => false,
        _ if !t.path.is_empty() => true,
        Base::Symbol { name, .. } => unknown(name),
        Base::Address(_) => false,
    };
    let typeable = |t: &Target| asked.cast && names_variable(t);
    let btf = match targets.iter().any(|t| maybe_percpu(t) || typeable(t)) {
        true => types.vmlinux().ok(),
        false => None,
    };
    let Some(btf) = btf else {
        return Ok(targets.iter().map(|_| Variable::Untyped).collect());
    };
    let variable = |t: &Target| {
        let percpu = match maybe_percpu(t) {
            true => percpu_variable(btf, t),
            false => None,
        };
        match percpu {
            Some(v) => Variable::PerCpu(v),
            None if typeable(t) => match cast_variable(btf, t) {
                Ok(Some(typed)) => Variable::Cast(Ok(typed)),
                Err(e) => Variable::Cast(Err(e)),
                Ok(None) => Variable::Untyped,
            },
            None => Variable::Untyped,
        }
    };
    Ok(targets.iter().map(variable).collect())
}

/// `target` when it names a per-CPU variable `btf` records, with or without a member path (else `None`).
fn percpu_variable(btf: &Btf, target: &Target) -> Option<PerCpuVariable> {
    if target.cast.is_some()
        || target.object().is_some()
        || !matches!(target.base, Base::Symbol { .. })
    {
        return None;
    }
    target.symbol_splits().into_iter().find_map(|(name, rest)| {
        let v = btf
            .variable(&name)
            .filter(|v| v.section == PERCPU_SECTION)?;
        Some(PerCpuVariable {
            cast: cast_of(&v.type_name)?,
            path: rest,
            offset_in_section: v.offset_in_section,
            name,
        })
    })
}

/// Whether `target` is a `SYMBOL.PATH` that BTF may type (no cast, a member path, not a module's).
fn names_variable(target: &Target) -> bool {
    target.cast.is_none() && !target.path.is_empty() && target.object().is_none()
}

/// `SYMBOL.PATH` without DWARF, for a variable whose type BTF knows (per-CPU variables; every global on
/// kernels built with pahole's global-variable encoding): the same target with its type as a cast, so it
/// resolves like `'(TYPE)SYMBOL.PATH'`. `None` when BTF does not know the variable (or there is no BTF):
/// the caller's own "needs DWARF" error stands. A per-CPU variable is refused: the symbol is one CPU's
/// copy's offset from its per-CPU base, not an address.
pub fn btf_variable(types: &Types, target: &Target) -> Result<Option<Target>> {
    if !names_variable(target) {
        return Ok(None);
    }
    let Ok(btf) = types.vmlinux() else {
        return Ok(None);
    };
    cast_variable(btf, target)
}

/// [`btf_variable`] in `btf`.
fn cast_variable(btf: &Btf, target: &Target) -> Result<Option<Target>> {
    for (name, rest) in target.symbol_splits() {
        if rest.is_empty() {
            continue;
        }
        let Some(v) = btf.variable(&name) else {
            continue;
        };
        let path: String = rest.iter().map(|e| e.to_string()).collect();
        let Some(cast) = cast_of(&v.type_name) else {
            return Err(Error::usage(format!(
                "`{}`: BTF knows `{name}` as a {}, which has no name to cast to; pass --vmlinux FILE \
                 with DWARF",
                target.text, v.type_name
            )));
        };
        if v.section == PERCPU_SECTION {
            return Err(Error::usage(format!(
                "`{}`: `{name}` is a per-CPU variable ({}): every CPU has its own copy, and the symbol is \
                 only its offset in the per-CPU area; a system-wide `write`/`rw` watches each CPU's copy \
                 (`--percpu-cpu N`: CPU N's), or give one copy's address: '({cast})0xADDR{path}'",
                target.text, v.type_name
            )));
        }
        let Base::Symbol { index, .. } = &target.base else {
            return Ok(None);
        };
        return Ok(Some(Target {
            cast: Some(cast),
            base: Base::Symbol {
                object: None,
                name,
                index: *index,
            },
            path: rest,
            offset: target.offset,
            len: target.len,
            text: target.text.clone(),
        }));
    }
    Ok(None)
}

/// The section BTF puts per-CPU variables in.
const PERCPU_SECTION: &str = ".data..percpu";

/// A C type name as BTF prints it (`struct cpu_hw_events`, `u64`) as a cast; `None` for a type with no
/// name of its own (`int[4]`, `struct list_head *`).
fn cast_of(type_name: &str) -> Option<CastType> {
    let (kind, name) = match type_name.split_once(' ') {
        Some(("struct", n)) => (Some(CastKind::Struct), n),
        Some(("union", n)) => (Some(CastKind::Union), n),
        Some(("enum", n)) => (Some(CastKind::Enum), n),
        Some(_) => return None,
        None => (None, type_name),
    };
    let named = name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_');
    named.then(|| CastType {
        kind,
        name: name.to_string(),
    })
}

/// A typed target resolved: the base, the member, and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Typed {
    /// The target as given, without `/LEN`: the label of its hits.
    pub label: String,
    /// The base as resolved: `0xffff888103a4c000`, or the symbol's name.
    pub base: String,
    pub base_addr: u64,
    /// `.se.vruntime[2]`, empty for the whole object.
    pub path: String,
    /// Where the member is: `base_addr` plus its offset.
    pub addr: u64,
    pub member: Member,
    /// Which file placed a symbol base, and whether it is the running kernel (`resolve` fills it).
    pub base_source: Option<String>,
}

/// `target`'s cast and path in BTF; `base` names its base in what a bitfield's refusal offers instead.
pub fn member(types: &Types, target: &Target, base: &str) -> Result<Member> {
    let Some(cast) = &target.cast else {
        return Err(Error::usage(format!(
            "`{}` has no (TYPE) cast",
            target.text
        )));
    };
    let (m, btf) = match types.member(cast, &target.path)? {
        Ok(found) => found,
        Err(FieldError::Load(e)) => return Err(Error::usage(Advised(e).to_string())),
        // A bitfield: the message offers the word that holds it, spelled as a target of this base.
        Err(e) => {
            let word = match &e {
                FieldError::Bitfield {
                    word_offset,
                    word_size,
                    ..
                } => format!(
                    "; the word as a target: '({cast}){base}+0x{word_offset:x}/{word_size}'"
                ),
                _ => String::new(),
            };
            return Err(Error::usage(format!(
                "`{}`: {}{word}",
                target.text,
                Advised(e)
            )));
        }
    };
    let off = target.offset;
    if let Some(size) = m.size.filter(|_| off > 0) {
        if off >= size {
            return Err(Error::usage(format!(
                "`{}`: offset 0x{off:x} is past the end of the member ({size} bytes, {})",
                target.text, m.type_name
            )));
        }
    }
    let offset = m
        .offset
        .checked_add(off)
        .ok_or_else(|| watch::overflows(target))?;
    Ok(Member {
        cast: cast.clone(),
        offset,
        size: m.size.map(|s| s - off),
        type_name: (off == 0).then_some(m.type_name),
        btf,
    })
}

/// Resolves `target`'s cast and path at `base_addr` (where its base resolved).
pub fn resolve(types: &Types, target: &Target, base_addr: u64, base: &str) -> Result<Typed> {
    let m = member(types, target, base)?;
    let addr = watch::member_at(target, &m, base_addr)?;
    Ok(Typed {
        label: watch::member_label(target, &m, base),
        base: base.to_string(),
        base_addr,
        path: target.path.iter().map(|e| e.to_string()).collect(),
        addr,
        member: m,
        base_source: None,
    })
}

/// The member each of `targets` watches, asked of BTF once for all of them before any base is resolved
/// (`None` for a target without a cast): a hardware watchpoint covers at most 8 bytes, so a bigger member
/// (a struct, an array) is refused here unless `/LEN` states how much of it to watch.
pub fn watched_members(types: &Types, targets: &[Target]) -> Result<Vec<Option<Member>>> {
    targets.iter().map(|t| watched_member(types, t)).collect()
}

/// [`watched_members`]'s for one target; a bitfield's refusal spells its word on the base as written.
fn watched_member(types: &Types, target: &Target) -> Result<Option<Member>> {
    if target.cast.is_none() {
        return Ok(None);
    }
    let m = member(types, target, &base_target(target).text)?;
    // Never silently cut to its first 8 bytes: /LEN states the choice.
    if let (Some(size), None) = (m.size, target.len) {
        if size > 8 {
            let what = m.type_name.as_deref().unwrap_or("the member");
            return Err(Error::usage(format!(
                "`{}` is {size} bytes ({what}), and a hardware watchpoint covers at most 8: name one of its \
                 fields (.FIELD), or add /LEN (1, 2, 4 or 8) to watch its first bytes",
                target.text
            )));
        }
    }
    Ok(Some(m))
}

/// Moves the watch its base resolved to (`base`, from [`base_target`]) onto the member, with the member's
/// length unless `/LEN` says otherwise. Targets without a cast pass through.
pub fn apply(
    types: &Types,
    target: &Target,
    base: watch::Resolved,
    access: Access,
) -> Result<watch::Resolved> {
    match watched_member(types, target)? {
        Some(m) => watch::moved(target, &m, base, access),
        None => Ok(base),
    }
}

impl Typed {
    /// `resolve --json`: one object; addresses as `"0x..."` strings like the other forms.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "target": self.label,
            "cast": self.member.cast.to_string(),
            "base": self.base,
            "base_addr": format!("0x{:x}", self.base_addr),
            "member": self.path,
            "offset": self.member.offset,
            "runtime_addr": format!("0x{:x}", self.addr),
            "size": self.member.size,
            "type": self.member.type_name,
            "btf": self.member.btf.to_string_lossy(),
            "base_source": self.base_source,
        })
        .to_string()
    }
}

impl fmt::Display for Typed {
    /// `resolve`'s `key: value` lines, with the same keys as a symbol's where they mean the same.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "target:       {}", self.label)?;
        writeln!(
            f,
            "object:       {} at 0x{:016x}",
            self.member.cast, self.base_addr
        )?;
        if !self.base.starts_with("0x") {
            writeln!(f, "base symbol:  {}", self.base)?;
        }
        let member = if self.path.is_empty() {
            "(the whole object)"
        } else {
            &self.path
        };
        writeln!(
            f,
            "member:       {member} at offset 0x{:x}",
            self.member.offset
        )?;
        writeln!(f, "runtime addr: 0x{:016x}", self.addr)?;
        writeln!(
            f,
            "size:         {}",
            self.member
                .size
                .map_or("unknown".to_string(), |n| n.to_string())
        )?;
        writeln!(
            f,
            "type:         {}",
            self.member
                .type_name
                .as_deref()
                .unwrap_or("unknown (inside the member)")
        )?;
        write!(f, "types:        BTF {}", self.member.btf.display())?;
        if let Some(s) = &self.base_source {
            write!(f, "\nsource:       {s}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files compare equal only with the same bytes: a difference in a later block, or one file ending
    /// sooner (a prefix of the other), is told apart.
    #[test]
    fn same_bytes_compares_every_block() {
        let dir = std::env::temp_dir().join(format!("ksw-same-bytes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let write = |name: &str, b: &[u8]| {
            let p = dir.join(name);
            std::fs::write(&p, b).expect("write");
            p
        };
        let a = write("a", &bytes);
        let same = write("same", &bytes);
        let mut changed = bytes.clone();
        changed[150_000] ^= 1;
        let changed = write("changed", &changed);
        let prefix = write("prefix", &bytes[..(1 << 16)]);
        let empty = write("empty", &[]);
        assert!(same_bytes(&a, &same).expect("readable"));
        assert!(!same_bytes(&a, &changed).expect("readable"));
        assert!(!same_bytes(&a, &prefix).expect("readable"));
        assert!(!same_bytes(&empty, &a).expect("readable"));
        assert!(same_bytes(&empty, &empty).expect("readable"));
        assert!(same_bytes(&a, &dir.join("missing")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
