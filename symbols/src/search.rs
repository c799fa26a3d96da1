//! The search order that picks the [`Source`] answering symbol questions.
//!
//! The order trusts what the user named first, then the places distributions install the running kernel's
//! vmlinux and System.map, then a vmlinux of the running kernel already in the debuginfod client cache
//! (a local file, checked by build-id; nothing is fetched here), then `/proc/kallsyms` (always there, but
//! without data symbols on most kernels).
//! Every path is derived from [`SourceSearch`], so tests point it at a temp dir and a made-up release.

use std::io::Read;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::buildid::BuildId;
use crate::error::Error;
use crate::role::Role;
use crate::source::Source;

/// The inputs of the source search; [`SourceSearch::system`] fills them for this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceSearch {
    /// A vmlinux the user named: used as is, never second-guessed.
    pub vmlinux: Option<PathBuf>,
    /// A System.map the user named.
    pub system_map: Option<PathBuf>,
    /// Prefix of the distribution paths (`/` on a real system).
    pub root: PathBuf,
    /// The running kernel's release (`uname -r`); `None` skips the distribution paths.
    pub release: Option<String>,
    /// The running kernel's kallsyms: the last resort, and the runtime side of the KASLR offset.
    pub kallsyms: PathBuf,
    /// The running kernel's ELF notes, for its build-id.
    pub notes: PathBuf,
    /// The debuginfod client cache ([`crate::debuginfod`]): a `CACHE/ID/debuginfo` whose build-id is the
    /// running kernel's is used after the distribution files. `None` skips it.
    pub debuginfod_cache: Option<PathBuf>,
    /// The build-id in `notes`, once read ([`SourceSearch::running_build_id`]).
    build_id: OnceLock<Option<BuildId>>,
}

impl SourceSearch {
    /// This machine: root `/`, the release from `/proc/sys/kernel/osrelease`, `/proc/kallsyms`,
    /// `/sys/kernel/notes`, the debuginfod client cache of this user's environment.
    pub fn system() -> SourceSearch {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        let mut s = SourceSearch::with_root("/", release);
        s.debuginfod_cache = crate::debuginfod::Debuginfod::default_cache_dir();
        s
    }

    /// Everything under `root`, for tests: `root/proc/kallsyms`, `root/sys/kernel/notes`, `root/boot/...`;
    /// no debuginfod cache (a test sets one).
    pub fn with_root(root: impl Into<PathBuf>, release: Option<String>) -> SourceSearch {
        let root = root.into();
        SourceSearch {
            vmlinux: None,
            system_map: None,
            kallsyms: root.join("proc/kallsyms"),
            notes: root.join("sys/kernel/notes"),
            root,
            release,
            debuginfod_cache: None,
            build_id: OnceLock::new(),
        }
    }

    /// The running kernel's build-id, from `notes` (read the first time it is asked, so set `notes`
    /// before): the one id the source search, the check of a vmlinux against the running kernel, the
    /// kallsyms cache's key and a debuginfod fetch all go by. A read that fails is not kept: each asker
    /// gets its error (an unreadable notes file costs only what needs the id).
    pub fn running_build_id(&self) -> Result<Option<&BuildId>, Error> {
        if let Some(id) = self.build_id.get() {
            return Ok(id.as_ref());
        }
        // The blob is in the machine's own byte order, as the kernel writes its own memory out. Only a
        // regular file of at most `NOTES_LIMIT` bytes is read.
        let blob = crate::file::read(&self.notes, Role::KernelNotes)?;
        let id = crate::buildid::from_notes(&blob, cfg!(target_endian = "little"));
        Ok(self.build_id.get_or_init(|| id).as_ref())
    }

    /// The distribution places for the running kernel, in search order (existing or not).
    pub fn distro_candidates(&self) -> Vec<Source> {
        let Some(rel) = &self.release else {
            return Vec::new();
        };
        let r = |p: String| self.root.join(p);
        vec![
            Source::Vmlinux(r(format!("usr/lib/debug/boot/vmlinux-{rel}"))),
            Source::Vmlinux(r(format!("usr/lib/debug/lib/modules/{rel}/vmlinux"))),
            Source::Vmlinux(r(format!("lib/modules/{rel}/build/vmlinux"))),
            Source::Vmlinux(r(format!("boot/vmlinux-{rel}"))),
            Source::SystemMap(r(format!("boot/System.map-{rel}"))),
        ]
    }

    /// Picks the source: the named vmlinux, then the named System.map, then the first usable distribution
    /// file, then the running kernel's vmlinux in the debuginfod cache, then kallsyms. Distribution files
    /// that cannot serve (a compressed `/boot/vmlinux-*`, Debian's one-line placeholder System.map) are
    /// passed over, since the user did not ask for them by name.
    pub fn pick(&self) -> Source {
        if let Some(p) = &self.vmlinux {
            return Source::Vmlinux(p.clone());
        }
        if let Some(p) = &self.system_map {
            return Source::SystemMap(p.clone());
        }
        self.distro_candidates()
            .into_iter()
            .find(usable)
            .or_else(|| self.debuginfod_cached().map(Source::Vmlinux))
            .unwrap_or_else(|| Source::Kallsyms(self.kallsyms.clone()))
    }

    /// The running kernel's vmlinux in the debuginfod cache, when its build-id is the one in `notes`.
    pub fn debuginfod_cached(&self) -> Option<PathBuf> {
        let cache = self.debuginfod_cache.as_ref().filter(|c| c.is_dir())?;
        let id = self.running_build_id().ok().flatten()?;
        crate::debuginfod::Debuginfod::cached(cache, id)
    }
}

/// Cheap checks on a distribution file: an ELF magic for vmlinux, a real first line for System.map.
fn usable(source: &Source) -> bool {
    let mut head = [0u8; 256];
    // A device or FIFO at a distribution path is passed over like a missing file, without blocking.
    let Ok(mut file) = crate::file::open_regular(source.path(), source.role()) else {
        return false;
    };
    let n = file.read(&mut head).unwrap_or(0);
    match source {
        Source::Vmlinux(_) => head[..n].starts_with(b"\x7fELF"),
        Source::SystemMap(_) => {
            n > 0 && !crate::sysmap::is_placeholder(&String::from_utf8_lossy(&head[..n]))
        }
        Source::Kallsyms(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::note;

    /// The build-id is read once and kept for every asker; a notes file that cannot be read is asked
    /// again (and kept once it can be read).
    #[test]
    fn the_running_build_id_is_read_once() {
        let root = std::env::temp_dir().join(format!("ksymwatch-search-id-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let s = SourceSearch::with_root(&root, None);
        assert!(s.running_build_id().is_err(), "no notes yet");
        std::fs::create_dir_all(root.join("sys/kernel")).unwrap();
        std::fs::write(&s.notes, note(b"GNU\0", 3, &[0xab; 20])).unwrap();
        assert_eq!(
            s.running_build_id().unwrap().map(BuildId::to_string),
            Some("ab".repeat(20))
        );
        std::fs::write(&s.notes, note(b"GNU\0", 3, &[0xcd; 20])).unwrap();
        assert_eq!(
            s.running_build_id().unwrap().map(BuildId::to_string),
            Some("ab".repeat(20)),
            "kept from the first read"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
