//! Where a uprobe goes: `PATH:FUNC` (or `LIBRARY:FUNC` in a process) to the file and the file offset the
//! kernel's `uprobe` PMU takes (`config1` the path, `config2` the offset).
//!
//! The function is looked up by name in the file's `.symtab`, else in its `.dynsym` (a stripped file still
//! exports its public functions there), by its name as the table spells it or, for C++ and Rust, as it
//! demangles (`ns::Widget::make` or `ns::Widget::make(int)`). Its address is an ELF virtual address; the
//! kernel wants the offset in the file, which the PT_LOAD program header holding the address gives:
//! `offset = st_value - p_vaddr + p_offset`. That is the same for an executable and a library, PIE or not,
//! and wherever it is loaded: uprobes are placed on the file (its inode), not on a process's memory, so a
//! probe on a library also fires in processes that map it later.
//!
//! A library name (`libc`, `libc.so.6`) means nothing outside a process: it is looked up among the files
//! the watched process maps ([`crate::process`]'s rules: basename, or a prefix of it up to `.` or `-`), and
//! the probe goes on that file, reached through the process's root so a containerised process's library is
//! the one probed. A command launched with `--` is stopped before its libraries are mapped: for it, a
//! library name is one the program loads at its start, found as the dynamic linker finds it ([`needed`]).
//!
//! The files are hostile input read as root, as everywhere in this crate: bounded positioned reads
//! ([`crate::user`]'s ELF reader), never a mapping. A stripped file's functions are also looked up in its
//! separate debug file (`/usr/lib/debug/.build-id/ab/cdef….debug`, by build-id, under the process's root
//! first, as gdb finds it). Errors name the way out: debug symbols or another path for a stripped file, the nearest names for an unknown function, launch or `dlopen` timing for a library
//! not mapped yet. Nothing here knows about perf: the tracer opens the event from a [`Placement`].

use std::fmt;
use std::path::{Path, PathBuf};

use goblin::elf::section_header::{SHN_UNDEF, SHT_DYNSYM, SHT_SYMTAB};
use goblin::elf::sym::{STT_FUNC, STT_GNU_IFUNC, STT_NOTYPE};

use crate::process::ProcessError;
use crate::user::elf::{demangle, Headers, ReadAt};
use crate::user::open_if_regular;

/// Which symbol table named the function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    Symtab,
    Dynsym,
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Table::Symtab => ".symtab",
            Table::Dynsym => ".dynsym",
        })
    }
}

/// A function found in an ELF file: where it is in the file's addresses and in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// The symbol as the table spells it (mangled for C++ and Rust).
    pub symbol: String,
    /// Its ELF virtual address (`st_value`, what `nm` prints).
    pub vaddr: u64,
    /// Its size; `None` when the table gives none.
    pub size: Option<u64>,
    /// The offset in the file: what the uprobe PMU takes as `config2`.
    pub offset: u64,
    pub table: Table,
    /// The separate debug file whose `.symtab` named it, for a stripped file.
    pub debug_file: Option<PathBuf>,
}

/// Where to place a uprobe: the file as the tracer opens it, and the function in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The path the tracer hands the kernel (`config1`): for a library found in a process's maps, the path
    /// through that process's root (`/proc/PID/root/usr/lib/...`) when it differs from ours.
    pub file: PathBuf,
    /// The file as the user or the process names it (`/usr/lib/x86_64-linux-gnu/libc.so.6`), for messages.
    pub shown: String,
    pub func: Located,
}

