//! Where a variable is in one running process: a symbol looked up in the process's own binaries (the
//! executable first, then each mapped file in `/proc/PID/maps` order, or the one `OBJECT:` names), moved by
//! the load bias those maps show, and walked into struct fields and array elements with the binary's DWARF
//! ([`crate::dwarf`], the same walk as for a vmlinux).
//!
//! The files are the process's, so they are hostile input to a tracer running as root, as in [`crate::user`]:
//! each is opened through `/proc/PID/map_files` (or the process's root), must be a regular file with the
//! mapping's inode, and is read with bounded positioned reads, never mapped.
//!
//! The load bias is what the loader added to the file's addresses: 0 for a non-PIE executable (`ET_EXEC`),
//! the mapping address for a PIE executable or a library. Every mapping of one segment satisfies
//! `start - offset = bias + p_vaddr - p_offset`. Only the first PT_LOAD segment's mapping is unambiguous:
//! the page a segment's file offset falls in can be mapped twice (a RELRO data segment shares its first
//! file page with the read-only segment before it, mapped at another address), so the bias is taken from
//! the mapping holding the first segment, and a symbol's runtime address is its `st_value` plus the bias.
//! That holds for `.bss` too, which lies past the file in an anonymous mapping.
//!
//! No perf code: the tracer arms what [`resolve`] returns.

pub(crate) mod debug;
mod error;

pub use error::{Caller, DebugProblem, LayoutProblem, ObjectProblem, ProcessError, Unreadable};

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use goblin::elf::section_header::{SHN_ABS, SHN_UNDEF, SHT_DYNSYM, SHT_SYMTAB};
use goblin::elf::sym::{
    Sym as ElfSym, STB_GLOBAL, STB_WEAK, STT_FILE, STT_OBJECT, STT_SECTION, STT_TLS,
};

use crate::dwarf::{self, DebugSections, FieldError, VariableQuery};
use crate::path::PathElem;
use crate::symbol::Symbol;
use crate::table::SymbolTable;
use crate::user::elf::{c_string, Headers};
use crate::user::{basename, live_thread_dir, open_mapped, parse_maps, Mapping};
use crate::vmlinux::nm_letter;

/// The most of `/proc/PID/maps` read: a process at the kernel's default limit of 65530 mappings has about
/// 7 MiB of it.
const MAPS_LIMIT: u64 = 64 << 20;

/// What a target in a process resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessTarget {
    /// The symbol the target starts from (`counters`, `environ`).
    pub symbol: String,
    /// The mapped file holding it, as `/proc/PID/maps` names it.
    pub object: PathBuf,
    /// Whether that file is the process's executable.
    pub is_exe: bool,
    /// The symbol's address in the file (`st_value`, what `nm` prints).
    pub file_vaddr: u64,
    /// What the loader added to the file's addresses: 0 for a non-PIE executable.
    pub bias: u64,
    /// Where the target is in the process: the symbol's runtime address plus the member's offset.
    pub addr: u64,
    /// Bytes at `addr`: the member's DWARF size, else the symbol's (`st_size`); `None` when unknown.
    pub size: Option<u64>,
    /// The symbol's own `st_size`; `None` when 0.
    pub symbol_size: Option<u64>,
    /// `nm`'s letter for the symbol (`D`, `b`, `T`...).
    pub type_char: char,
    /// The ELF section the symbol is defined in (`.bss`), when the file names its sections.
    pub section: Option<String>,
    /// The C type of what is at `addr`, when there is DWARF.
    pub type_name: Option<String>,
    /// The member path below the symbol, when the target has one.
    pub member: Option<Member>,
    /// The file the DWARF came from: the object itself, or its separate debug file.
    pub debug_file: Option<PathBuf>,
    /// What the user should know about the answer (a copy relocation that makes another copy the live one).
    pub notes: Vec<String>,
}

