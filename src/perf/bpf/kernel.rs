//! The kernel's BPF interface as the generators and loaders here use it, as typed values: the map and
//! program types (`enum bpf_map_type`, `enum bpf_prog_type`), the helper functions (`enum bpf_func_id`),
//! the flags they take, and where a perf-event program's context keeps what it reads. One place for the
//! numbers, so no program spells one of its own.

/// `enum bpf_map_type`: the kinds of map created here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum MapType {
    Hash = 1,
    Array = 2,
    ProgArray = 3,
    PerfEventArray = 4,
    PercpuArray = 6,
    /// cgroup directories' descriptors, which `bpf_current_task_under_cgroup` tests the writer against.
    CgroupArray = 8,
    /// A hash that forgets its least recently used key rather than refuse a new one when full.
    LruHash = 9,
    Ringbuf = 27,
}

/// `enum bpf_prog_type`: the kinds of program loaded here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ProgType {
    /// A kprobe's or uprobe's program, its context the probed task's `struct pt_regs`.
    Kprobe = 2,
    /// A classic tracepoint's program, its context the event's record.
    Tracepoint = 5,
    /// A perf event's overflow program: the breakpoints', the cpu-clock's.
    PerfEvent = 7,
    /// A raw tracepoint's program, its context the tracepoint's arguments.
    RawTracepoint = 17,
}

/// `enum bpf_func_id`: the helpers the programs call. A call takes its arguments in r1-r5, returns in r0
/// and clobbers r1-r5.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Helper {
    MapLookupElem = 1,
    MapUpdateElem = 2,
    MapDeleteElem = 3,
    /// CLOCK_MONOTONIC, the clock the breakpoint rings stamp hits with.
    KtimeGetNs = 5,
    GetSmpProcessorId = 8,
    TailCall = 12,
    GetCurrentPidTgid = 14,
    GetCurrentComm = 16,
    PerfEventOutput = 25,
    GetCurrentTask = 35,
    /// 1 when the current task is in the cgroup at an index of a `CgroupArray` or below it, 0 when not.
    CurrentTaskUnderCgroup = 37,
    GetStack = 67,
    /// The current task's cgroup (v2) id: the inode number of its cgroup's directory.
    GetCurrentCgroupId = 80,
    ProbeReadUser = 112,
    ProbeReadKernel = 113,
    RingbufOutput = 130,
    GetCurrentTaskBtf = 158,
}

impl Helper {
    /// The helper of id `id`, if it is one of these (the offline interpreter decodes calls with it).
    #[cfg(test)]
    pub fn from_id(id: i32) -> Option<Helper> {
        use Helper::*;
        [
            MapLookupElem,
            MapUpdateElem,
            MapDeleteElem,
            KtimeGetNs,
            GetSmpProcessorId,
            TailCall,
            GetCurrentPidTgid,
            GetCurrentComm,
            PerfEventOutput,
            GetCurrentTask,
            CurrentTaskUnderCgroup,
            GetStack,
            GetCurrentCgroupId,
            ProbeReadUser,
            ProbeReadKernel,
            RingbufOutput,
            GetCurrentTaskBtf,
        ]
        .into_iter()
        .find(|h| *h as i32 == id)
    }
}

/// `BPF_F_CURRENT_CPU`: the `PERF_EVENT_ARRAY` entry of the CPU the program runs on.
pub const CURRENT_CPU: u64 = 0xffff_ffff;
/// `BPF_NOEXIST`: a map update that only inserts.
pub const NOEXIST: i32 = 1;
/// `-EEXIST`: what such an update returns when the key is there.
pub const EEXIST: i32 = -17;
/// `BPF_F_USER_STACK`: `bpf_get_stack` walks the user stack.
pub const USER_STACK: i32 = 1 << 8;
/// `BPF_RB_NO_WAKEUP`, `BPF_RB_FORCE_WAKEUP`: `bpf_ringbuf_output`'s wake-up flags.
pub const RB_NO_WAKEUP: i32 = 1;
pub const RB_FORCE_WAKEUP: i32 = 2;

/// `struct pt_regs` on x86-64, by word: a perf-event program's context starts with it, a uprobe
/// program's context is it, and a hit record with REGS_KNOWN keeps it.
pub mod pt_regs {
    pub const R15: usize = 0;
    pub const R14: usize = 1;
    pub const R13: usize = 2;
    pub const R12: usize = 3;
    pub const BP: usize = 4;
    pub const BX: usize = 5;
    pub const R11: usize = 6;
    pub const R10: usize = 7;
    pub const R9: usize = 8;
    pub const R8: usize = 9;
    pub const AX: usize = 10;
    pub const CX: usize = 11;
    pub const DX: usize = 12;
    pub const SI: usize = 13;
    pub const DI: usize = 14;
    pub const ORIG_AX: usize = 15;
    pub const IP: usize = 16;
    pub const CS: usize = 17;
    pub const FLAGS: usize = 18;
    pub const SP: usize = 19;
    pub const SS: usize = 20;
    /// Its size in words.
    pub const WORDS: usize = 21;

    /// Word `word`'s offset in bytes, as a program's load takes it.
    pub const fn offset(word: usize) -> i16 {
        (8 * word) as i16
    }
}

/// `struct bpf_perf_event_data` on x86-64: [`pt_regs`], `sample_period`, then `addr`, which the kernel
/// fills with the breakpoint's address (also after `--control` moved it).
pub mod ctx {
    use super::pt_regs::{self, offset};

    /// `pt_regs.bp`: the frame pointer at the trap.
    pub const BP: i16 = offset(pt_regs::BP);
    /// `pt_regs.ip`: the trap ip.
    pub const IP: i16 = offset(pt_regs::IP);
    /// `pt_regs.cs`: its low two bits are the privilege level the writer ran at (3: user space).
    pub const CS: i16 = offset(pt_regs::CS);
    /// The breakpoint's address (after `sample_period`).
    pub const ADDR: i16 = offset(pt_regs::WORDS + 1);
    /// The context's size.
    pub const LEN: usize = ADDR as usize + 8;
}

/// `__USER_CS`: the code segment of a 64-bit task in user mode (a 32-bit one's is `__USER32_CS`).
pub const USER_CS: i32 = 0x33;