/// Why a uprobe cannot be placed.
#[derive(Debug)]
pub enum UprobeError {
    /// `PATH:FUNC` does not split into a file and a function.
    Spec { text: String },
    /// The file cannot be opened as a regular file.
    Unreadable {
        path: String,
        source: std::io::Error,
    },
    /// The file is not ELF.
    NotElf { path: String },
    /// No symbol table names `func`, and the file has no `.symtab` (it is stripped).
    /// `nearest`: the exported functions closest to `func` (a typo is not fixed by debug symbols).
    Stripped {
        path: String,
        func: String,
        nearest: Vec<String>,
    },
    /// The symbol tables do not name `func`; `nearest` are the closest function names there are.
    Unknown {
        path: String,
        func: String,
        nearest: Vec<String>,
    },
    /// `func` names data, not code.
    NotFunction { path: String, func: String },
    /// `func` is an IFUNC: its address is the resolver's, which runs once at load, not the function's.
    Ifunc { path: String, func: String },
    /// Several functions of that name at different places: `(demangled name, offset)` of each.
    Ambiguous {
        path: String,
        func: String,
        candidates: Vec<(String, u64)>,
    },
    /// No PT_LOAD segment's file bytes hold the function's address.
    NotInFile {
        path: String,
        func: String,
        vaddr: u64,
    },
    /// A library name with no process to look it up in.
    NeedsProcess { library: String },
    /// `program` is statically linked: it loads no library, and what it uses of `library` is in it.
    Static { program: String, library: String },
    /// `program` needs no library of that name at its start; `needed` are the ones it does.
    NotNeeded {
        program: String,
        library: String,
        needed: Vec<String>,
    },
    /// The process maps no file of that name (yet).
    NotLoaded {
        pid: u32,
        library: String,
        mapped: Vec<String>,
    },
    /// The process could not be read, or the name matched several files.
    Process(ProcessError),
}

impl fmt::Display for UprobeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UprobeError::Spec { text } => write!(
                f,
                "`{text}` is not FILE:FUNC: give a path or a library name, a colon, and a function \
                 (/usr/bin/app:make_widget, libc:malloc)"
            ),
            UprobeError::Unreadable { path, source } => {
                write!(f, "{path} cannot be read as a regular file: {source}")
            }
            UprobeError::NotElf { path } => {
                write!(f, "{path} is not an ELF file: give the program or library itself")
            }
            UprobeError::Stripped {
                path,
                func,
                nearest,
            } => {
                write!(
                    f,
                    "{path} is stripped (no .symtab) and its exported functions (.dynsym) do not include \
                     `{func}`"
                )?;
                if !nearest.is_empty() {
                    write!(f, " (nearest exported: {})", nearest.join(", "))?;
                }
                f.write_str(
                    ": install its debug symbols (the -dbg or -dbgsym or -debuginfo package, found by \
                     build-id under /usr/lib/debug/.build-id), or give the path of a build with symbols",
                )
            }
            UprobeError::Unknown {
                path,
                func,
                nearest,
            } => {
                write!(f, "{path} has no function `{func}`")?;
                if nearest.is_empty() {
                    f.write_str("; `nm -C` lists the ones it has")
                } else {
                    write!(f, "; nearest: {}", nearest.join(", "))
                }
            }
            UprobeError::NotFunction { path, func } => write!(
                f,
                "`{func}` in {path} is data, not a function: a uprobe goes on code (watch the variable \
                 itself as a target instead)"
            ),
            UprobeError::Ifunc { path, func } => write!(
                f,
                "`{func}` in {path} is an IFUNC: its symbol is the resolver that picks an implementation \
                 once, at load; probe the implementation it picks (`nm -D` lists them, e.g. `{func}_avx2`)"
            ),
            UprobeError::Ambiguous {
                path,
                func,
                candidates,
            } => {
                write!(f, "`{func}` names {} functions in {path}:", candidates.len())?;
                for (i, (name, offset)) in candidates.iter().enumerate() {
                    let sep = if i == 0 { " " } else { ", " };
                    write!(f, "{sep}{name} at file offset 0x{offset:x}")?;
                }
                f.write_str("; name one with its parameter types, as `nm -C` prints it")
            }
            UprobeError::NotInFile { path, func, vaddr } => write!(
                f,
                "`{func}` in {path} is at 0x{vaddr:x}, which no loadable segment of the file holds: the \
                 file's headers are damaged or the symbol is not code the program runs"
            ),
            UprobeError::NeedsProcess { library } => write!(
                f,
                "`{library}` is a library name, which is looked up in the watched process's mappings: \
                 give -p PID or -- CMD, or the library's path (/usr/lib/.../{library}.so)"
            ),
            UprobeError::NotLoaded {
                pid,
                library,
                mapped,
            } => {
                write!(
                    f,
                    "process {pid} has not mapped `{library}` (yet): a command started with `--` is \
                     stopped before its libraries are loaded, and a library opened with dlopen is mapped \
                     only when the program opens it (nor does one file of that name sit in the library \
                     directories); give the library's path instead (a probe on a file fires in every \
                     process that maps it later)"
                )?;
                if !mapped.is_empty() {
                    write!(f, "; mapped now: {}", mapped.join(", "))?;
                }
                Ok(())
            }
            UprobeError::Static { program, library } => write!(
                f,
                "{program} is statically linked: it loads no library, and the functions of `{library}` it \
                 uses are in the program itself; give the program's path as PATH ({program}:FUNC)"
            ),
            UprobeError::NotNeeded {
                program,
                library,
                needed,
            } => {
                write!(
                    f,
                    "{program} does not load `{library}` at its start"
                )?;
                if !needed.is_empty() {
                    write!(f, " (it loads {})", needed.join(", "))?;
                }
                f.write_str(
                    ": a library it opens with dlopen is not known before it runs (nor does one file \
                     of that name sit in the library directories); give the library's path instead (a \
                     probe on a file fires in every process that maps it later)",
                )
            }
            UprobeError::Process(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for UprobeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            UprobeError::Unreadable { source, .. } => Some(source),
            UprobeError::Process(e) => Some(e),
            _ => None,
        }
    }
}

