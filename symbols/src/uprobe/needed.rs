//! A library name for a program that has not loaded it yet: a command launched with `--` is stopped at
//! its exec, before the dynamic linker has mapped anything, so `libc:malloc` cannot be looked up in its
//! maps. The program's own `.dynamic` says which libraries it needs (`DT_NEEDED`, and theirs in turn), and
//! the dynamic linker's search finds them: the program's `DT_RPATH` (when it has no `DT_RUNPATH`) or
//! `DT_RUNPATH` (`$ORIGIN` expanded), the directories of `/etc/ld.so.conf` and its includes, then the
//! default ones. `LD_LIBRARY_PATH` and `LD_PRELOAD` of the command are not followed, nor `ld.so.cache`'s
//! own entries beyond the configured directories: for those, a path is the way.
//!
//! The files are read as everywhere in this crate: headers and the dynamic segment with bounded
//! positioned reads.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use goblin::elf::dynamic::{DT_NEEDED, DT_NULL, DT_RPATH, DT_RUNPATH, DT_STRSZ, DT_STRTAB};
use goblin::elf::program_header::PT_DYNAMIC;

use super::UprobeError;
use crate::user::elf::{c_string, read, Headers, ReadAt, MAX_TABLE};
use crate::user::open_if_regular;

/// The most libraries one search visits.
const MAX_LIBRARIES: usize = 256;

/// Directories searched after the configured ones, as glibc's dynamic linker on x86-64 does.
const DEFAULT_DIRS: [&str; 6] = [
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

/// What a program's (or a library's) `.dynamic` says about loading it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Dynamic {
    pub needed: Vec<String>,
    pub rpath: Vec<String>,
    pub runpath: Vec<String>,
}

/// Reads `src`'s dynamic segment; `None` for a file without one (statically linked).
pub(crate) fn dynamic(src: &dyn ReadAt, headers: &Headers) -> Option<Dynamic> {
    let seg = headers.program.iter().find(|p| p.p_type == PT_DYNAMIC)?;
    let raw = read(src, seg.p_offset, seg.p_filesz, MAX_TABLE)?;
    let le = headers.ctx.is_little_endian();
    let word = |b: &[u8]| {
        let a: [u8; 8] = b.try_into().ok()?;
        Some(if le {
            u64::from_le_bytes(a)
        } else {
            u64::from_be_bytes(a)
        })
    };
    let mut entries = Vec::new();
    for e in raw.chunks_exact(16) {
        let (tag, val) = (word(&e[..8])?, word(&e[8..])?);
        if tag == DT_NULL {
            break;
        }
        entries.push((tag, val));
    }
    let value = |tag| entries.iter().find(|e| e.0 == tag).map(|e| e.1);
    // DT_STRTAB is an address: its file offset comes through the segment holding it.
    let strtab = value(DT_STRTAB)?;
    let offset = headers
        .loads()
        .find(|p| strtab >= p.p_vaddr && strtab - p.p_vaddr < p.p_filesz)
        .map(|p| strtab - p.p_vaddr + p.p_offset)?;
    let strings = read(src, offset, value(DT_STRSZ)?, MAX_TABLE)?;
    let text = |at: u64| {
        c_string(&strings, usize::try_from(at).ok()?)
            .map(|s| String::from_utf8_lossy(s).into_owned())
    };
    let all = |tag| -> Vec<String> {
        entries
            .iter()
            .filter(|e| e.0 == tag)
            .filter_map(|e| text(e.1))
            .collect()
    };
    let dirs = |tag| -> Vec<String> {
        all(tag)
            .iter()
            .flat_map(|s| s.split(':').map(str::to_string).collect::<Vec<_>>())
            .filter(|s| !s.is_empty())
            .collect()
    };
    Some(Dynamic {
        needed: all(DT_NEEDED),
        rpath: dirs(DT_RPATH),
        runpath: dirs(DT_RUNPATH),
    })
}

/// Whether the file name `file` is what `name` calls a library: the same, or `name` followed by `.` or
/// `-` (`libc` for `libc.so.6`, not for `libcrypto.so.3`), the rule of the process lookup.
pub fn names(name: &str, file: &str) -> bool {
    file == name
        || file
            .strip_prefix(name)
            .is_some_and(|rest| rest.starts_with(['.', '-']))
}

