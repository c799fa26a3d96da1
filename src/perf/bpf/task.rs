//! Where the running kernel keeps a task's name in `struct task_struct`, from its BTF: the hit program
//! reads the writer's name with two loads from the current task (`bpf_get_current_task_btf`) rather than
//! with `bpf_get_current_comm`, whose string copy and padding cost ~70 ns of every kept hit here
//! (in-kernel stamps of `hit_bench`: the record's fields 160 ns with the helper, 90 with the loads).
//! And where it keeps when the task's process started and how many programs it has run
//! ([`process_start`]), which tells two processes of one pid, and a process's programs, apart.

use std::sync::OnceLock;

use ksymwatch_symbols::Btf;

static COMM: OnceLock<Option<i16>> = OnceLock::new();
static START: OnceLock<Option<ProcessStart>> = OnceLock::new();

/// Where the current task's process start time is: `task_struct.group_leader`, then the leader's
/// `start_time` (the monotonic clock at fork, taken over by a thread that execs in the leader's place).
/// A pid names one process at a time, and no two of them started in the same nanosecond. And the task's
/// `self_exec_id` (a u64 wherever a task is read through BTF, since 5.7): one more at each exec,
/// inherited by the threads and children made after it, so a program's image is told from the one
/// before it under the same pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessStart {
    pub leader: i16,
    pub start_time: i16,
    pub exec_id: i16,
}

/// [`ProcessStart`] in the running kernel, when its BTF has its three fields within a load's reach; `None`
/// otherwise (the program then keeps its old values per pid). Read once per process, as [`comm_offset`].
pub fn process_start() -> Option<ProcessStart> {
    *START.get_or_init(|| {
        let btf = Btf::running().ok()?;
        let field = |name| {
            let offset = btf.struct_field_offset("task_struct", name)?;
            i16::try_from(offset).ok()
        };
        Some(ProcessStart {
            leader: field("group_leader")?,
            start_time: field("start_time")?,
            exec_id: field("self_exec_id")?,
        })
    })
}

/// `task_struct.comm`'s offset, when the kernel's BTF has it and a BPF load reaches both of its words;
/// `None` otherwise (the program then asks the helper). Read once per process, from the run's one parse
/// of the kernel's BTF ([`Btf::running`], a few ms), which a caller can make early on a thread of its own.
pub fn comm_offset() -> Option<i16> {
    *COMM.get_or_init(|| {
        let btf = Btf::running().ok()?;
        let offset = btf.struct_field_offset("task_struct", "comm")?;
        reachable(offset)
    })
}

/// `offset` when both 8-byte words from there are within a load's signed 16-bit offset.
fn reachable(offset: u64) -> Option<i16> {
    i16::try_from(offset.checked_add(8)?).ok()?;
    i16::try_from(offset).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::bpf::kernel::Helper;

    #[test]
    fn an_offset_is_used_only_where_both_words_can_be_loaded() {
        assert_eq!(reachable(1752), Some(1752));
        assert_eq!(reachable(32_759), Some(32_759));
        assert_eq!(reachable(32_760), None);
        assert_eq!(reachable(u64::MAX), None);
    }

    /// The helpers a hit program calls, in order.
    fn calls(comm_offset: Option<i16>) -> Vec<Helper> {
        use crate::perf::bpf::hit::{generate, HitMaps, HitSpec};
        let filter = crate::model::filter::Filter::default();
        let spec = HitSpec::plain(&filter, comm_offset);
        let maps = HitMaps {
            emitters: 3,
            olds: 4,
            olds_by_tgid: None,
            stats: 5,
            scratch: 6,
            procs: None,
            reads: None,
            totals: None,
            cgroups: None,
        };
        crate::perf::bpf::insn::calls(&generate(&spec, &maps).expect("assembles"))
    }

    #[test]
    fn the_name_is_loaded_from_the_task_when_its_offset_is_known() {
        let (btf, comm) = (Helper::GetCurrentTaskBtf, Helper::GetCurrentComm);
        let loaded = calls(Some(1752));
        assert!(loaded.contains(&btf));
        assert!(!loaded.contains(&comm));
        let copied = calls(None);
        assert!(copied.contains(&comm));
        assert!(!copied.contains(&btf));
    }

    #[test]
    fn the_running_kernels_offset_is_found_when_it_has_btf() {
        match comm_offset() {
            Some(off) => assert!(off > 0, "comm is not task_struct's first field"),
            None => eprintln!("SKIP: no usable {} here", Btf::VMLINUX),
        }
        match process_start() {
            Some(s) => assert!(s.leader > 0 && s.start_time > 0 && s.exec_id > 0),
            None => eprintln!("SKIP: no usable {} here", Btf::VMLINUX),
        }
    }
}
