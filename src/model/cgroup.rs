//! cgroup v2 names, pure: where the v2 hierarchy is mounted (from `/proc/self/mountinfo`'s text), what a
//! `--cgroup` argument means under it, a process's v2 cgroup (from `/proc/PID/cgroup`'s text), and the
//! container id a cgroup path holds where a runtime named it.
//!
//! The v2 hierarchy is the `cgroup2` mount: `/sys/fs/cgroup` on a unified system, `/sys/fs/cgroup/unified`
//! on a hybrid one (v1 controllers beside it). A cgroup is named by its path in the hierarchy
//! (`/system.slice/docker-<id>.scope`, as `/proc/PID/cgroup` prints it) or by its directory
//! (`/sys/fs/cgroup/system.slice/...`); both are taken. The files themselves are read by
//! `crate::host::cgroup`.

use std::path::PathBuf;

/// One cgroup of the v2 hierarchy, found on the host: what `--cgroup` names, kept by the hit filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    /// Its path in the hierarchy (`/system.slice/x.scope`; `/` the root).
    pub path: String,
    /// Its directory.
    pub dir: PathBuf,
    /// Its id: the directory's inode number.
    pub id: u64,
}

/// The cgroup v2 hierarchy's mount, from one mountinfo line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted (`/sys/fs/cgroup/unified`).
    pub point: String,
    /// The cgroup the mount shows as its root (`/` but inside a cgroup namespace or a bind mount).
    pub root: String,
}

/// The cgroup2 mount in mountinfo `text`: the first one whose root is the hierarchy's root, else the
/// first one (inside a container, the namespace's root).
pub fn cgroup2_mount(text: &str) -> Option<Mount> {
    let mounts: Vec<Mount> = text
        .lines()
        .filter_map(|line| {
            // `ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS`
            let (left, right) = line.split_once(" - ")?;
            if right.split_whitespace().next()? != "cgroup2" {
                return None;
            }
            let f: Vec<&str> = left.split_whitespace().collect();
            Some(Mount {
                root: unescape(f.get(3)?),
                point: unescape(f.get(4)?),
            })
        })
        .collect();
    let pick = mounts.iter().position(|m| m.root == "/").unwrap_or(0);
    mounts.into_iter().nth(pick)
}

/// mountinfo's octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal.and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok()) {
            Some(c) => {
                out.push(c);
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What `--cgroup ARG` names, as a path in the hierarchy (`/` its root, no trailing `/`): a directory
/// under the mount point, else a path in the hierarchy (absolute, or relative to its root). `None` for
/// a path that climbs out with `..`.
pub fn in_hierarchy(mount_point: &str, arg: &str) -> Option<String> {
    let point = mount_point.trim_end_matches('/');
    let rest = match arg.strip_prefix(point) {
        Some(rest) if !point.is_empty() && (rest.is_empty() || rest.starts_with('/')) => rest,
        _ => arg,
    };
    let mut parts = Vec::new();
    for part in rest.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            p => parts.push(p),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// The v2 cgroup in `/proc/PID/cgroup` text: the path of its `0::` line.
pub fn process_cgroup(text: &str) -> Option<&str> {
    text.lines().find_map(|l| l.strip_prefix("0::"))
}

/// The container runtime that named a cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    Docker,
    Containerd,
    CriO,
    Podman,
}

impl Runtime {
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Docker => "docker",
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
            Runtime::Podman => "podman",
        }
    }
}

/// A container's id, as its runtime wrote it into the cgroup's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    pub runtime: Runtime,
    /// 64 lowercase hex digits.
    pub id: String,
}

/// The container a cgroup path belongs to: the innermost component a runtime named,
/// `docker-<id>.scope` or `/docker/<id>` (docker with the systemd or the cgroupfs driver),
/// `cri-containerd-<id>.scope`, `crio-<id>.scope`, `libpod-<id>.scope`. The runtimes' monitor processes
/// (`crio-conmon-<id>.scope`, `libpod-conmon-<id>.scope`) are not the container.
pub fn container(path: &str) -> Option<Container> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    parts.iter().enumerate().rev().find_map(|(i, part)| {
        let found = |runtime, id: &str| {
            is_id(id).then(|| Container {
                runtime,
                id: id.to_string(),
            })
        };
        if i > 0 && parts[i - 1] == "docker" {
            if let Some(c) = found(Runtime::Docker, part) {
                return Some(c);
            }
        }
        let scope = part.strip_suffix(".scope")?;
        [
            ("docker-", Runtime::Docker),
            ("cri-containerd-", Runtime::Containerd),
            ("crio-", Runtime::CriO),
            ("libpod-", Runtime::Podman),
        ]
        .into_iter()
        .find_map(|(prefix, runtime)| found(runtime, scope.strip_prefix(prefix)?))
    })
}