/// The directories of an `ld.so.conf` text, with its `include` patterns expanded by `include` (a pattern
/// to the texts of the files it names, in order).
pub fn conf_dirs(
    text: &str,
    include: &mut dyn FnMut(&str) -> Vec<String>,
    depth: u8,
) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if let Some(pattern) = line.strip_prefix("include") {
            if depth < 4 {
                for t in include(pattern.trim()) {
                    out.extend(conf_dirs(&t, include, depth + 1));
                }
            }
        } else if line.starts_with('/') {
            out.push(line.trim_end_matches('/').to_string());
        }
    }
    out
}

/// The files a `dir/*.conf`-style pattern names, sorted (as the dynamic linker's `glob` gives them); a
/// pattern without `*` names itself.
fn glob(pattern: &str) -> Vec<PathBuf> {
    let p = Path::new(pattern);
    let (Some(dir), Some(name)) = (p.parent(), p.file_name().and_then(|n| n.to_str())) else {
        return Vec::new();
    };
    let Some((pre, post)) = name.split_once('*') else {
        return vec![p.to_path_buf()];
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.len() >= pre.len() + post.len() && n.starts_with(pre) && n.ends_with(post)
        })
        .map(|e| e.path())
        .collect();
    files.sort();
    files
}

/// The configured directories of this system (`/etc/ld.so.conf` and its includes), then the defaults.
fn system_dirs() -> Vec<String> {
    let read_small = |p: &Path| {
        open_if_regular(p)
            .and_then(|(f, _)| read(&f, 0, f.metadata().ok()?.len(), 1 << 20))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    };
    let mut include = |pattern: &str| -> Vec<String> {
        glob(pattern).iter().filter_map(|p| read_small(p)).collect()
    };
    let mut dirs = read_small(Path::new("/etc/ld.so.conf"))
        .map(|t| conf_dirs(&t, &mut include, 0))
        .unwrap_or_default();
    dirs.extend(DEFAULT_DIRS.iter().map(|d| d.to_string()));
    dirs
}

/// A library `name` the program has not loaded (it opens it with dlopen later), found by its name among
/// the system's library directories under `root` (`/`, or a process's `/proc/PID/root`), as the dynamic
/// linker finds a plain name: the distinct files (links followed) that [`names`] calls `name`. One means
/// the probe can go on it now; none or several, that a path is needed.
pub fn search(root: &Path, name: &str) -> Vec<PathBuf> {
    let dirs: Vec<PathBuf> = system_dirs()
        .iter()
        .map(|d| root.join(d.trim_start_matches('/')))
        .collect();
    search_in(name, &dirs)
}

/// Whether `path` is a regular ELF file: a library the dynamic linker can load, not a static archive
/// (`libz.a`) or a linker script (`libc.so`) that share its name.
fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    open_if_regular(path).is_some_and(|(mut f, _)| f.read_exact(&mut magic).is_ok())
        && magic == *b"\x7fELF"
}

/// [`search`] in the directories `dirs`.
pub fn search_in(name: &str, dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut here: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| names(name, &e.file_name().to_string_lossy()))
            .filter_map(|e| std::fs::canonicalize(e.path()).ok())
            .filter(|p| is_elf(p))
            .collect();
        here.sort();
        for p in here {
            if !found.contains(&p) {
                found.push(p);
            }
        }
    }
    found
}

/// The library `name` that program `exe` loads at its start (its own `DT_NEEDED` or one of theirs), found
/// where the dynamic linker would find it.
pub fn find(exe: &Path, name: &str) -> Result<PathBuf, UprobeError> {
    find_in(exe, name, &system_dirs())
}