impl ProcessTarget {
    /// The symbol's runtime address.
    pub fn symbol_addr(&self) -> u64 {
        self.file_vaddr.wrapping_add(self.bias)
    }

    /// Basename of the object: `libc.so.6`.
    pub fn object_name(&self) -> String {
        basename(&self.object.to_string_lossy())
    }

    /// Whether the symbol is code (a function) rather than data.
    pub fn is_code(&self) -> bool {
        matches!(self.type_char, 'T' | 't' | 'i' | 'W' | 'w')
    }
}

/// A member path and where it lands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// As written back: `.pts[2].y`.
    pub path: String,
    /// Bytes from the symbol's start.
    pub offset: u64,
}

/// Resolves `[object:]name[@index]path` in process `pid`, with `/proc` at `proc_root`.
///
/// `object` is a mapped file's basename (`libc.so.6`), a prefix of it up to a `.` or `-` (`libc`), or
/// its path; without it the executable is searched first, then every other mapped file, and a symbol in
/// several of them (none the executable) is [`ProcessError::Ambiguous`]. In each file `.symtab` is
/// searched, else `.dynsym`.
pub fn resolve(
    proc_root: &Path,
    pid: u32,
    object: Option<&str>,
    name: &str,
    index: Option<usize>,
    path: &[PathElem],
) -> Result<ProcessTarget, ProcessError> {
    let process = Process::read(proc_root, pid)?;
    let objects = process.objects();
    let chosen: Vec<&Object> = match object {
        Some(o) => vec![process.find(&objects, o)?],
        None => objects.iter().collect(),
    };
    let mut found: Vec<(&Object, Loaded, Vec<ElfSym>)> = Vec::new();
    let (mut searched, mut exports_only, mut unreadable) = (Vec::new(), Vec::new(), Vec::new());
    for obj in chosen {
        let loaded = match Loaded::open(proc_root, pid, obj) {
            Ok(l) => l,
            Err(problem) if object.is_some() => {
                return Err(ProcessError::Unreadable {
                    object: obj.path.into(),
                    problem,
                })
            }
            Err(problem) => {
                unreadable.push(Unreadable {
                    object: obj.name(),
                    problem,
                });
                continue;
            }
        };
        let (syms, dynamic) = loaded.named(name);
        searched.push(obj.name());
        if dynamic {
            exports_only.push(obj.name());
        }
        if !syms.is_empty() {
            found.push((obj, loaded, syms));
            // The executable's definition is the one the program uses (it interposes on every library's).
            if obj.is_exe {
                break;
            }
        }
    }
    let (obj, loaded, syms) = match found.len() {
        0 => {
            return Err(ProcessError::Unknown {
                pid,
                name: name.to_string(),
                searched,
                exports_only,
                unreadable,
            })
        }
        // The executable is searched first and ends the search, so several are all libraries.
        1 => found.remove(0),
        _ => {
            let candidates = found
                .iter()
                .flat_map(|(o, l, syms)| {
                    let bias = l.bias(o).unwrap_or(0);
                    syms.iter()
                        .map(move |s| (o.name(), s.st_value.wrapping_add(bias)))
                })
                .collect();
            return Err(ProcessError::Ambiguous {
                name: name.to_string(),
                candidates,
            });
        }
    };
    let bias = loaded.bias(obj)?;
    let sym = pick(obj, &loaded, &syms, name, index, bias)?;
    if sym.st_type() == STT_TLS {
        return Err(ProcessError::ThreadLocal {
            name: name.to_string(),
            object: obj.name(),
        });
    }
    let section_names = loaded.headers.section_names(&loaded.file);
    let section = loaded.headers.sections.get(sym.st_shndx);
    let mut target = ProcessTarget {
        symbol: name.to_string(),
        object: obj.path.into(),
        is_exe: obj.is_exe,
        file_vaddr: sym.st_value,
        bias,
        addr: sym.st_value.wrapping_add(bias),
        size: (sym.st_size > 0).then_some(sym.st_size),
        symbol_size: (sym.st_size > 0).then_some(sym.st_size),
        type_char: nm_letter(&sym, section.map(|s| (s.sh_flags, s.sh_type))),
        section: section
            .zip(section_names.as_deref())
            .and_then(|(s, names)| c_string(names, s.sh_name))
            .map(|n| String::from_utf8_lossy(n).into_owned()),
        type_name: None,
        member: None,
        debug_file: None,
        notes: Vec::new(),
    };
    if object.is_some() && !obj.is_exe && matches!(sym.st_bind(), STB_GLOBAL | STB_WEAK) {
        target.notes.extend(copy_relocation_note(
            proc_root, pid, &objects, name, &target,
        ));
    }
    add_member(
        proc_root,
        pid,
        obj,
        &loaded,
        &sym,
        name,
        index,
        path,
        &mut target,
    )?;
    Ok(target)
}

