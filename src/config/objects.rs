//! `--on SOURCE` with a `$obj` target: where objects come from, and which bytes of each to watch.
//!
//! - `kmalloc:FUNC[+OFF]`, `kmem_cache_alloc:FUNC[+OFF]`: objects allocated from a call site inside FUNC
//!   (or at FUNC+OFF exactly), the `ptr` of the `kmem` tracepoint of that name; with a typed target, only
//!   requests of exactly the type's size, so an array allocated at the same site is not taken for one.
//! - `tracepoint:GROUP:NAME:argN`: argument N (from 0) of any tracepoint whose argument is a pointer, as
//!   the raw tracepoint sees it (`sched:sched_process_fork:arg1` is the child `task_struct`).
//! - `tracepoint:GROUP:NAME:FIELD`: an argument of that name (BTF names them: `sched_process_fork:child`
//!   is `arg1`), read as that raw argument; else a pointer field of the event's record, as its format file
//!   lists it (`sock:inet_sock_set_state:skaddr`). Which it is, is [`crate::config::tracepoints`]' to say.
//!
//! - `uretprobe:PATH:FUNC`: each object a user-space function returns (`libc:malloc`, `./app:widget_new`);
//!   `uprobe:PATH:FUNC:argN`: its argument N (from 0) at the call. PATH is a file, or a library name
//!   looked up in the watched process ([`ksymwatch_symbols::uprobe`]). `--free uprobe:PATH:FUNC:argN` names
//!   the call that ends an object; the malloc family and C++'s `operator new` have theirs by default.
//!
//! The target is written as any typed target with `$obj` for the object's address:
//! `'(struct pipe_inode_info)$obj.head'`. It resolves once, at a stand-in address, to the member's offset
//! and length ([`ObjectTarget`]; the type from BTF for a kernel source, from the program's DWARF for a
//! user-space one, where the plan places each source); each object is then watched at its own address
//! plus that offset.

use ksymwatch_symbols::CastType;

use crate::error::{Error, Result};
use crate::model::target;
use crate::model::watch::Access;

/// Where objects come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Kmalloc(Site),
    KmemCacheAlloc(Site),
    Tracepoint {
        group: String,
        name: String,
        arg: TpArg,
    },
    /// A user-space function's return value or argument.
    User(UserProbe),
}

/// `PATH:FUNC` and what of the call is the object: `uretprobe:` its return value, `uprobe:…:argN` an
/// argument at its entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserProbe {
    /// A path (with a `/`) or a library name (`libc`).
    pub file: String,
    pub func: String,
    pub at: UserArg,
}

/// Which value of a user-space call is the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserArg {
    /// The return value (a uretprobe).
    Return,
    /// Argument N at the entry (x86-64's six register arguments: 0 to 5).
    Arg(u8),
}

impl std::fmt::Display for UserProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.at {
            UserArg::Return => write!(f, "uretprobe:{}:{}", self.file, self.func),
            UserArg::Arg(n) => write!(f, "uprobe:{}:{}:arg{n}", self.file, self.func),
        }
    }
}

/// Where a general allocator's request size is, among its arguments: one argument, or the product of two
/// (`calloc`'s count and size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeArgs {
    One(u8),
    Product(u8, u8),
    /// The size argument and the out-pointer argument the object is stored through
    /// (`posix_memalign(&p, alignment, size)`, which returns 0 or an error code).
    Out(u8, u8),
}

/// The request size of a general allocator `func` (libc's, or C++'s `operator new` by its mangled name),
/// where a returned object is taken only if it was asked for the type's size; `None`: not one we know.
pub fn allocator_size(func: &str) -> Option<SizeArgs> {
    Some(match func {
        "malloc" | "valloc" | "pvalloc" => SizeArgs::One(0),
        "calloc" => SizeArgs::Product(0, 1),
        "realloc" | "aligned_alloc" | "memalign" => SizeArgs::One(1),
        "reallocarray" => SizeArgs::Product(1, 2),
        "posix_memalign" => SizeArgs::Out(2, 0),
        // operator new / new[] (size_t), with nothrow_t or align_val_t after it.
        f if f.starts_with("_Znwm") || f.starts_with("_Znam") => SizeArgs::One(0),
        _ => return None,
    })
}