/// [`find`] with the system's directories given.
pub fn find_in(exe: &Path, name: &str, system: &[String]) -> Result<PathBuf, UprobeError> {
    let shown = exe.display().to_string();
    let (file, _) = open_if_regular(exe).ok_or_else(|| UprobeError::Unreadable {
        path: shown.clone(),
        source: std::io::Error::other("not a regular file"),
    })?;
    let headers = Headers::read(&file).ok_or(UprobeError::NotElf {
        path: shown.clone(),
    })?;
    let machine = headers.header.e_machine;
    let mut queue: VecDeque<(PathBuf, Dynamic)> = VecDeque::new();
    queue.extend(dynamic(&file, &headers).map(|d| (exe.to_path_buf(), d)));
    // A static program (a static-pie has a dynamic section, with no library in it) maps no library: a
    // probe on a file of that name elsewhere would never fire in it.
    if queue.iter().all(|(_, d)| d.needed.is_empty()) {
        return Err(UprobeError::Static {
            program: shown,
            library: name.to_string(),
        });
    }
    let mut seen: Vec<String> = Vec::new();
    while let Some((from, dynamic)) = queue.pop_front() {
        let origin = from
            .parent()
            .unwrap_or(Path::new("/"))
            .display()
            .to_string();
        // DT_RPATH is used only by a file without DT_RUNPATH.
        let own = if dynamic.runpath.is_empty() {
            &dynamic.rpath
        } else {
            &dynamic.runpath
        };
        let dirs: Vec<String> = own
            .iter()
            .map(|d| d.replace("${ORIGIN}", &origin).replace("$ORIGIN", &origin))
            .chain(system.iter().cloned())
            .collect();
        for lib in &dynamic.needed {
            if seen.contains(lib) || seen.len() >= MAX_LIBRARIES {
                continue;
            }
            seen.push(lib.clone());
            let Some((path, lib_dynamic)) = locate_library(lib, &dirs, machine) else {
                continue;
            };
            if names(name, lib) {
                return Ok(path);
            }
            queue.push_back((path, lib_dynamic));
        }
    }
    Err(UprobeError::NotNeeded {
        program: shown,
        library: name.to_string(),
        needed: seen,
    })
}

