//! `--cgroup`'s test in the hit program: a trap is kept only when its writer is in one of the chosen
//! cgroups or below one, decided with `bpf_current_task_under_cgroup` against a `BPF_MAP_TYPE_CGROUP_ARRAY`
//! that holds the chosen cgroups, one per index ([`CgroupMap`]).
//!
//! Why that helper and not the writer's ancestor ids (`bpf_get_current_ancestor_cgroup_id(level)`
//! compared with each chosen id): the ancestor test needs each chosen cgroup's level, its depth from the
//! hierarchy's real root, and the tracer only knows its depth under the mount it sees. In a cgroup
//! namespace, which is where a DaemonSet's container runs on a cgroup v2 node, the mount's root is the
//! namespace's and the depth is wrong, silently. The cgroup array is given the directory itself (its
//! descriptor), so the kernel's own ancestry test answers wherever the tracer runs; the price is one
//! helper call per chosen cgroup (a few, typically one) for each trap, against one per distinct level.
//! A kernel that refuses the helper or the map to a perf-event program refuses the program at load,
//! before anything is armed, with the verifier's reason.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use crate::model::cgroup::Cgroup;
use crate::perf::bpf::insn::{Asm, Cond, Label, R0, R1, R2};
use crate::perf::bpf::kernel::{Helper, MapType};
use crate::perf::sys;

/// The most cgroups one watch may choose: each costs every trap one helper call.
pub const MAX: usize = 64;

/// At this point of a program: on to `drop` unless the current task is in the cgroup at one of the
/// `entries` indices of cgroup array `map`, or below it (r0-r5 clobbered). An index whose cgroup the
/// kernel cannot test (an error, not 0 or 1) keeps nothing.
pub fn filter(a: &mut Asm, (map, entries): (i32, u32), drop: Label) {
    let kept = a.label();
    for index in 0..entries {
        a.ld_map_fd(R1, map)
            .mov_imm(R2, index as i32)
            .call(Helper::CurrentTaskUnderCgroup)
            .jump_imm(Cond::Eq, R0, 1, kept);
    }
    a.goto(drop);
    a.bind(kept);
}

/// The chosen cgroups as the kernel holds them: a cgroup array, index `i` the `i`-th cgroup. The map
/// holds a reference to each cgroup, so the directories are not kept open.
pub struct CgroupMap {
    map: OwnedFd,
    entries: u32,
}

impl CgroupMap {
    /// A cgroup array holding `cgroups` (at most [`MAX`]), each opened by its directory.
    pub fn create(cgroups: &[Cgroup]) -> io::Result<CgroupMap> {
        let entries = u32::try_from(cgroups.len().min(MAX)).unwrap_or(0);
        let map = super::create_map(MapType::CgroupArray, (4, 4), entries, "ksw_cgroups")?;
        for (i, c) in cgroups.iter().take(MAX).enumerate() {
            let dir = File::open(&c.dir)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", c.dir.display())))?;
            let fd = dir.as_raw_fd() as u32;
            sys::bpf_map_update(map.as_fd(), &(i as u32).to_ne_bytes(), &fd.to_ne_bytes())
                .map_err(|e| io::Error::new(e.kind(), format!("cgroup {}: {e}", c.path)))?;
        }
        Ok(CgroupMap { map, entries })
    }

    /// The descriptor and the entries, as [`super::hit::HitMaps::cgroups`] takes them.
    pub fn fds(&self) -> (i32, u32) {
        (super::raw(self.map.as_fd()), self.entries)
    }
}

#[cfg(test)]
mod tests {
    use super::super::hit::{generate, HitMaps, HitSpec};
    use super::super::interp::{FakeKernel, COMM_OFFSET, PROCESS_START};
    use super::super::kernel::Helper;
    use super::super::layout::STAT_FILTERED;
    use crate::model::filter::Filter;

    const RING: i32 = 30;
    const CGROUPS: i32 = 12;
    /// A system-wide watch's maps, with two chosen cgroups.
    const MAPS: HitMaps = HitMaps {
        cgroups: Some((CGROUPS, 2)),
        ..HitMaps::SYSTEM_FOR_TESTS
    };
    /// The chosen cgroups' ids: `/pods/a` and `/pods/b`.
    const A: u64 = 0x1a;
    const B: u64 = 0x1b;

    /// The hit program with two cgroups chosen, and `--tid` where given: how many of one trap per
    /// writer (its cgroup and ancestors, innermost first) it writes, and how many it counts as
    /// filtered.
    fn kept(writers: &[&[u64]], tids: Vec<u32>) -> (usize, u64) {
        let filter = Filter {
            tids,
            ..Filter::default()
        };
        let spec = HitSpec {
            comm_offset: Some(COMM_OFFSET),
            process_start: Some(PROCESS_START),
            ..HitSpec::plain(&filter, None)
        };
        let prog = generate(&spec, &MAPS).expect("assembles");
        let mut m = FakeKernel::for_hit(&MAPS, 0x60_1000, RING, 1 << 14);
        m.set(CGROUPS, &0u32.to_le_bytes(), &A.to_le_bytes());
        m.set(CGROUPS, &1u32.to_le_bytes(), &B.to_le_bytes());
        for w in writers {
            m.cgroups = w.to_vec();
            assert_eq!(m.run(&prog), 0);
        }
        (m.ring(RING).len(), m.stat(STAT_FILTERED))
    }

