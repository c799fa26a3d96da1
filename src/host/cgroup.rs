//! The cgroup v2 hierarchy on this host: where it is mounted, a `--cgroup` argument to the cgroup's id, a
//! process's cgroup, and ids back to paths for naming a writer's cgroup.
//!
//! A cgroup's id is its directory's inode number on the cgroup2 filesystem. Since Linux 5.5 (the
//! "kernfs, cgroup: support 64bit inos and unify cgroup IDs" series) the kernfs node id is the inode number
//! where `ino_t` is 64-bit, `cgroup_id()` is that id, and it is what `bpf_get_current_cgroup_id()` returns
//! for the task's v2 cgroup and what `name_to_handle_at(2)` encodes in a cgroup directory's file handle
//! (the live test checks the last against `stat`). So the id is found with a `stat`, no BPF needed.
//!
//! What the texts mean is [`crate::model::cgroup`]'s; this module only reads them.

use std::collections::HashMap;
use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub use crate::model::cgroup::Cgroup;
use crate::model::cgroup::{self as text, Mount};

/// The most cgroup directories one walk of the hierarchy visits: a busy Kubernetes node has a few
/// thousand.
const WALK_LIMIT: usize = 100_000;

/// Why a cgroup could not be found.
#[derive(Debug)]
pub enum CgroupError {
    /// No cgroup2 filesystem is mounted.
    NoHierarchy,
    /// No cgroup at `path` (the directory `dir`).
    NotFound { path: String, dir: PathBuf },
    /// `arg` climbs out of the hierarchy with `..`.
    Outside { arg: String },
    /// `dir` exists but is not on the cgroup2 filesystem mounted at `mount` (a v1 hierarchy's directory).
    NotV2 { dir: PathBuf, mount: String },
    /// Reading `path` failed.
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl fmt::Display for CgroupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CgroupError::NoHierarchy => f.write_str(
                "no cgroup v2 hierarchy is mounted (no cgroup2 line in /proc/self/mountinfo): cgroup \
                 filtering needs cgroup v2, or the unified hierarchy of a hybrid setup (`mount -t cgroup2 \
                 none /sys/fs/cgroup/unified`)",
            ),
            CgroupError::NotFound { path, dir } => write!(
                f,
                "no cgroup `{path}` (no directory {}): `cat /proc/PID/cgroup` prints a process's, on its \
                 `0::` line",
                dir.display()
            ),
            CgroupError::Outside { arg } => {
                write!(f, "`{arg}` leaves the cgroup hierarchy (`..`): give a path inside it")
            }
            CgroupError::NotV2 { dir, mount } => write!(
                f,
                "{} is not in the cgroup v2 hierarchy (a cgroup v1 directory?): give a path under {mount}, \
                 or the path `cat /proc/PID/cgroup` prints on its `0::` line",
                dir.display()
            ),
            CgroupError::Io { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for CgroupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CgroupError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The mounted cgroup v2 hierarchy.
#[derive(Debug, Clone)]
pub struct Hierarchy {
    pub mount: Mount,
    /// The mount point's device: a directory on another one is not in this hierarchy.
    dev: u64,
}

impl Hierarchy {
    /// The hierarchy `/proc/self/mountinfo` shows.
    pub fn find() -> Result<Hierarchy, CgroupError> {
        Hierarchy::from_mountinfo(Path::new("/proc/self/mountinfo"))
    }

    /// The hierarchy the mountinfo file at `path` shows.
    pub fn from_mountinfo(path: &Path) -> Result<Hierarchy, CgroupError> {
        let text = read(path)?;
        let mount = text::cgroup2_mount(&text).ok_or(CgroupError::NoHierarchy)?;
        let point = PathBuf::from(&mount.point);
        let dev = std::fs::metadata(&point)
            .map_err(|source| CgroupError::Io {
                path: point,
                source,
            })?
            .dev();
        Ok(Hierarchy { mount, dev })
    }

    /// The cgroup `arg` names: a directory under the mount, or a path in the hierarchy.
    pub fn resolve(&self, arg: &str) -> Result<Cgroup, CgroupError> {
        let path =
            text::in_hierarchy(&self.mount.point, arg).ok_or_else(|| CgroupError::Outside {
                arg: arg.to_string(),
            })?;
        let dir = self.dir_of(&path);
        let md = match std::fs::metadata(&dir) {
            Ok(md) if md.is_dir() => md,
            Ok(_) => return Err(CgroupError::NotFound { path, dir }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // An absolute directory outside the mount (a v1 controller's) is a different mistake.
                return Err(match std::fs::metadata(arg) {
                    Ok(other) if other.is_dir() && arg.starts_with('/') => CgroupError::NotV2 {
                        dir: arg.into(),
                        mount: self.mount.point.clone(),
                    },
                    _ => CgroupError::NotFound { path, dir },
                });
            }
            Err(source) => return Err(CgroupError::Io { path: dir, source }),
        };
        if md.dev() != self.dev {
            return Err(CgroupError::NotV2 {
                dir,
                mount: self.mount.point.clone(),
            });
        }
        Ok(Cgroup {
            path,
            dir,
            id: md.ino(),
        })
    }

    /// Process `pid`'s v2 cgroup, from `/proc/PID/cgroup`.
    pub fn of_process(&self, pid: u32) -> Result<Cgroup, CgroupError> {
        let file = PathBuf::from(format!("/proc/{pid}/cgroup"));
        let text = read(&file)?;
        let path = text::process_cgroup(&text).ok_or_else(|| CgroupError::Io {
            path: file.clone(),
            source: std::io::Error::other("no cgroup v2 line (`0::`)"),
        })?;
        // Inside a cgroup namespace the line is relative to the namespace's root, which is the mount's.
        let full = if self.mount.root == "/" {
            path.to_string()
        } else {
            format!("{}{path}", self.mount.root.trim_end_matches('/'))
        };
        self.resolve(&full)
    }

    /// The directory of hierarchy path `path` (which starts with `/`), under the mount.
    fn dir_of(&self, path: &str) -> PathBuf {
        Path::new(&self.mount.point).join(path.trim_start_matches('/'))
    }

    /// Every cgroup's id and path, walking the hierarchy (at most 100,000 directories).
    pub fn walk(&self) -> HashMap<u64, String> {
        let mut out = HashMap::new();
        let mut todo = vec![(PathBuf::from(&self.mount.point), "/".to_string())];
        while let Some((dir, path)) = todo.pop() {
            let Ok(md) = std::fs::symlink_metadata(&dir) else {
                continue;
            };
            if !md.is_dir() || md.dev() != self.dev || out.len() >= WALK_LIMIT {
                continue;
            }
            out.insert(md.ino(), path.clone());
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                // cgroup directories only: every file in them is a regular (control) file.
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let child = if path == "/" {
                        format!("/{name}")
                    } else {
                        format!("{path}/{name}")
                    };
                    todo.push((e.path(), child));
                }
            }
        }
        out
    }
}