/// `lib` (a `DT_NEEDED` name) in the first of `dirs` that has it as an ELF file for `machine`, with its
/// own dynamic section.
fn locate_library(lib: &str, dirs: &[String], machine: u16) -> Option<(PathBuf, Dynamic)> {
    let candidates: Vec<PathBuf> = if lib.contains('/') {
        vec![PathBuf::from(lib)]
    } else {
        dirs.iter().map(|d| Path::new(d).join(lib)).collect()
    };
    candidates.into_iter().find_map(|p| {
        let (f, _) = open_if_regular(&p)?;
        let h = Headers::read(&f)?;
        (h.header.e_machine == machine).then(|| {
            let d = dynamic(&f, &h).unwrap_or_default();
            (p, d)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A library not loaded yet is found by its name in library directories: its versioned file and the
    /// links to it are one file; two different files of the name, or none, are not one answer.
    #[test]
    fn a_library_not_loaded_yet_is_found_by_name_in_the_library_directories() {
        let root =
            std::env::temp_dir().join(format!("ksymwatch-needed-search-{}", std::process::id()));
        let (a, b) = (root.join("a"), root.join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("libgizmo.so.1.2"), b"\x7fELF").unwrap();
        std::os::unix::fs::symlink("libgizmo.so.1.2", a.join("libgizmo.so.1")).unwrap();
        std::os::unix::fs::symlink(a.join("libgizmo.so.1.2"), b.join("libgizmo.so")).unwrap();
        std::fs::write(a.join("libgizmoplus.so"), b"\x7fELF").unwrap();
        // A static archive and a linker script of the name are not libraries to probe.
        std::fs::write(a.join("libgizmo.a"), b"!<arch>\n").unwrap();
        std::fs::write(b.join("libgizmo.so.0"), b"/* GNU ld script */").unwrap();
        let dirs = [a.clone(), b.clone(), root.join("missing")];
        let one = std::fs::canonicalize(a.join("libgizmo.so.1.2")).unwrap();
        assert_eq!(search_in("libgizmo", &dirs), std::slice::from_ref(&one));
        assert_eq!(
            search_in("libgizmo.so.1", &dirs),
            std::slice::from_ref(&one)
        );
        assert!(search_in("libnothing", &dirs).is_empty());
        std::fs::write(b.join("libgizmo.so.2"), b"\x7fELF").unwrap();
        assert_eq!(search_in("libgizmo", &dirs).len(), 2);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn library_names_match_as_in_a_process() {
        assert!(names("libc", "libc.so.6"));
        assert!(names("libc.so.6", "libc.so.6"));
        assert!(names("libfoo", "libfoo-2.31.so"));
        assert!(!names("libc", "libcrypto.so.3"));
        assert!(!names("libc.so", "libc"));
    }

    #[test]
    fn ld_so_conf_includes_are_followed() {
        let mut include = |p: &str| -> Vec<String> {
            assert_eq!(p, "/etc/ld.so.conf.d/*.conf");
            vec![
                "# libc default configuration\n/usr/local/lib\n".into(),
                "/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu/\ninclude /etc/ld.so.conf.d/*.conf\n"
                    .into(),
            ]
        };
        let dirs = conf_dirs(
            "include /etc/ld.so.conf.d/*.conf\n\n/opt/lib # mine\n",
            &mut include,
            3,
        );
        assert_eq!(
            dirs,
            [
                "/usr/local/lib",
                "/lib/x86_64-linux-gnu",
                "/usr/lib/x86_64-linux-gnu",
                "/opt/lib"
            ]
        );
    }

    /// This test binary's `libc`, found from its own `.dynamic` and the system's directories, is the very
    /// file the running process maps (same inode).
    #[test]
    fn the_libc_a_program_needs_is_the_one_it_maps() {
        use std::os::unix::fs::MetadataExt;
        let exe = std::env::current_exe().unwrap();
        let found = find(&exe, "libc").unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let mapped = crate::user::parse_maps(&maps)
            .into_iter()
            .find(|m| names("libc", &crate::user::basename(&m.path)))
            .expect("this process maps a libc");
        assert_eq!(
            std::fs::metadata(&found).unwrap().ino(),
            mapped.inode,
            "{found:?}"
        );
        let e = find(&exe, "libssl").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("libc.so.6") && msg.contains("dlopen") && msg.contains("path"),
            "{msg}"
        );
    }

    /// `$ORIGIN` in a program's run path is its directory: a library beside it is found there first.
    #[test]
    fn origin_in_the_run_path_is_the_programs_directory() {
        use crate::testing::require;
        if !require("gcc") {
            return;
        }
        let dir = std::env::temp_dir().join(format!("ksymwatch-needed-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        std::fs::write(dir.join("w.c"), "int widget(int x) { return x + 1; }\n").unwrap();
        std::fs::write(
            dir.join("m.c"),
            "int widget(int); int main(int c, char **v) { (void)v; return widget(c); }\n",
        )
        .unwrap();
        let gcc = |args: &[&str]| {
            let ok = std::process::Command::new("gcc")
                .current_dir(&dir)
                .args(args)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "gcc {args:?}");
        };
        gcc(&[
            "-shared",
            "-fPIC",
            "-Wl,-soname,libwidget.so.1",
            "-o",
            "lib/libwidget.so.1",
            "w.c",
        ]);
        gcc(&[
            "-o",
            "m",
            "m.c",
            "lib/libwidget.so.1",
            "-Wl,--enable-new-dtags,-rpath,$ORIGIN/lib",
        ]);
        let found = find(&dir.join("m"), "libwidget").unwrap();
        assert_eq!(found, dir.join("lib/libwidget.so.1"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A statically linked program loads no library: a library name is refused, saying to give the
    /// program's own path, rather than probing a file of that name the program never maps.
    #[test]
    fn a_static_program_has_no_library_to_probe() {
        use crate::testing::{have, skip};
        if !have("gcc") {
            skip("gcc not found");
            return;
        }
        let dir =
            std::env::temp_dir().join(format!("ksymwatch-needed-static-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("s.c"), "int main(void) { return 0; }\n").unwrap();
        let built = std::process::Command::new("gcc")
            .current_dir(&dir)
            .args(["-static", "-o", "s", "s.c"])
            .status()
            .is_ok_and(|s| s.success());
        if !built {
            skip("gcc -static: no static libc here");
            std::fs::remove_dir_all(&dir).unwrap();
            return;
        }
        let err = find(&dir.join("s"), "libc").unwrap_err();
        assert!(matches!(err, UprobeError::Static { .. }), "{err:?}");
        assert!(err.to_string().contains("statically linked"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
