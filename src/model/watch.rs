//! What is watched, as every layer names it: a range (address, length, access) and, for a per-CPU
//! variable, where each CPU's copy is. Built by `config` from a TARGET, armed by `perf`, printed by
//! `report`.

use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Write,
    ReadWrite,
}

impl Access {
    /// The column printed on each hit.
    pub fn letters(self) -> &'static str {
        match self {
            Access::Write => "W",
            Access::ReadWrite => "RW",
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Access::Write => "write",
            Access::ReadWrite => "read-write",
        }
    }
}

/// One watched range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    /// How hits name it: `jiffies`, `__start_init_stack+0x3e00`, `0x7ffd1000`.
    pub label: String,
    pub addr: u64,
    pub len: u8,
    pub access: Access,
    /// The kernel module the target's symbol belongs to: the watch ends when that module is unloaded
    /// (its memory is freed and reused). `None` for vmlinux, user space and raw addresses.
    pub module: Option<Arc<str>>,
    /// A per-CPU variable: where each CPU's copy is. `addr` is then the lowest known CPU's copy (what the
    /// header names), and each CPU's breakpoint is at [`Watch::addr_on`].
    pub per_cpu: Option<PerCpu>,
}

/// Where a per-CPU variable's copies are: every CPU has its own, at its per-CPU base plus the same offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerCpu {
    /// The watched bytes' offset in the per-CPU area (the variable's offset plus the member's).
    pub offset: u64,
    /// The per-CPU base of each CPU known so far (a CPU that comes online later gets its own on arrival).
    pub bases: std::collections::BTreeMap<u32, u64>,
    /// `--percpu-cpu N`: every CPU watches CPU N's copy (remote writers included); `None`: each CPU its
    /// own copy.
    pub copy: Option<u32>,
}

impl Watch {
    /// Whether a BPF program can read the watched bytes at a trap taken in user space: not for a
    /// read-write watch of a user address, where the breakpoint is still armed while the program runs and
    /// its own read would trap again. `--if` is decided on those bytes.
    pub fn kernel_reads_at_user_traps(&self) -> bool {
        self.access == Access::Write || self.addr >= 1 << 63
    }

    /// Why `--if` cannot judge this watch's hits, `None` where it can: the one rule for the command line
    /// and a `--control` move, each adding its own remedy. The condition is decided in the kernel on the
    /// bytes it reads at the trap ([`Watch::kernel_reads_at_user_traps`]); without them every hit would
    /// be kept, whatever it stored (an unknown value is never hidden).
    pub fn if_undecidable(&self) -> Option<String> {
        (!self.kernel_reads_at_user_traps()).then(|| {
            format!(
                "`{}` is a read-write watch of a user address, whose bytes the kernel cannot read at \
                 the trap (its own read would trap again), so --if could not be decided there and would \
                 keep every hit",
                self.label
            )
        })
    }

    /// Where the breakpoint on `cpu` goes: `addr`, or for a per-CPU variable the copy that CPU watches;
    /// `None` while that CPU's per-CPU base is unknown.
    pub fn addr_on(&self, cpu: u32) -> Option<u64> {
        let Some(p) = &self.per_cpu else {
            return Some(self.addr);
        };
        let base = p.bases.get(&p.copy.unwrap_or(cpu))?;
        Some(base.wrapping_add(p.offset))
    }

    /// Whose copy of a per-CPU variable `addr` is (`None` for any other watch).
    pub fn copy_at(&self, addr: u64) -> Option<u32> {
        let p = self.per_cpu.as_ref()?;
        p.bases
            .iter()
            .find(|(_, &base)| base.wrapping_add(p.offset) == addr)
            .map(|(&cpu, _)| cpu)
    }

    /// Whether a hit at `addr` is on this watch (any CPU's copy, for a per-CPU variable).
    pub fn covers(&self, addr: u64) -> bool {
        addr == self.addr || self.copy_at(addr).is_some()
    }

    /// Whether `other` watches the same bytes the same way, whatever its label: a store there traps both.
    pub fn same_bytes(&self, other: &Watch) -> bool {
        (self.addr, self.len, self.access, &self.per_cpu)
            == (other.addr, other.len, other.access, &other.per_cpu)
    }
}

/// The first two of `watches` (their indexes, in order) that watch the same bytes the same way: each
/// store there would trap both breakpoints and be reported, and counted, twice, for a debug register
/// spent on nothing.
pub fn same_twice(watches: &[Watch]) -> Option<(usize, usize)> {
    watches.iter().enumerate().find_map(|(j, w)| {
        watches[..j]
            .iter()
            .position(|v| v.same_bytes(w))
            .map(|i| (i, j))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A target given twice (or two names of one address) is found; the same bytes watched for writes and
    /// for reads too, or two lengths at one address, are two watches.
    #[test]
    fn the_same_bytes_watched_twice_are_found() {
        let at = |addr: u64, len: u8, access: Access| Watch {
            label: format!("0x{addr:x}"),
            addr,
            len,
            access,
            module: None,
            per_cpu: None,
        };
        let w = |addr| at(addr, 8, Access::Write);
        assert_eq!(same_twice(&[w(0x10), w(0x20), w(0x10)]), Some((0, 2)));
        assert_eq!(same_twice(&[w(0x10), w(0x20)]), None);
        assert_eq!(same_twice(&[w(0x10), at(0x10, 8, Access::ReadWrite)]), None);
        assert_eq!(same_twice(&[w(0x10), at(0x10, 4, Access::Write)]), None);
    }

    /// Each CPU's breakpoint goes on the copy it watches (its own, or `--percpu-cpu N`'s), none where the
    /// base is unknown; an address names its copy.
    #[test]
    fn a_per_cpu_watch_is_at_each_cpus_copy() {
        let mut w = Watch {
            label: "runqueues.nr_running".into(),
            addr: 0x1004,
            len: 4,
            access: Access::Write,
            module: None,
            per_cpu: Some(PerCpu {
                offset: 4,
                bases: [(0, 0x1000), (1, 0x2000)].into(),
                copy: None,
            }),
        };
        assert_eq!(
            (w.addr_on(0), w.addr_on(1), w.addr_on(2)),
            (Some(0x1004), Some(0x2004), None)
        );
        assert_eq!((w.copy_at(0x2004), w.copy_at(0x2000)), (Some(1), None));
        assert!(w.covers(0x2004) && w.covers(0x1004) && !w.covers(0x3004));
        if let Some(p) = &mut w.per_cpu {
            p.copy = Some(1);
        }
        assert_eq!((w.addr_on(0), w.addr_on(2)), (Some(0x2004), Some(0x2004)));
        let plain = Watch {
            per_cpu: None,
            ..w.clone()
        };
        assert_eq!(
            (plain.addr_on(7), plain.copy_at(0x1004)),
            (Some(0x1004), None)
        );
    }
}