    /// A writer in a chosen cgroup, or below one, is kept; one in the parent, a sibling or the root is
    /// counted as filtered; the kernel is asked about each cgroup until one answers yes.
    #[test]
    fn only_writers_in_a_chosen_cgroup_or_below_are_kept() {
        let root = 1;
        let pods = 0x10;
        assert_eq!(kept(&[&[A, pods, root]], vec![]), (1, 0));
        assert_eq!(kept(&[&[B, pods, root]], vec![]), (1, 0));
        assert_eq!(kept(&[&[0x2b, B, pods, root]], vec![]), (1, 0), "below b");
        assert_eq!(kept(&[&[pods, root]], vec![]), (0, 1), "the parent");
        assert_eq!(kept(&[&[0x1c, pods, root]], vec![]), (0, 1), "a sibling");
        assert_eq!(kept(&[&[root]], vec![]), (0, 1));
        assert_eq!(
            kept(&[&[A, pods, root], &[root], &[B, pods, root]], vec![]),
            (2, 1)
        );
        // With `--tid`, both must hold (the test writer is tid 101).
        assert_eq!(kept(&[&[A, pods, root]], vec![101]), (1, 0));
        assert_eq!(kept(&[&[A, pods, root]], vec![7]), (0, 1));
    }

    /// With a full ring, the kernel's totals still count every kept hit under its writer's cgroup (the
    /// id the record carries, in the `counts` key): two writers in two cgroups, each hit once in its
    /// cgroup's count though the ring took none; a writer in no chosen cgroup is in no count.
    #[test]
    fn the_totals_count_every_kept_hit_by_cgroup_with_the_ring_full() {
        use super::super::layout::STAT_LOST;
        use super::super::totals::{self, TotalsMaps};
        let maps = HitMaps {
            totals: Some(TotalsMaps {
                chains: 20,
                counts: 21,
                values: None,
                stats: 22,
                limit: None,
            }),
            ..MAPS
        };
        let filter = Filter::default();
        let spec = HitSpec {
            cgroup_ids: true,
            ..HitSpec::plain(&filter, Some(COMM_OFFSET))
        };
        let prog = generate(&spec, &maps).expect("assembles");
        let mut m = FakeKernel::for_hit(&maps, 0x60_1000, RING, 1 << 14);
        m.set(CGROUPS, &0u32.to_le_bytes(), &A.to_le_bytes());
        m.set(CGROUPS, &1u32.to_le_bytes(), &B.to_le_bytes());
        m.ring_room = 0;
        let below_b = 0x2b;
        for (id, n) in [(A, 3), (below_b, 2), (0x1c, 4)] {
            m.cgroup_id = id;
            m.cgroups = vec![id, 0x10, 1];
            if id == below_b {
                m.cgroups.insert(1, B);
            }
            for _ in 0..n {
                m.run(&prog);
            }
        }
        assert!(m.ring(RING).is_empty());
        assert_eq!(m.stat(STAT_LOST), 5);
        assert_eq!(m.stat(STAT_FILTERED), 4);
        let mut by_cgroup: Vec<(Option<u64>, u64)> = m
            .counts(21, 7)
            .iter()
            .map(|(key, n)| (key.cgroup, *n))
            .collect();
        by_cgroup.sort();
        assert_eq!(by_cgroup, [(Some(A), 3), (Some(below_b), 2)]);
        assert_eq!(m.word(22, u64::from(totals::STAT_KEPT)), Some(5));
    }

    /// Without `--cgroup` the helper is never called; with it, once per cgroup at most.
    #[test]
    fn the_helper_is_called_once_per_chosen_cgroup_at_most() {
        let filter = Filter::default();
        let spec = HitSpec::plain(&filter, Some(COMM_OFFSET));
        let plain = HitMaps {
            cgroups: None,
            ..MAPS
        };
        let prog = generate(&spec, &plain).expect("assembles");
        let mut m = FakeKernel::for_hit(&plain, 0x60_1000, RING, 1 << 14);
        m.run(&prog);
        assert!(!m.calls.contains(&Helper::CurrentTaskUnderCgroup));

        let prog = generate(&spec, &MAPS).expect("assembles");
        let mut m = FakeKernel::for_hit(&MAPS, 0x60_1000, RING, 1 << 14);
        m.set(CGROUPS, &0u32.to_le_bytes(), &A.to_le_bytes());
        m.set(CGROUPS, &1u32.to_le_bytes(), &B.to_le_bytes());
        let under = |m: &FakeKernel| {
            m.calls
                .iter()
                .filter(|c| **c == Helper::CurrentTaskUnderCgroup)
                .count()
        };
        m.cgroups = vec![A, 1];
        m.run(&prog);
        assert_eq!(under(&m), 1, "the first answers");
        m.calls.clear();
        m.cgroups = vec![1];
        m.run(&prog);
        assert_eq!(under(&m), 2);
    }
}
