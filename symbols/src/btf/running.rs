//! The running kernel's own BTF ([`Btf::VMLINUX`]): mapped where sysfs keeps it, and parsed once per
//! process ([`Btf::running`]). A run asks it from several places (the plan's types and per-CPU bases,
//! the hit program's task layout and its repeats check, the fork follower, `check`), some on a thread
//! of their own at the same time as others: each parse cost a few milliseconds (and a name index as
//! much again on its first lookup), for the same 5 MB that cannot change while the kernel runs.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use super::Btf;
use crate::error::Error;

impl Btf {
    /// The running kernel's BTF, parsed on the first call and shared by every later one, on any
    /// thread: a call made while another parses it waits for that parse rather than making its own,
    /// and a lookup's name index is built once, in the one parse. Only a parse is kept: where the file
    /// cannot be read or checked, each call gets its error afresh (what one failed open costs), so
    /// each caller words it as [`Btf::open`]'s.
    pub fn running() -> Result<Arc<Btf>, Error> {
        static RUNNING: Shared<Btf> = Shared::new();
        RUNNING.get_or_open(|| Btf::open(Path::new(Btf::VMLINUX)))
    }
}

/// A value made on its first successful open and shared from then on; a failed open leaves the next
/// caller to try again.
pub(super) struct Shared<T>(Mutex<Option<Arc<T>>>);

impl<T> Shared<T> {
    pub(super) const fn new() -> Shared<T> {
        Shared(Mutex::new(None))
    }

    /// The value, opened by `open` if no call has opened it yet.
    pub(super) fn get_or_open<E>(&self, open: impl FnOnce() -> Result<T, E>) -> Result<Arc<T>, E> {
        // Held across the open, so that a second caller waits for this one's value. A caller that
        // panicked while holding it left no value behind: the slot is still sound to use.
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(value) = &*slot {
            return Ok(Arc::clone(value));
        }
        let value = Arc::new(open()?);
        *slot = Some(Arc::clone(&value));
        Ok(value)
    }
}

/// The kernel's BTF at `path` mapped, or `None` when it cannot be (before Linux 6.16).
pub(super) fn map(path: &Path) -> Option<memmap2::Mmap> {
    let file = std::fs::File::open(path).ok()?;
    // Private: the kernel refuses a shared mapping of its BTF.
    // SAFETY: the mapping is read-only and private, of the sysfs file that is the running kernel's own
    // BTF: its bytes are part of the kernel image and neither change nor shrink while it runs.
    unsafe { memmap2::MmapOptions::new().map_copy_read_only(&file) }.ok()
}