/// Cgroup ids to paths, for naming the cgroup a hit's writer was in: walked once, and again on a miss (a
/// cgroup created since, or one removed). The reports ask once per id (`crate::report::cgroup`), so a
/// walk is paid once per unknown id.
#[derive(Debug)]
pub struct Names {
    hierarchy: Hierarchy,
    paths: HashMap<u64, String>,
}

impl Names {
    pub fn new(hierarchy: Hierarchy) -> Names {
        let paths = hierarchy.walk();
        Names { hierarchy, paths }
    }

    /// The path of cgroup `id`; `None` when no walk found it (removed before it could be named).
    pub fn get(&mut self, id: u64) -> Option<&str> {
        if !self.paths.contains_key(&id) {
            self.paths = self.hierarchy.walk();
        }
        self.paths.get(&id).map(String::as_str)
    }

    /// These names as the reports look them up (`report::cgroup::CgroupNames`).
    pub fn into_lookup(mut self) -> Box<dyn FnMut(u64) -> Option<String>> {
        Box::new(move |id| self.get(id).map(str::to_string))
    }

    /// The container id, where the path of cgroup `id` holds one.
    pub fn container(&mut self, id: u64) -> Option<text::Container> {
        text::container(self.get(id)?)
    }
}

fn read(path: &Path) -> Result<String, CgroupError> {
    std::fs::read_to_string(path).map_err(|source| CgroupError::Io {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A made-up "hierarchy": a directory tree mounted nowhere, named by a mountinfo file, resolves paths
    /// to its directories' inodes and walks back from them.
    #[test]
    fn paths_resolve_to_inodes_and_walk_back() {
        let base = std::env::temp_dir().join(format!("ksymwatch-cgroup-{}", std::process::id()));
        let root = base.join("cg");
        std::fs::create_dir_all(root.join("system.slice/app.scope")).unwrap();
        std::fs::write(root.join("cgroup.procs"), "").unwrap();
        let info = base.join("mountinfo");
        std::fs::write(
            &info,
            format!("41 31 0:38 / {} rw - cgroup2 cgroup2 rw\n", root.display()),
        )
        .unwrap();
        let h = Hierarchy::from_mountinfo(&info).unwrap();
        let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
        let app = root.join("system.slice/app.scope");
        let by_path = h.resolve("/system.slice/app.scope").unwrap();
        assert_eq!(
            by_path,
            Cgroup {
                path: "/system.slice/app.scope".into(),
                dir: app.clone(),
                id: ino(&app)
            }
        );
        assert_eq!(h.resolve(&app.display().to_string()).unwrap(), by_path);
        assert_eq!(
            h.resolve("system.slice").unwrap().id,
            ino(&root.join("system.slice"))
        );
        let e = h.resolve("/nope.slice").unwrap_err();
        assert!(
            matches!(e, CgroupError::NotFound { .. }) && e.to_string().contains("/proc/PID/cgroup"),
            "{e}"
        );
        assert!(matches!(
            h.resolve("/../x"),
            Err(CgroupError::Outside { .. })
        ));
        let e = h.resolve("/cgroup.procs").unwrap_err();
        assert!(matches!(e, CgroupError::NotFound { .. }), "{e:?}");

        let mut names = Names::new(h.clone());
        assert_eq!(names.get(ino(&app)), Some("/system.slice/app.scope"));
        assert_eq!(names.get(ino(&root)), Some("/"));
        assert_eq!(h.walk().len(), 3, "directories only");

        std::fs::write(&info, "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n").unwrap();
        assert!(matches!(
            Hierarchy::from_mountinfo(&info),
            Err(CgroupError::NoHierarchy)
        ));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