/// The calls that end an object `func` returns when `--free` names none, in the same file: libc's `free`
/// (and `realloc`, which ends its argument 0) for the malloc family, `operator delete` for `operator new`.
pub fn default_frees(source: &UserProbe) -> Vec<UserProbe> {
    let free = |func: &str| UserProbe {
        file: source.file.clone(),
        func: func.to_string(),
        at: UserArg::Arg(0),
    };
    if source.at != UserArg::Return {
        return Vec::new();
    }
    match source.func.as_str() {
        "malloc" | "calloc" | "realloc" | "reallocarray" | "aligned_alloc" | "memalign"
        | "valloc" | "pvalloc" | "posix_memalign" => vec![free("free"), free("realloc")],
        f if f.starts_with("_Znwm") => vec![free("_ZdlPv"), free("_ZdlPvm")],
        f if f.starts_with("_Znam") => vec![free("_ZdaPv"), free("_ZdaPvm")],
        _ => Vec::new(),
    }
}

/// Parses `--free`'s `uprobe:PATH:FUNC:argN`.
pub fn parse_free(text: &str) -> Result<UserProbe> {
    match parse_source(text) {
        Ok(Source::User(p)) if matches!(p.at, UserArg::Arg(_)) => Ok(p),
        _ => {
            // An argument past the registers' is the one thing wrong with an otherwise good form.
            let past_registers = text.starts_with("uprobe:")
                && text.matches(':').count() >= 3
                && text
                    .rsplit(':')
                    .next()
                    .and_then(|a| a.strip_prefix("arg"))
                    .is_some_and(|n| n.parse::<u8>().map_or(true, |n| n > 5));
            let why = if past_registers {
                "argN counts the function's arguments from 0, at most arg5 (those passed in registers); "
            } else {
                ""
            };
            Err(Error::usage(format!(
                "--free `{text}`: {why}give uprobe:PATH:FUNC:argN, the call and the argument that \
                 ends an object (uprobe:./app:widget_free:arg0)"
            )))
        }
    }
}

/// Which pointer of a tracepoint is the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TpArg {
    /// `argN`: the raw tracepoint's argument N.
    Index(u8),
    /// A name: an argument's (read as that argument), or a field of the event's record (its format file).
    Field(String),
}

/// `FUNC[+OFF]`: a call site inside FUNC, or exactly at FUNC+OFF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    pub func: String,
    pub offset: Option<u64>,
}

/// How often a source reports one object: what an allocation at the address of an object still armed
/// (its free not read yet) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reports {
    /// Once, as it is allocated (`kmalloc:`, `kmem_cache_alloc:`, the malloc family's and `operator new`'s
    /// returns, a function's returns whose free `--free` names): a new object; the armed one was freed
    /// before it and the allocator reused the address.
    Once,
    /// Maybe again (a tracepoint of a state change, a function taking or returning an object it had
    /// before): the armed object itself.
    Again,
}

impl Source {
    /// Whether each object is reported once, as the source itself says. (A function whose returns
    /// `--free` ends reports each once too: the plan, which has `--free`, says so.)
    pub fn reports(&self) -> Reports {
        match self {
            Source::Kmalloc(_) | Source::KmemCacheAlloc(_) => Reports::Once,
            Source::User(p) if p.at == UserArg::Return && allocator_size(&p.func).is_some() => {
                Reports::Once
            }
            Source::Tracepoint { .. } | Source::User(_) => Reports::Again,
        }
    }

    /// The raw tracepoint the objects come from.
    pub fn tracepoint(&self) -> &str {
        match self {
            Source::Kmalloc(_) => "kmalloc",
            Source::KmemCacheAlloc(_) => "kmem_cache_alloc",
            Source::Tracepoint { name, .. } => name,
            Source::User(_) => "uprobe",
        }
    }

    /// A user-space source's probe.
    pub fn user(&self) -> Option<&UserProbe> {
        match self {
            Source::User(p) => Some(p),
            _ => None,
        }
    }

    pub fn site(&self) -> Option<&Site> {
        match self {
            Source::Kmalloc(s) | Source::KmemCacheAlloc(s) => Some(s),
            Source::Tracepoint { .. } | Source::User(_) => None,
        }
    }