/// One of the same-named symbols of one file, by `@N` as on the kernel side ([`SymbolTable::lookup`]):
/// several at different addresses and no `@N` is an ambiguity, listed with their runtime addresses.
fn pick(
    obj: &Object,
    loaded: &Loaded,
    syms: &[ElfSym],
    name: &str,
    index: Option<usize>,
    bias: u64,
) -> Result<ElfSym, ProcessError> {
    let as_symbols = syms
        .iter()
        .map(|s| {
            let section = loaded.headers.sections.get(s.st_shndx);
            Symbol {
                name: name.to_string(),
                addr: s.st_value.wrapping_add(bias),
                size: Some(s.st_size),
                type_char: nm_letter(s, section.map(|s| (s.sh_flags, s.sh_type))),
                module: None,
            }
        })
        .collect();
    let table = SymbolTable::new(as_symbols, false);
    let chosen = table
        .lookup(name, index)
        .map_err(|error| ProcessError::Lookup {
            object: obj.name(),
            error,
        })?;
    syms.iter()
        .find(|s| s.st_value.wrapping_add(bias) == chosen.addr)
        .copied()
        .ok_or_else(|| ProcessError::Layout {
            object: obj.path.into(),
            problem: LayoutProblem::SymbolChanged,
        })
}

/// A global picked in a library by `OBJECT:` while the executable defines its own copy too (a copy
/// relocation: a non-PIC executable that refers to a library's variable gets the variable in its own
/// `.bss`, and the library's code uses that copy): the library's is then not the one that changes.
fn copy_relocation_note(
    proc_root: &Path,
    pid: u32,
    objects: &[Object],
    name: &str,
    target: &ProcessTarget,
) -> Option<String> {
    let exe = objects.iter().find(|o| o.is_exe)?;
    let loaded = Loaded::open(proc_root, pid, exe).ok()?;
    let table = loaded
        .headers
        .section_of_type(SHT_DYNSYM)
        .and_then(|t| loaded.headers.symbols(&loaded.file, t).ok().flatten())?;
    let own = table.iter().find(|s| {
        table.name(s) == Some(name.as_bytes()) && is_definition(s) && s.st_type() == STT_OBJECT
    })?;
    let bias = loaded.bias(exe).ok()?;
    Some(format!(
        "the executable {} defines its own `{name}` at 0x{:x} (a copy relocation): that copy is the one the \
         program and {} use, not this one; watch `{name}` without `{}:` for it",
        exe.name(),
        own.st_value.wrapping_add(bias),
        target.object_name(),
        target.object_name(),
    ))
}