/// How many names an unknown function's message suggests.
const NEAREST: usize = 5;

/// Splits `FILE:FUNC` at the first colon that is not part of a C++ `::`: the file is a path or a library
/// name, the function may be `ns::f`. A path holding a colon cannot be written this way.
pub fn split_spec(text: &str) -> Result<(&str, &str), UprobeError> {
    let bytes = text.as_bytes();
    let at = (0..bytes.len()).find(|&i| {
        bytes[i] == b':' && bytes.get(i + 1) != Some(&b':') && (i == 0 || bytes[i - 1] != b':')
    });
    match at.map(|i| (&text[..i], &text[i + 1..])) {
        Some((file, func)) if !file.is_empty() && !func.is_empty() => Ok((file, func)),
        _ => Err(UprobeError::Spec {
            text: text.to_string(),
        }),
    }
}

/// Places a uprobe on `func` of `object`: a path (with a `/`) is opened as it is; a library name is looked
/// up in process `pid`'s mappings under `proc_root` (`/proc`), and needs one.
pub fn place(
    proc_root: &Path,
    pid: Option<u32>,
    object: &str,
    func: &str,
) -> Result<Placement, UprobeError> {
    if object.contains('/') {
        return place_file(Path::new(object), func);
    }
    let Some(pid) = pid else {
        return Err(UprobeError::NeedsProcess {
            library: object.to_string(),
        });
    };
    let (file, shown) = match mapped_file(proc_root, pid, object) {
        Ok(found) => found,
        // Not mapped yet (it is opened with dlopen later): by its name in the library directories, as
        // the process's dynamic linker would find it, if that names one file.
        Err(e @ UprobeError::NotLoaded { .. }) => {
            match needed::search(&proc_root.join(format!("{pid}/root")), object).as_slice() {
                [one] => {
                    let placed = place_file(one, func)?;
                    return Ok(Placement {
                        shown: format!("{} (not loaded yet; found by name)", one.display()),
                        ..placed
                    });
                }
                _ => return Err(e),
            }
        }
        Err(e) => return Err(e),
    };
    // The process's debug files first (the system it runs in), then ours.
    let roots = [proc_root.join(format!("{pid}/root")), PathBuf::from("/")];
    let placed = place_file_with(&file, func, &roots)?;
    Ok(Placement { shown, ..placed })
}