    /// The raw tracepoint argument holding the new object's pointer (`None`: a record field).
    pub fn ptr_arg(&self) -> Option<u8> {
        match self {
            Source::Tracepoint {
                arg: TpArg::Index(i),
                ..
            } => Some(*i),
            Source::Tracepoint { .. } | Source::User(_) => None,
            _ => Some(1),
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let site = |s: &Site| match s.offset {
            Some(o) => format!("{}+0x{o:x}", s.func),
            None => s.func.clone(),
        };
        match self {
            Source::Kmalloc(s) => write!(f, "kmalloc:{}", site(s)),
            Source::KmemCacheAlloc(s) => write!(f, "kmem_cache_alloc:{}", site(s)),
            Source::Tracepoint { group, name, arg } => {
                write!(f, "tracepoint:{group}:{name}:")?;
                match arg {
                    TpArg::Index(i) => write!(f, "arg{i}"),
                    TpArg::Field(name) => f.write_str(name),
                }
            }
            Source::User(p) => p.fmt(f),
        }
    }
}

/// Parses `--on`'s SOURCE; the error names the forms.
pub fn parse_source(text: &str) -> Result<Source> {
    let forms = "give kmalloc:FUNC[+OFF], kmem_cache_alloc:FUNC[+OFF], tracepoint:GROUP:NAME:{argN|FIELD}, \
         uretprobe:PATH:FUNC or uprobe:PATH:FUNC:argN";
    let bad = |why: &str| Error::usage(format!("--on `{text}`: {why}; {forms}"));
    let name_ok = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.')
            && !s.as_bytes()[0].is_ascii_digit()
    };
    let site = |rest: &str| -> Result<Site> {
        let (func, offset) = match rest.split_once('+') {
            Some((f, o)) => {
                let o = target::parse_number(o).map_err(|_| bad("the offset is not a number"))?;
                (f, Some(o))
            }
            None => (rest, None),
        };
        if !name_ok(func) {
            return Err(bad("FUNC is not a function name"));
        }
        Ok(Site {
            func: func.to_string(),
            offset,
        })
    };
    match text.split_once(':') {
        Some(("kmalloc", rest)) => Ok(Source::Kmalloc(site(rest)?)),
        Some(("kmem_cache_alloc", rest)) => Ok(Source::KmemCacheAlloc(site(rest)?)),
        Some(("tracepoint", rest)) => {
            let parts: Vec<&str> = rest.split(':').collect();
            let [group, name, arg] = parts[..] else {
                return Err(bad(
                    "a tracepoint source has three parts after `tracepoint:`",
                ));
            };
            if !name_ok(group) || !name_ok(name) {
                return Err(bad(
                    "GROUP and NAME are a tracepoint's (sched:sched_process_fork)",
                ));
            }
            let arg = match arg.strip_prefix("arg").and_then(|n| n.parse::<u8>().ok()) {
                Some(n) if n < 12 => TpArg::Index(n),
                Some(_) => return Err(bad(
                    "argN counts the tracepoint's arguments from 0 (TP_PROTO order), at most 11",
                )),
                None if name_ok(arg) => TpArg::Field(arg.to_string()),
                None => {
                    return Err(bad(
                        "the object is argN, or an argument or record field by name",
                    ))
                }
            };
            Ok(Source::Tracepoint {
                group: group.to_string(),
                name: name.to_string(),
                arg,
            })
        }
        Some(("uretprobe", rest)) => {
            let (file, func) = rest
                .rsplit_once(':')
                .ok_or_else(|| bad("a uretprobe source is uretprobe:PATH:FUNC"))?;
            user(file, func, UserArg::Return)
        }
        Some(("uprobe", rest)) => {
            let mut parts = rest.rsplitn(3, ':');
            let (arg, func, file) = (parts.next(), parts.next(), parts.next());
            let (Some(arg), Some(func), Some(file)) = (arg, func, file) else {
                return Err(bad("a uprobe source is uprobe:PATH:FUNC:argN"));
            };
            match arg.strip_prefix("arg").and_then(|n| n.parse::<u8>().ok()) {
                Some(n) if n < 6 => user(file, func, UserArg::Arg(n)),
                _ => Err(bad(
                    "argN counts the function's arguments from 0, at most arg5 (those passed in registers)",
                )),
            }
        }
        _ => Err(bad("unknown source")),
    }
}