/// Walks the member path (and looks up the C type) with the DWARF of the object or of its debug file.
#[allow(clippy::too_many_arguments)]
fn add_member(
    proc_root: &Path,
    pid: u32,
    obj: &Object,
    loaded: &Loaded,
    sym: &ElfSym,
    name: &str,
    index: Option<usize>,
    path: &[PathElem],
    target: &mut ProcessTarget,
) -> Result<(), ProcessError> {
    let written = || {
        let mut t = name.to_string();
        if let Some(i) = index {
            t.push_str(&format!("@{i}"));
        }
        t.extend(path.iter().map(|e| e.to_string()));
        t
    };
    let debug = match debug::find(proc_root, pid, &loaded.file, &loaded.headers, obj.path) {
        Ok(Some(d)) => d,
        // A bare name needs no type to be watched; only a member path depends on DWARF.
        _ if path.is_empty() => return Ok(()),
        Ok(None) => {
            return Err(ProcessError::NoDebugInfo {
                object: obj.path.into(),
                target: written(),
            })
        }
        Err(problem) => {
            return Err(ProcessError::DebugInfo {
                object: obj.path.into(),
                problem,
            })
        }
    };
    let query = VariableQuery {
        name,
        addr: Some(sym.st_value),
        accept_declaration: sym.st_bind() == STB_GLOBAL,
    };
    match dwarf::resolve_path(&debug, &query, path, &crate::progress::NoProgress) {
        Ok(m) => {
            target.addr =
                target
                    .symbol_addr()
                    .checked_add(m.offset)
                    .ok_or_else(|| ProcessError::Layout {
                        object: obj.path.into(),
                        problem: LayoutProblem::PastAddressSpace { target: written() },
                    })?;
            target.size = m.size.or(if path.is_empty() { target.size } else { None });
            target.type_name = Some(m.type_name);
            target.debug_file = Some(debug.path().to_path_buf());
            if !path.is_empty() {
                target.member = Some(Member {
                    path: path.iter().map(|e| e.to_string()).collect(),
                    offset: m.offset,
                });
            }
            Ok(())
        }
        Err(_) if path.is_empty() => Ok(()),
        Err(FieldError::Load(e)) => Err(ProcessError::DebugInfo {
            object: obj.path.into(),
            problem: DebugProblem::Dwarf(Box::new(e)),
        }),
        Err(e) => Err(ProcessError::Field(e)),
    }
}

/// A defined symbol with an address in the file: not undefined, not absolute, not a section or file name.
fn is_definition(s: &ElfSym) -> bool {
    let shndx = s.st_shndx as u32;
    !matches!(s.st_type(), STT_SECTION | STT_FILE)
        && shndx != SHN_UNDEF
        && shndx != SHN_ABS
        // A thread-local's value is an offset into the TLS block, so 0 is a real one.
        && (s.st_value != 0 || s.st_type() == STT_TLS)
}

/// A process's mappings and which file is its executable.
pub(crate) struct Process {
    /// Its `/proc/PID` directory.
    dir: PathBuf,
    pid: u32,
    maps: Vec<Mapping>,
    /// The executable's path as `/proc/PID/exe` links to it; `None` when the link cannot be read.
    exe: Option<String>,
}

/// One mapped file and its mappings, in maps order.
pub(crate) struct Object<'p> {
    pub(crate) path: &'p str,
    dev: &'p str,
    inode: u64,
    pub(crate) maps: Vec<&'p Mapping>,
    is_exe: bool,
}

impl Object<'_> {
    pub(crate) fn name(&self) -> String {
        basename(self.path)
    }
}

