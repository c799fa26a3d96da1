//! The by-tgid array of last values ([`super::program::Olds::by_tgid`]): a user address's old value in
//! each process, at the process's tgid, for the tgids below [`MAX_ENTRIES`] (and the system's `pid_max`).
//! Entry 0 holds the current generation; an entry is known only when it carries that generation (and
//! its owner is the writer's process, the program's check), so forgetting every old value (a
//! `--control` move) is one update, whatever the array's size.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use super::kernel::MapType;
use super::program::OLD_SLOT;
use crate::perf::sys;

/// The most entries the array takes: 1.5 MB of 24-byte values. A system whose `pid_max` is larger keeps
/// the last values of higher tgids in the hash.
pub const MAX_ENTRIES: u32 = 1 << 16;

/// `pid_max`'s default, for a system whose setting cannot be read.
const PID_MAX_DEFAULT: u32 = 32768;

/// Entries for a system whose `pid_max` is `pid_max`: one per tgid below it, at most [`MAX_ENTRIES`].
pub fn entries(pid_max: Option<u32>) -> u32 {
    pid_max.unwrap_or(PID_MAX_DEFAULT).clamp(2, MAX_ENTRIES)
}

fn pid_max() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// One watch's array and its current generation.
#[derive(Debug)]
pub struct TgidOlds {
    map: OwnedFd,
    generation: AtomicU64,
}

impl TgidOlds {
    /// A fresh array, every entry unknown (generation 0 against a current generation of 1).
    pub fn new() -> io::Result<TgidOlds> {
        let map = super::create_map(
            MapType::Array,
            (4, OLD_SLOT),
            entries(pid_max()),
            "ksw_olds_tgid",
        )?;
        let olds = TgidOlds {
            map,
            generation: AtomicU64::new(0),
        };
        olds.forget()?;
        Ok(olds)
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.map.as_fd()
    }

    /// Makes every entry unknown: the next hit of each process has no `old`.
    pub fn forget(&self) -> io::Result<()> {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        sys::bpf_map_update(self.map.as_fd(), &0u32.to_ne_bytes(), &slot(0, generation))
    }
}

/// An array value: the old value, then its generation (then its owner, the program's: 0 here).
fn slot(old: u64, generation: u64) -> [u8; OLD_SLOT as usize] {
    let mut v = [0u8; OLD_SLOT as usize];
    v[..8].copy_from_slice(&old.to_ne_bytes());
    v[8..16].copy_from_slice(&generation.to_ne_bytes());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_array_covers_pid_max_up_to_its_cap() {
        assert_eq!(entries(Some(32768)), 32768);
        assert_eq!(entries(Some(4_194_304)), MAX_ENTRIES);
        assert_eq!(entries(None), 32768);
        assert_eq!(entries(Some(0)), 2, "entry 0 is the generation's");
    }

    #[test]
    fn a_slot_is_the_old_value_then_its_generation() {
        let s = slot(0x1f4, 3);
        assert_eq!(u64::from_ne_bytes(s[..8].try_into().unwrap()), 0x1f4);
        assert_eq!(u64::from_ne_bytes(s[8..16].try_into().unwrap()), 3);
    }
}