/// A user-space source, its file and function checked for shape (whether they exist is the plan's).
fn user(file: &str, func: &str, at: UserArg) -> Result<Source> {
    let symbol_ok = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|c| c.is_ascii_graphic() && !matches!(c, b':' | b'/'))
    };
    if file.is_empty() || !symbol_ok(func) {
        let text = UserProbe {
            file: file.into(),
            func: func.into(),
            at,
        };
        return Err(Error::usage(format!(
            "--on `{text}`: PATH is a file or a library name (libc) and FUNC a function in it: \
             uretprobe:PATH:FUNC or uprobe:PATH:FUNC:argN"
        )));
    }
    Ok(Source::User(UserProbe {
        file: file.to_string(),
        func: func.to_string(),
        at,
    }))
}

/// Where pointer field `field` is in an event's record, from its format file's text: its byte offset; the
/// error lists the pointer fields there are.
pub fn format_field(format: &str, event: &str, field: &str) -> Result<i16> {
    let mut pointers = Vec::new();
    for line in format.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("field:") else {
            continue;
        };
        let parts: Vec<&str> = rest.split(';').map(str::trim).collect();
        let decl = parts.first().copied().unwrap_or_default();
        let value = |key: &str| {
            parts
                .iter()
                .find_map(|p| p.strip_prefix(key))
                .and_then(|v| v.trim().parse::<i64>().ok())
        };
        let (offset, size) = (value("offset:"), value("size:"));
        let name = decl.rsplit([' ', '*']).next().unwrap_or_default();
        let pointer = decl.contains('*') && size == Some(8);
        if pointer {
            pointers.push(name.to_string());
        }
        if name == field {
            return match (pointer, offset.and_then(|o| i16::try_from(o).ok())) {
                (true, Some(o)) => Ok(o),
                _ => Err(Error::usage(format!(
                    "--on tracepoint:{event}:{field}: `{field}` is `{decl}`, not a pointer to an object"
                ))),
            };
        }
    }
    let listed = if pointers.is_empty() {
        "it has no pointer field; name a raw argument as argN (TP_PROTO order) instead".to_string()
    } else {
        format!("its pointer fields: {}", pointers.join(", "))
    };
    Err(Error::usage(format!(
        "--on tracepoint:{event}:{field}: the event has no field `{field}`; {listed}"
    )))
}

/// `-p` and `--comm` with `--on`: which allocating tasks' objects are taken (empty: anyone's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allocators {
    /// Processes (tgids).
    pub pids: Vec<u32>,
    /// Task names, as the kernel keeps them (15 bytes).
    pub comms: Vec<String>,
}

impl Allocators {
    /// Whether an object allocated by process `pid`'s task `comm` is taken.
    pub fn take(&self, pid: u32, comm: &str) -> bool {
        (self.pids.is_empty() || self.pids.contains(&pid))
            && (self.comms.is_empty() || self.comms.iter().any(|c| c == comm))
    }
}

/// A `$obj` target, resolved against a stand-in object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectTarget {
    /// As given (`(struct pipe_inode_info)$obj.head`).
    pub text: String,
    /// The type named (`None`: a raw `$obj+OFF/LEN`).
    pub cast: Option<CastType>,
    /// Bytes from the object's start to the watched ones.
    pub offset: u64,
    pub len: u8,
    pub access: Access,
    /// The type's size, which an allocation must request to be taken (`None`: BTF does not know it).
    pub object_size: Option<u64>,
}

impl ObjectTarget {
    /// The target as given, without its length: `(struct pipe_inode_info)$obj.head`.
    pub fn name(&self) -> &str {
        self.text.split('/').next().unwrap_or(&self.text)
    }