impl Process {
    pub(crate) fn read(proc_root: &Path, pid: u32) -> Result<Process, ProcessError> {
        if pid == 0 {
            return Err(ProcessError::NoProcess { pid });
        }
        let mut dir = proc_root.join(pid.to_string());
        let path = dir.join("maps");
        let mut text = String::new();
        let read = File::open(&path).and_then(|f| f.take(MAPS_LIMIT).read_to_string(&mut text));
        // A process whose main thread alone has exited shows its memory (maps, exe, root) in a live
        // thread's directory only.
        if read.is_ok() && text.is_empty() {
            if let Some(thread) = live_thread_dir(proc_root, pid) {
                let again = File::open(thread.join("maps"))
                    .and_then(|f| f.take(MAPS_LIMIT).read_to_string(&mut text));
                if again.is_ok() {
                    dir = thread;
                }
            }
        }
        if let Err(source) = read {
            return Err(match source.kind() {
                std::io::ErrorKind::NotFound => ProcessError::NoProcess { pid },
                std::io::ErrorKind::PermissionDenied => ProcessError::NotPermitted {
                    pid,
                    path,
                    source,
                    caller: Caller::current(),
                },
                // A process that exits while its maps are read.
                _ if source.raw_os_error() == Some(libc::ESRCH) => ProcessError::NoProcess { pid },
                _ => ProcessError::Io { path, source },
            });
        }
        let maps: Vec<Mapping> = parse_maps(&text)
            .into_iter()
            .filter(|m| m.path.starts_with('/'))
            .collect();
        if maps.is_empty() {
            return Err(ProcessError::NoMappings { pid });
        }
        let exe = std::fs::read_link(dir.join("exe"))
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
        Ok(Process {
            dir,
            pid,
            maps,
            exe,
        })
    }

    /// The mapped files, the executable first, then the others in maps (address) order.
    pub(crate) fn objects(&self) -> Vec<Object<'_>> {
        let mut out: Vec<Object> = Vec::new();
        for m in &self.maps {
            match out
                .iter_mut()
                .find(|o| o.inode == m.inode && o.dev == m.dev && o.path == m.path)
            {
                Some(o) => o.maps.push(m),
                None => out.push(Object {
                    path: &m.path,
                    dev: &m.dev,
                    inode: m.inode,
                    maps: vec![m],
                    is_exe: self.exe.as_deref() == Some(m.path.as_str()),
                }),
            }
        }
        // Stable: the other files keep maps order.
        out.sort_by_key(|o| !o.is_exe);
        out
    }

    /// The mapped file `OBJECT:` names (see [`resolve`]).
    pub(crate) fn find<'o, 'p>(
        &self,
        objects: &'o [Object<'p>],
        object: &str,
    ) -> Result<&'o Object<'p>, ProcessError> {
        let matches: Vec<&Object> = if object.contains('/') {
            let same_file = same_file_as(&self.dir.join("root"), object);
            objects
                .iter()
                .filter(|o| {
                    o.path.trim_end_matches(" (deleted)") == object
                        || same_file.is_some_and(|(dev, ino)| {
                            o.inode == ino && parse_dev(o.dev) == Some(dev)
                        })
                })
                .collect()
        } else {
            let exact: Vec<&Object> = objects.iter().filter(|o| o.name() == object).collect();
            if exact.is_empty() {
                // `libc` for libc.so.6 or libc-2.31.so, but not for libcrypto.so.3.
                objects
                    .iter()
                    .filter(|o| {
                        o.name()
                            .strip_prefix(object)
                            .is_some_and(|rest| rest.starts_with(['.', '-']))
                    })
                    .collect()
            } else {
                exact
            }
        };
        match matches[..] {
            [one] => Ok(one),
            [] => Err(ProcessError::NotMapped {
                pid: self.pid,
                object: object.to_string(),
                mapped: objects.iter().map(Object::name).collect(),
            }),
            _ => Err(ProcessError::AmbiguousObject {
                object: object.to_string(),
                matches: matches.iter().map(|o| o.path.to_string()).collect(),
            }),
        }
    }
}

/// The ((major, minor) device, inode) of `path` as the process sees it (through its root) or, failing
/// that, as we do: `/lib/x86_64-linux-gnu/libc.so.6` is the mapped `/usr/lib/...` file on a merged-/usr
/// system.
fn same_file_as(root: &Path, path: &str) -> Option<((u32, u32), u64)> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(root.join(path.trim_start_matches('/')))
        .or_else(|_| std::fs::metadata(path))
        .ok()?;
    Some(((libc::major(md.dev()), libc::minor(md.dev())), md.ino()))
}