fn is_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f1c2a9e0b7d6c5a3e2f1d0c9b8a7f6e5d4c3b2a19081726354453627180a9bc";

    #[test]
    fn the_v2_mount_is_found_on_unified_and_hybrid_systems() {
        let hybrid = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        assert_eq!(
            cgroup2_mount(hybrid),
            Some(Mount {
                point: "/sys/fs/cgroup/unified".into(),
                root: "/".into()
            })
        );
        // Optional fields before the separator; a bind of a sub-cgroup first, the root mount after it.
        let unified = "\
29 22 0:26 /kubepods /mnt/pods rw shared:4 - cgroup2 cgroup2 rw,nsdelegate
30 22 0:26 / /sys/fs/cgroup rw,nosuid shared:5 master:1 - cgroup2 cgroup2 rw,nsdelegate
";
        assert_eq!(cgroup2_mount(unified).unwrap().point, "/sys/fs/cgroup");
        assert_eq!(
            cgroup2_mount("50 1 0:40 / /my\\040cgroups rw - cgroup2 none rw\n")
                .unwrap()
                .point,
            "/my cgroups"
        );
        assert_eq!(cgroup2_mount(&hybrid.replace("cgroup2", "cgroup")), None);
    }

    #[test]
    fn an_argument_is_a_directory_or_a_path_in_the_hierarchy() {
        let m = "/sys/fs/cgroup/unified";
        assert_eq!(
            in_hierarchy(m, "/sys/fs/cgroup/unified/system.slice/x.scope/").as_deref(),
            Some("/system.slice/x.scope")
        );
        assert_eq!(
            in_hierarchy(m, "/sys/fs/cgroup/unified").as_deref(),
            Some("/")
        );
        assert_eq!(
            in_hierarchy(m, "/system.slice/x.scope").as_deref(),
            Some("/system.slice/x.scope")
        );
        assert_eq!(in_hierarchy(m, "pods/a").as_deref(), Some("/pods/a"));
        // A sibling directory whose name starts like the mount is not under it.
        assert_eq!(
            in_hierarchy(m, "/sys/fs/cgroup/unified2/a").as_deref(),
            Some("/sys/fs/cgroup/unified2/a")
        );
        assert_eq!(in_hierarchy(m, "/a/../../etc"), None);
        assert_eq!(in_hierarchy("/", "/a/./b").as_deref(), Some("/a/b"));
    }

    #[test]
    fn a_process_cgroup_is_its_v2_line() {
        let text = "9:name=systemd:/\n4:memory:/process_api/f89a\n0::/user.slice/session-2.scope\n";
        assert_eq!(process_cgroup(text), Some("/user.slice/session-2.scope"));
        assert_eq!(process_cgroup("4:memory:/x\n"), None);
    }

    #[test]
    fn container_ids_are_found_as_each_runtime_names_them() {
        let cases = [
            (format!("/system.slice/docker-{ID}.scope"), Runtime::Docker),
            (format!("/docker/{ID}"), Runtime::Docker),
            (
                format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1a2b.slice/cri-containerd-{ID}.scope"),
                Runtime::Containerd,
            ),
            (
                format!("/kubepods.slice/kubepods-burstable-podx.slice/crio-{ID}.scope"),
                Runtime::CriO,
            ),
            (
                format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container"),
                Runtime::Podman,
            ),
        ];
        for (path, runtime) in cases {
            assert_eq!(
                container(&path),
                Some(Container {
                    runtime,
                    id: ID.into()
                }),
                "{path}"
            );
        }
        for none in [
            "/".to_string(),
            "/system.slice/sshd.service".into(),
            format!("/system.slice/crio-conmon-{ID}.scope"),
            format!("/machine.slice/libpod-conmon-{ID}.scope"),
            format!("/system.slice/docker-{}.scope", &ID[..12]),
            format!("/system.slice/docker-{}.scope", ID.to_uppercase()),
            format!("/notdocker/{ID}"),
        ] {
            assert_eq!(container(&none), None, "{none}");
        }
        assert_eq!(Runtime::CriO.name(), "cri-o");
    }
}