    /// The hit label of object number `index` at `addr`: the target with `$obj` spelled as the address,
    /// and `#index` after it.
    pub fn label(&self, index: u64, addr: u64) -> String {
        let text = self.name();
        format!(
            "{}#{index}",
            text.replacen("$obj", &format!("0x{addr:x}"), 1)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each of `bads` is refused by `parse` with an error naming every one of `parts`.
    #[track_caller]
    fn refused<T: std::fmt::Debug>(parse: fn(&str) -> Result<T>, bads: &[&str], parts: &[&str]) {
        for bad in bads {
            let e = parse(bad).unwrap_err().to_string();
            assert!(parts.iter().all(|p| e.contains(p)), "{bad}: {e}");
        }
    }

    #[test]
    fn sources_parse() {
        assert_eq!(
            parse_source("kmalloc:alloc_pipe_info").unwrap(),
            Source::Kmalloc(Site {
                func: "alloc_pipe_info".into(),
                offset: None
            })
        );
        assert_eq!(
            parse_source("kmem_cache_alloc:copy_process+0x1f").unwrap(),
            Source::KmemCacheAlloc(Site {
                func: "copy_process".into(),
                offset: Some(0x1f)
            })
        );
        let tp = parse_source("tracepoint:sched:sched_process_fork:arg1").unwrap();
        assert_eq!(tp.tracepoint(), "sched_process_fork");
        assert_eq!(tp.ptr_arg(), Some(1));
        let field = parse_source("tracepoint:sock:inet_sock_set_state:skaddr").unwrap();
        assert_eq!(field.ptr_arg(), None);
        assert_eq!(
            field.to_string(),
            "tracepoint:sock:inet_sock_set_state:skaddr"
        );
        assert_eq!(tp.to_string(), "tracepoint:sched:sched_process_fork:arg1");
        assert_eq!(tp.reports(), Reports::Again);
        assert_eq!(
            parse_source("kmem_cache_alloc:copy_process")
                .unwrap()
                .reports(),
            Reports::Once
        );
        refused(
            parse_source,
            &[
                "",
                "kmalloc",
                "kmalloc:",
                "kmalloc:1abc",
                "kmalloc:f+zz",
                "vmalloc:f",
                "tracepoint:sched:sched_process_fork",
                "tracepoint:sched:sched_process_fork:arg99",
                "tracepoint:sched:sched_process_fork:1x",
                "tracepoint:s ched:x:arg0",
            ],
            &["--on", "kmalloc:FUNC"],
        );
    }

    #[test]
    fn user_sources_parse() {
        let ret = parse_source("uretprobe:libc:malloc").unwrap();
        let p = ret.user().expect("a user source");
        assert_eq!(
            (p.file.as_str(), p.func.as_str(), p.at),
            ("libc", "malloc", UserArg::Return)
        );
        assert_eq!(ret.to_string(), "uretprobe:libc:malloc");
        assert_eq!(ret.reports(), Reports::Once);
        let arg = parse_source("uprobe:/opt/app/bin/app:widget_init:arg1").unwrap();
        assert_eq!(
            arg,
            Source::User(UserProbe {
                file: "/opt/app/bin/app".into(),
                func: "widget_init".into(),
                at: UserArg::Arg(1),
            })
        );
        assert_eq!(arg.to_string(), "uprobe:/opt/app/bin/app:widget_init:arg1");
        // A function taking an object may take it again; one returning objects may return one again
        // unless it is an allocator.
        assert_eq!(arg.reports(), Reports::Again);
        let made = parse_source("uretprobe:./app:widget_new").unwrap();
        assert_eq!(made.reports(), Reports::Again);
        // C++ names, as the symbol table spells them.
        assert!(parse_source("uretprobe:libstdc++:_Znwm").is_ok());
        refused(
            parse_source,
            &[
                "uretprobe:malloc",
                "uretprobe::malloc",
                "uretprobe:libc:",
                "uprobe:libc:free",
                "uprobe:libc:free:arg6",
                "uprobe:libc:free:x0",
                "uprobe:libc:a b:arg0",
            ],
            &["--on", "uprobe:PATH:FUNC"],
        );
        assert_eq!(
            parse_free("uprobe:./app:widget_free:arg0").unwrap().at,
            UserArg::Arg(0)
        );
        refused(
            parse_free,
            &["uretprobe:libc:free", "uprobe:libc:free", "kmalloc:f"],
            &["--free", "uprobe:PATH:FUNC:argN"],
        );
        // Past arg5, --free says so, as --on does.
        refused(
            parse_free,
            &["uprobe:libc:free:arg6", "uprobe:libc:free:arg300"],
            &["at most arg5"],
        );
        assert!(!parse_free("uprobe:libc:free")
            .unwrap_err()
            .to_string()
            .contains("at most arg5"));
    }

    /// General allocators read their request size where their C signature has it, and end their objects
    /// with their usual partner; a program's own function has neither.
    #[test]
    fn allocators_know_their_size_argument_and_their_frees() {
        assert_eq!(allocator_size("malloc"), Some(SizeArgs::One(0)));
        assert_eq!(allocator_size("calloc"), Some(SizeArgs::Product(0, 1)));
        assert_eq!(allocator_size("realloc"), Some(SizeArgs::One(1)));
        assert_eq!(allocator_size("aligned_alloc"), Some(SizeArgs::One(1)));
        assert_eq!(allocator_size("_Znwm"), Some(SizeArgs::One(0)));
        assert_eq!(allocator_size("posix_memalign"), Some(SizeArgs::Out(2, 0)));
        assert_eq!(allocator_size("widget_new"), None);
        let source = |func: &str, at| UserProbe {
            file: "libc".into(),
            func: func.into(),
            at,
        };
        let names = |p: &UserProbe| -> Vec<String> {
            default_frees(p).iter().map(|f| f.to_string()).collect()
        };
        assert_eq!(
            names(&source("calloc", UserArg::Return)),
            ["uprobe:libc:free:arg0", "uprobe:libc:realloc:arg0"]
        );
        assert_eq!(
            names(&source("_Znwm", UserArg::Return)),
            ["uprobe:libc:_ZdlPv:arg0", "uprobe:libc:_ZdlPvm:arg0"]
        );
        assert_eq!(
            names(&source("posix_memalign", UserArg::Return)),
            ["uprobe:libc:free:arg0", "uprobe:libc:realloc:arg0"]
        );
        assert!(names(&source("widget_new", UserArg::Return)).is_empty());
        assert!(names(&source("malloc", UserArg::Arg(0))).is_empty());
    }

    #[test]
    fn format_fields_are_found_by_name_and_must_be_pointers() {
        let format = "name: inet_sock_set_state\nID: 2287\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\n\
            \tfield:const void * skaddr;\toffset:8;\tsize:8;\tsigned:0;\n\
            \tfield:int oldstate;\toffset:16;\tsize:4;\tsigned:1;\n\
            \tfield:struct sk_buff *skb;\toffset:24;\tsize:8;\tsigned:0;\n";
        assert_eq!(format_field(format, "sock:x", "skaddr").unwrap(), 8);
        assert_eq!(format_field(format, "sock:x", "skb").unwrap(), 24);
        let e = format_field(format, "sock:x", "oldstate")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a pointer"), "{e}");
        let e = format_field(format, "sock:x", "nope")
            .unwrap_err()
            .to_string();
        assert!(e.contains("its pointer fields: skaddr, skb"), "{e}");
    }

    #[test]
    fn allocators_choose_by_process_and_name() {
        let anyone = Allocators::default();
        assert!(anyone.take(1, "x"));
        let some = Allocators {
            pids: vec![10, 11],
            comms: vec![],
        };
        assert!(some.take(11, "x") && !some.take(12, "x"));
        let named = Allocators {
            pids: vec![10],
            comms: vec!["pipes".into()],
        };
        assert!(named.take(10, "pipes") && !named.take(10, "bash") && !named.take(9, "pipes"));
    }

    #[test]
    fn labels_name_the_object() {
        let t = ObjectTarget {
            text: "(struct pipe_inode_info)$obj.head/4".into(),
            cast: Some(CastType {
                kind: None,
                name: "pipe_inode_info".into(),
            }),
            offset: 0x50,
            len: 4,
            access: Access::Write,
            object_size: Some(192),
        };
        assert_eq!(
            t.label(3, 0xffff888104f2a000),
            "(struct pipe_inode_info)0xffff888104f2a000.head#3"
        );
    }
}