/// A maps device column, `fd:01`: (major, minor).
fn parse_dev(dev: &str) -> Option<(u32, u32)> {
    let (major, minor) = dev.split_once(':')?;
    Some((
        u32::from_str_radix(major, 16).ok()?,
        u32::from_str_radix(minor, 16).ok()?,
    ))
}

/// One mapped file, opened, with its headers read.
struct Loaded {
    file: File,
    headers: Headers,
}

impl Loaded {
    fn open(proc_root: &Path, pid: u32, obj: &Object) -> Result<Loaded, ObjectProblem> {
        let m = obj.maps[0];
        let (file, _) = open_mapped(proc_root, pid, m).ok_or(ObjectProblem::NotOpenable)?;
        let headers = Headers::read(&file).ok_or(ObjectProblem::NotElf)?;
        Ok(Loaded { file, headers })
    }

    /// The definitions named `name` in `.symtab`, else in `.dynsym`; the flag says whether `.dynsym` was
    /// all there was to search (a stripped file).
    fn named(&self, name: &str) -> (Vec<ElfSym>, bool) {
        let mut dynamic_only = true;
        for kind in [SHT_SYMTAB, SHT_DYNSYM] {
            let Some(table) = self
                .headers
                .section_of_type(kind)
                .and_then(|t| self.headers.symbols(&self.file, t).ok().flatten())
            else {
                continue;
            };
            // A `.symtab` holding only the null symbol is as stripped as none.
            if kind == SHT_SYMTAB && table.len() > 1 {
                dynamic_only = false;
            }
            // Data, code and untyped labels alike: each is an address a store can hit (or, for code, a
            // mistake the caller warns about).
            let syms: Vec<ElfSym> = table
                .iter()
                .filter(|s| is_definition(s) && table.name(s) == Some(name.as_bytes()))
                .collect();
            if !syms.is_empty() {
                return (syms, kind == SHT_DYNSYM && dynamic_only);
            }
        }
        (Vec::new(), dynamic_only)
    }

    /// The load bias of `obj` (see the module documentation).
    fn bias(&self, obj: &Object) -> Result<u64, ProcessError> {
        load_bias(&self.headers, &obj.maps).map_err(|problem| ProcessError::Layout {
            object: obj.path.into(),
            problem,
        })
    }
}

/// The bias from the mapping that holds the first PT_LOAD segment's file offset. A file mapped at more
/// than one place (a program that also maps its own binary to read it) is told apart by which placement
/// has the last segment mapped where that bias puts it.
fn load_bias(headers: &Headers, maps: &[&Mapping]) -> Result<u64, LayoutProblem> {
    let mut loads = headers.loads();
    let first = loads.next().ok_or(LayoutProblem::NoLoadSegment)?;
    let last = loads.last().unwrap_or(first);
    // start - offset of a mapping of segment `p`, for a bias.
    let delta = |p: &goblin::elf::ProgramHeader| p.p_vaddr.wrapping_sub(p.p_offset);
    let holds = |m: &Mapping, off: u64| off >= m.offset && off - m.offset < m.end - m.start;
    let mut biases: Vec<u64> = maps
        .iter()
        .filter(|m| holds(m, first.p_offset))
        .map(|m| m.start.wrapping_sub(m.offset).wrapping_sub(delta(first)))
        .collect();
    biases.sort_unstable();
    biases.dedup();
    if biases.len() > 1 {
        biases.retain(|&b| {
            maps.iter().any(|m| {
                holds(m, last.p_offset)
                    && m.start.wrapping_sub(m.offset) == b.wrapping_add(delta(last))
            })
        });
    }
    match biases[..] {
        [bias] => Ok(bias),
        [] => Err(LayoutProblem::FirstSegmentUnmapped {
            offset: first.p_offset,
        }),
        _ => Err(LayoutProblem::SeveralPlaces {
            at: biases
                .iter()
                .map(|b| b.wrapping_add(first.p_vaddr))
                .collect(),
        }),
    }
}

#[cfg(test)]
mod tests;