/// Places a uprobe on `func` of `object` for program `exe` launched with `--` and stopped at its exec,
/// before its libraries are mapped: a path is opened as it is; a library name is one the program loads at
/// its start ([`needed::find`]).
pub fn place_for_launch(exe: &Path, object: &str, func: &str) -> Result<Placement, UprobeError> {
    if object.contains('/') {
        return place_file(Path::new(object), func);
    }
    match needed::find(exe, object) {
        Ok(path) => place_file(&path, func),
        // Not linked (opened with dlopen later): by its name in the library directories, if that names
        // one file.
        Err(e @ UprobeError::NotNeeded { .. }) => {
            match needed::search(Path::new("/"), object).as_slice() {
                [one] => {
                    let placed = place_file(one, func)?;
                    Ok(Placement {
                        shown: format!("{} (not linked; found by name)", one.display()),
                        ..placed
                    })
                }
                _ => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Places a uprobe on `func` of the ELF file at `path`; a stripped file's debug file is looked for under
/// `/usr/lib/debug/.build-id`.
pub fn place_file(path: &Path, func: &str) -> Result<Placement, UprobeError> {
    place_file_with(path, func, &[PathBuf::from("/")])
}

/// [`place_file`], with a stripped file's debug file looked for under each of `debug_roots`
/// (`ROOT/usr/lib/debug/.build-id/ab/cdef….debug`, which must carry the file's build-id).
pub fn place_file_with(
    path: &Path,
    func: &str,
    debug_roots: &[PathBuf],
) -> Result<Placement, UprobeError> {
    let shown = path.display().to_string();
    let (file, _) = open_if_regular(path).ok_or_else(|| UprobeError::Unreadable {
        path: shown.clone(),
        source: std::fs::metadata(path)
            .err()
            .unwrap_or_else(|| std::io::Error::other("not a regular file")),
    })?;
    let func = locate(&file, func, debug_roots).map_err(|p| p.at(&shown, func))?;
    Ok(Placement {
        file: path.to_path_buf(),
        shown,
        func,
    })
}

/// Finds `func` in an ELF file held in memory, as [`place_file`] does in a file (tests, and a caller that
/// already holds the bytes).
pub fn locate_in_bytes(bytes: &[u8], func: &str) -> Result<Located, UprobeError> {
    locate(&bytes, func, &[]).map_err(|p| p.at("<bytes>", func))
}

/// The file process `pid` maps under the name `library`: the path the tracer can open it by, and the path
/// the process's maps give.
fn mapped_file(
    proc_root: &Path,
    pid: u32,
    library: &str,
) -> Result<(PathBuf, String), UprobeError> {
    use std::os::unix::fs::MetadataExt;
    let process = crate::process::Process::read(proc_root, pid).map_err(UprobeError::Process)?;
    let objects = process.objects();
    let obj = process.find(&objects, library).map_err(|e| match e {
        ProcessError::NotMapped {
            pid,
            object,
            mapped,
        } => UprobeError::NotLoaded {
            pid,
            library: object,
            mapped,
        },
        e => UprobeError::Process(e),
    })?;
    let shown = obj.path.trim_end_matches(" (deleted)").to_string();
    let inode = obj.maps.first().map(|m| m.inode);
    // The process's own view first (another mount namespace, a container's image), then ours: the
    // path must lead to the very file mapped, not to another one of that name.
    let through_root = proc_root.join(format!("{pid}/root{shown}"));
    let same = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .is_some_and(|md| md.is_file() && Some(md.ino()) == inode)
    };
    let file = [PathBuf::from(&shown), through_root]
        .into_iter()
        .find(|p| same(p))
        .ok_or_else(|| UprobeError::Unreadable {
            path: shown.clone(),
            source: std::io::Error::other(
                "the file the process mapped is no longer at that path (replaced or deleted)",
            ),
        })?;
    Ok((file, shown))
}

/// A [`UprobeError`] before the file's path is known.
enum Problem {
    NotElf,
    Stripped(Vec<String>),
    Unknown(Vec<String>),
    NotFunction,
    Ifunc,
    Ambiguous(Vec<(String, u64)>),
    NotInFile(u64),
}

impl Problem {
    fn at(self, path: &str, func: &str) -> UprobeError {
        let (path, func) = (path.to_string(), func.to_string());
        match self {
            Problem::NotElf => UprobeError::NotElf { path },
            Problem::Stripped(nearest) => UprobeError::Stripped {
                path,
                func,
                nearest,
            },
            Problem::Unknown(nearest) => UprobeError::Unknown {
                path,
                func,
                nearest,
            },
            Problem::NotFunction => UprobeError::NotFunction { path, func },
            Problem::Ifunc => UprobeError::Ifunc { path, func },
            Problem::Ambiguous(candidates) => UprobeError::Ambiguous {
                path,
                func,
                candidates,
            },
            Problem::NotInFile(vaddr) => UprobeError::NotInFile { path, func, vaddr },
        }
    }
}

/// One candidate symbol: its name as spelled, type, address, size.
struct Candidate {
    name: String,
    kind: u8,
    vaddr: u64,
    size: u64,
}

/// Finds `func` in `src`'s `.symtab`, else its `.dynsym`, else (a stripped file) the `.symtab` of its
/// separate debug file under one of `debug_roots`; and its file offset, from `src`'s own segments.
fn locate(src: &dyn ReadAt, func: &str, debug_roots: &[PathBuf]) -> Result<Located, Problem> {
    let headers = Headers::read(src).ok_or(Problem::NotElf)?;
    let miss = match lookup(src, &headers, func) {
        Ok((found, table)) => return pick(&headers, &found, table, None),
        Err(miss) => miss,
    };
    let mut names = miss.names;
    names.sort_unstable();
    names.dedup();
    let nearest: Vec<String> = crate::suggest::best(func, names.iter(), NEAREST)
        .into_iter()
        .map(|n| demangle(n))
        .collect();
    if !miss.stripped {
        return Err(Problem::Unknown(nearest));
    }
    // A debug file has the stripped file's symbols at the same addresses; its own segments may be
    // empty (NOBITS code), so the offset comes from the file the probe goes on.
    for (debug, path) in debug_files(src, &headers, debug_roots) {
        let Some(h) = Headers::read(&debug) else {
            continue;
        };
        if let Ok((found, Table::Symtab)) = lookup(&debug, &h, func) {
            return pick(&headers, &found, Table::Symtab, Some(path));
        }
    }
    Err(Problem::Stripped(nearest))
}

/// What a lookup that found nothing learned: whether the file is stripped, and its function names.
struct Miss {
    stripped: bool,
    names: Vec<String>,
}

/// The definitions `func` names in `.symtab`, else `.dynsym`, and which table that was.
fn lookup(
    src: &dyn ReadAt,
    headers: &Headers,
    func: &str,
) -> Result<(Vec<Candidate>, Table), Miss> {
    let mut miss = Miss {
        stripped: true,
        names: Vec::new(),
    };
    for (kind, table_kind) in [(SHT_SYMTAB, Table::Symtab), (SHT_DYNSYM, Table::Dynsym)] {
        let Some(table) = headers
            .section_of_type(kind)
            .and_then(|t| headers.symbols(src, t).ok().flatten())
        else {
            continue;
        };
        // A `.symtab` holding only the null symbol is what `strip` leaves.
        if kind == SHT_SYMTAB && table.len() > 1 {
            miss.stripped = false;
        }
        let defined: Vec<Candidate> = table
            .iter()
            .filter(|s| s.st_shndx != SHN_UNDEF as usize && s.st_value != 0)
            .filter_map(|s| {
                Some(Candidate {
                    name: String::from_utf8_lossy(table.name(&s)?).into_owned(),
                    kind: s.st_type(),
                    vaddr: s.st_value,
                    size: s.st_size,
                })
            })
            .collect();
        let (found, others): (Vec<Candidate>, Vec<Candidate>) = split_matching(defined, func);
        if found.is_empty() {
            miss.names.extend(
                others
                    .into_iter()
                    .filter(|c| is_code(c.kind))
                    .map(|c| c.name),
            );
            continue;
        }
        return Ok((found, table_kind));
    }
    Err(miss)
}

/// The separate debug files of `src` (by its build-id, as gdb finds them) under each of `roots`, opened,
/// with their paths; only those that carry the same build-id.
fn debug_files(
    src: &dyn ReadAt,
    headers: &Headers,
    roots: &[PathBuf],
) -> Vec<(std::fs::File, PathBuf)> {
    use crate::process::debug::{build_id, debug_file_path};
    let Some(id) = build_id(src, headers) else {
        return Vec::new();
    };
    let Some(relative) = debug_file_path(&id) else {
        return Vec::new();
    };
    roots
        .iter()
        .filter_map(|root| {
            let path = root.join(&relative);
            let (f, _) = open_if_regular(&path)?;
            let h = Headers::read(&f)?;
            (build_id(&f, &h).as_ref() == Some(&id)).then_some((f, path))
        })
        .collect()
}

fn is_code(kind: u8) -> bool {
    matches!(kind, STT_FUNC | STT_GNU_IFUNC)
}

/// Splits `defined` into the symbols `func` names (by their spelling in the table, else by their demangled
/// name, with or without its parameter list) and the others.
fn split_matching(defined: Vec<Candidate>, func: &str) -> (Vec<Candidate>, Vec<Candidate>) {
    if defined.iter().any(|c| c.name == func) {
        return defined.into_iter().partition(|c| c.name == func);
    }
    defined.into_iter().partition(|c| {
        (c.name.starts_with("_Z") || c.name.starts_with("_R")) && {
            let d = demangle(&c.name);
            d == func || d.split_once('(').is_some_and(|(bare, _)| bare == func)
        }
    })
}

/// The one function among `found` (aliases at one address are one), with its file offset.
fn pick(
    headers: &Headers,
    found: &[Candidate],
    table: Table,
    debug_file: Option<PathBuf>,
) -> Result<Located, Problem> {
    let mut found: Vec<&Candidate> = found.iter().collect();
    // Code first: a data symbol of the same name is only reported if there is nothing else.
    if found.iter().any(|c| is_code(c.kind)) {
        found.retain(|c| is_code(c.kind));
    } else if found.iter().all(|c| c.kind != STT_NOTYPE) {
        return Err(Problem::NotFunction);
    }
    found.sort_by_key(|c| (c.vaddr, std::cmp::Reverse(c.size)));
    found.dedup_by_key(|c| c.vaddr);
    let offset_of = |vaddr: u64| {
        headers
            .loads()
            .find(|p| vaddr >= p.p_vaddr && vaddr - p.p_vaddr < p.p_filesz)
            .map(|p| vaddr - p.p_vaddr + p.p_offset)
    };
    let one = match found[..] {
        [one] => one,
        _ => {
            return Err(Problem::Ambiguous(
                found
                    .iter()
                    .map(|c| (demangle(&c.name), offset_of(c.vaddr).unwrap_or(c.vaddr)))
                    .collect(),
            ))
        }
    };
    if one.kind == STT_GNU_IFUNC {
        return Err(Problem::Ifunc);
    }
    let offset = offset_of(one.vaddr).ok_or(Problem::NotInFile(one.vaddr))?;
    Ok(Located {
        symbol: one.name.clone(),
        vaddr: one.vaddr,
        size: (one.size > 0).then_some(one.size),
        offset,
        table,
        debug_file,
    })
}

pub mod needed;
#[cfg(test)]
mod tests;
pub mod types;
