//! A test-only interpreter for the programs built here, with the kernel played by a [`FakeKernel`]: its
//! maps (arrays, hashes that refuse or forget when full, program arrays a tail call enters, ring buffers
//! that run out of room), the task (pid, name, `task_struct`), the clock, the CPU, the trap's registers,
//! the memory a probe read may reach and the stacks `bpf_get_stack` gives are all a test's to set. So a
//! generated program's behaviour is checked offline, on the bytes it writes, and the live tests only
//! check what needs the kernel (the verifier's word included).
//!
//! The one kernel function the programs call, `bpf_cast_to_kern_ctx` (by the id [`KERN_CTX_ID`]), gives
//! the kernel's own context: the registers' address, the sample data's, and at [`EVENT_OFFSET`] the
//! event whose handler runs the program ([`FakeKernel::event`]).
//!
//! Memory is a list of regions, region `i` at `(i + 1) << 32`: the stack, the context, the task, a test's
//! own scratch memory, the kernel's context, then one per map value (an array's values in one region). An access outside a
//! region, or across two array values, panics: the verifier would have refused the program.

use crate::perf::bpf::layout;
use std::collections::BTreeMap;

use super::emit::{self, EmitMaps};
use super::hit::HitMaps;
use super::hit_set::PROCS_MAX;
use super::insn::PSEUDO_KFUNC_CALL;
use super::insn::{Insn, ALU64, ATOMIC, DW, H, JMP, LD, LDX, PSEUDO_MAP_FD, PSEUDO_MAP_VALUE};
use super::insn::{ST, STX, W};
use super::kernel::{ctx, Helper, MapType, CURRENT_CPU, EEXIST, NOEXIST, USER_STACK};
use super::program::{OLD_ENTRY, OLD_SLOT};
use super::task::ProcessStart;
use super::totals::{self, TotalsMaps};
use super::OLDS_MAX;

const STACK: usize = 0;
const CTX: usize = 1;
const TASK: usize = 2;
const HEAP: usize = 3;
const KERN_CTX: usize = 4;
/// The machine's BTF id of `bpf_cast_to_kern_ctx`.
pub const KERN_CTX_ID: i32 = 4242;
/// Where the machine's `struct bpf_perf_event_data_kern` keeps `event` (after `regs` and `data`).
pub const EVENT_OFFSET: i16 = 16;
/// What `ld_map_fd` loads: this plus the map's descriptor, a value no region has.
const MAP_TAG: u64 = 0x7fff_0000_0000_0000;
/// Bytes of the machine's `task_struct`; its name is at [`COMM_OFFSET`].
const TASK_LEN: usize = 4096;
/// Where the machine's task keeps its name (give a hit program's spec this `comm_offset`).
pub const COMM_OFFSET: i16 = 1752;
/// Where the machine's task points to its group leader (itself) and keeps its process's start time and
/// its exec count (give a hit program's spec this `process_start`).
pub const PROCESS_START: ProcessStart = ProcessStart {
    leader: 1200,
    start_time: 1400,
    exec_id: 1600,
};
/// Entries of the machine's by-tgid olds array: tgids from here on go to the hash.
pub const BY_TGID_ENTRIES: usize = 1000;
const ENOENT: i64 = -2;
const E2BIG: i64 = -7;
const EAGAIN: i64 = -11;
const EINVAL: i64 = -22;
const EFAULT: i64 = -14;

fn base(region: usize) -> u64 {
    (region as u64 + 1) << 32
}

/// Memory the program may reach: bytes, and the size of each value in them (an array's; else its length).
struct Region {
    bytes: Vec<u8>,
    stride: usize,
}

/// One map's entries.
enum Entries {
    /// Every value, in one region.
    Array(usize),
    /// Key to region, in the order inserted (an LRU hash forgets the first when full).
    Hash(Vec<(Vec<u8>, usize)>),
    Progs(BTreeMap<u32, Vec<Insn>>),
    /// Records written, with the flags each was written with.
    Ring(Vec<(Vec<u8>, u64)>),
    Perf,
}

struct Map {
    kind: MapType,
    key: usize,
    value: usize,
    max: usize,
    entries: Entries,
}

/// The world one run of a program sees.
pub struct FakeKernel {
    pub pid_tgid: u64,
    pub comm: [u8; 16],
    /// When the task's process started (its leader's `start_time`): another value is another process.
    pub start_time: u64,
    /// The task's `self_exec_id`: one more for each program it has run.
    pub exec_id: u64,
    /// `bpf_get_current_cgroup_id`.
    pub cgroup_id: u64,
    /// The breakpoint's address and whether the writer was in user space.
    pub addr: u64,
    pub user_mode: bool,
    /// The bytes at `addr` (little-endian integer), or `None` when the read fails.
    pub memory: Option<u64>,
    /// The trap's registers (`cs` is set from `user_mode`).
    pub regs: [u64; 21],
    /// Other memory a probe read reaches: (address, bytes). User memory is read only with
    /// `bpf_probe_read_user`, kernel memory only with `_kernel`.
    pub readable: Vec<(u64, Vec<u8>)>,
    /// What `bpf_get_stack` gives: the kernel's stack, the user's.
    pub kernel_stack: Vec<u64>,
    pub user_stack: Vec<u64>,
    /// `bpf_ktime_get_ns`, `bpf_get_smp_processor_id`.
    pub now: u64,
    pub cpu: u32,
    /// Bytes every ring buffer still has room for; a record that does not fit is refused.
    pub ring_room: usize,
    /// Records the program wrote with `bpf_perf_event_output`.
    pub output: Vec<Vec<u8>>,
    /// Which read helper the last run read the breakpoint's address with.
    pub read_with: Option<Helper>,
    /// The helpers the last run called, in order.
    pub calls: Vec<Helper>,
    /// The writer's cgroup and its ancestors, by id: what `bpf_current_task_under_cgroup` tests a cgroup
    /// array's entry against (whose value here is the cgroup's id, where the kernel's holds the cgroup).
    pub cgroups: Vec<u64>,
    /// The event whose handler runs the program: the kernel context's `event` (a kernel address).
    pub event: u64,
    /// The hit program's olds hash, by-tgid array and stats.
    olds: i32,
    by_tgid: Option<i32>,
    stats: i32,
    maps: BTreeMap<i32, Map>,
    regions: Vec<Region>,
}

impl FakeKernel {
    /// A machine without maps: a task of pid 100, tid 101, named `writer`, a user-mode trap at `addr`.
    fn bare(addr: u64) -> FakeKernel {
        let region = |len| Region {
            bytes: vec![0; len],
            stride: len,
        };
        FakeKernel {
            pid_tgid: (100 << 32) | 101,
            comm: *b"writer\0\0\0\0\0\0\0\0\0\0",
            start_time: 5_000_000,
            exec_id: 3,
            cgroup_id: 0x2a51,
            addr,
            user_mode: true,
            memory: Some(0),
            regs: [0; 21],
            readable: Vec::new(),
            kernel_stack: Vec::new(),
            user_stack: Vec::new(),
            now: 1_000_000_000,
            cpu: 0,
            ring_room: usize::MAX,
            output: Vec::new(),
            read_with: None,
            calls: Vec::new(),
            cgroups: Vec::new(),
            event: 0xffff_8880_0a00_0000,
            olds: -1,
            by_tgid: None,
            stats: -1,
            maps: BTreeMap::new(),
            regions: vec![
                region(512),
                region(ctx::LEN),
                region(TASK_LEN),
                region(0),
                region(EVENT_OFFSET as usize + 8),
            ],
        }
    }

    /// A machine whose programs write through the `BPF_OUTPUT` events of the perf event array `outputs`
    /// (their records land in [`FakeKernel::output`]), a trap at `addr`.
    pub fn with_outputs(outputs: i32, addr: u64) -> FakeKernel {
        let mut m = FakeKernel::bare(addr);
        m.declare(outputs, MapType::PerfEventArray, (4, 4), 64);
        m
    }

    /// The hit program's machine ([`super::hit`]): its maps declared, the `reads` flag set, the
    /// by-tgid generation 1, and an emitter for CPU 0 writing into the ring buffer `ring` (a descriptor
    /// no other map has), waking the reader every `wake_bytes`.
    pub fn for_hit(maps: &HitMaps, addr: u64, ring: i32, wake_bytes: u32) -> FakeKernel {
        let mut m = FakeKernel::bare(addr);
        m.declare(maps.emitters, MapType::ProgArray, (4, 4), 64);
        m.declare_olds(maps.olds, maps.olds_by_tgid);
        m.declare(
            maps.stats,
            MapType::PercpuArray,
            (4, 8),
            layout::STATS as usize,
        );
        m.stats = maps.stats;
        let scratch = layout::SCRATCH_LEN as usize;
        m.declare(maps.scratch, MapType::PercpuArray, (4, scratch), 1);
        if let Some(procs) = maps.procs {
            m.declare(procs, MapType::Hash, (4, 4), PROCS_MAX as usize);
        }
        if let Some(reads) = maps.reads {
            m.declare(reads, MapType::Array, (4, 4), 1);
            m.set(reads, &0u32.to_le_bytes(), &1u32.to_le_bytes());
        }
        if let Some(t) = &maps.totals {
            m.declare_totals(t);
        }
        if let Some((cgroups, entries)) = maps.cgroups {
            m.declare(cgroups, MapType::CgroupArray, (4, 8), entries as usize);
        }
        if maps.olds_by_tgid.is_some() {
            m.set_generation(1);
        }
        m.declare(ring, MapType::Ringbuf, (0, 0), 0);
        m.add_emitter(maps, ring, wake_bytes);
        m
    }

    /// Builds the emitter of CPU `self.cpu` for `maps`' program, writing into `ring`, and enters it in
    /// the emitters array.
    pub fn add_emitter(&mut self, maps: &HitMaps, ring: i32, wake_bytes: u32) {
        let emit_maps = EmitMaps {
            scratch: maps.scratch,
            lost: (maps.stats, layout::STAT_LOST),
            ring,
        };
        let prog = emit::generate(&emit_maps, wake_bytes).expect("the emitter assembles");
        let Some(Map {
            entries: Entries::Progs(progs),
            ..
        }) = self.maps.get_mut(&maps.emitters)
        else {
            panic!("no program array {}", maps.emitters);
        };
        progs.insert(self.cpu, prog);
    }

    fn declare_olds(&mut self, olds: i32, by_tgid: Option<i32>) {
        self.declare(
            olds,
            MapType::LruHash,
            (8, OLD_ENTRY as usize),
            OLDS_MAX as usize,
        );
        self.olds = olds;
        if let Some(array) = by_tgid {
            let slot = OLD_SLOT as usize;
            self.declare(array, MapType::Array, (4, slot), BY_TGID_ENTRIES);
        }
        self.by_tgid = by_tgid;
    }

    fn declare_totals(&mut self, t: &TotalsMaps) {
        let (key, value) = (
            crate::perf::hit_record::CHAIN_KEY as usize,
            totals::CHAIN_VALUE as usize,
        );
        self.declare(
            t.chains,
            MapType::Hash,
            (key, value),
            totals::CHAINS_MAX as usize,
        );
        let key = totals::COUNT_KEY as usize;
        self.declare(
            t.counts,
            MapType::Hash,
            (key, 8),
            totals::COUNTS_MAX as usize,
        );
        if let Some(values) = t.values {
            self.declare(values, MapType::Hash, (8, 8), totals::VALUES_MAX as usize);
        }
        self.declare(
            t.stats,
            MapType::PercpuArray,
            (4, 8),
            totals::STATS as usize,
        );
        if let Some((limit, _)) = t.limit {
            self.declare(limit, MapType::Array, (4, 8), 1);
        }
    }

    /// Declares map `fd`: `(key, value)` bytes, `max` entries (the one CPU's, for a per-CPU array).
    pub fn declare(&mut self, fd: i32, kind: MapType, (key, value): (usize, usize), max: usize) {
        let entries = match kind {
            MapType::Array | MapType::PercpuArray | MapType::CgroupArray => {
                self.regions.push(Region {
                    bytes: vec![0; value * max],
                    stride: value,
                });
                Entries::Array(self.regions.len() - 1)
            }
            MapType::Hash | MapType::LruHash => Entries::Hash(Vec::new()),
            MapType::ProgArray => Entries::Progs(BTreeMap::new()),
            MapType::Ringbuf => Entries::Ring(Vec::new()),
            MapType::PerfEventArray => Entries::Perf,
        };
        let map = Map {
            kind,
            key,
            value,
            max,
            entries,
        };
        assert!(
            self.maps.insert(fd, map).is_none(),
            "map {fd} declared twice"
        );
    }

    /// Map `fd`'s value for `key`, as the tracer would read it.
    pub fn get(&self, fd: i32, key: &[u8]) -> Option<Vec<u8>> {
        let region = self.find(fd, key)?;
        let map = &self.maps[&fd];
        let r = &self.regions[region.0];
        Some(r.bytes[region.1..region.1 + map.value].to_vec())
    }

    /// Map `fd`'s u64 at array index `index`, or under u64 key `index` for a hash.
    pub fn word(&self, fd: i32, index: u64) -> Option<u64> {
        let key = match self.maps[&fd].key {
            4 => (index as u32).to_le_bytes().to_vec(),
            _ => index.to_le_bytes().to_vec(),
        };
        let v = self.get(fd, &key)?;
        Some(u64::from_le_bytes(v[..8].try_into().ok()?))
    }

    /// Map `fd` holds at most `max` entries from now on (a test fills a hash without writing all of them).
    pub fn limit(&mut self, fd: i32, max: usize) {
        self.maps.get_mut(&fd).expect("a declared map").max = max;
    }

    /// Sets map `fd`'s value for `key`, as the tracer would.
    pub fn set(&mut self, fd: i32, key: &[u8], value: &[u8]) {
        assert_eq!(self.update(fd, key, value, 0), 0, "update of map {fd}");
    }

    /// Every (key, value) of hash `fd`, in the order inserted.
    pub fn entries(&self, fd: i32) -> Vec<(Vec<u8>, Vec<u8>)> {
        let map = &self.maps[&fd];
        let Entries::Hash(entries) = &map.entries else {
            panic!("map {fd} is not a hash");
        };
        entries
            .iter()
            .map(|(k, r)| (k.clone(), self.regions[*r].bytes.clone()))
            .collect()
    }

    /// The hits counted in hash `counts` with the CPU's pending ones in scratch entry `scratch` added, as the
    /// tracer reads them ([`totals::pending`], [`totals::Counted::add_pending`]), in the order inserted.
    pub fn counts(&self, counts: i32, scratch: i32) -> Vec<(totals::CountKey, u64)> {
        let mut counted = totals::Counted::default();
        for (k, v) in self.entries(counts) {
            let key = totals::CountKey::parse(&k).expect("a counts key");
            counted
                .counts
                .push((key, u64::from_le_bytes(v[..8].try_into().unwrap())));
        }
        let entry = self
            .get(scratch, &0u32.to_le_bytes())
            .expect("the scratch entry");
        if let Some((key, n)) = totals::pending(&entry) {
            counted.add_pending(key, n);
        }
        counted.counts
    }

    /// The records ring buffer `fd` took, with the flags each came with.
    pub fn ring(&self, fd: i32) -> &[(Vec<u8>, u64)] {
        match &self.maps[&fd].entries {
            Entries::Ring(records) => records,
            _ => panic!("map {fd} is not a ring buffer"),
        }
    }

    /// `len` zeroed bytes the program may read and write (a test lays a record out there); their address.
    pub fn scratch(&mut self, len: usize) -> u64 {
        self.regions[HEAP] = Region {
            bytes: vec![0; len],
            stride: len,
        };
        base(HEAP)
    }

    /// Writes `bytes` at `addr` (in [`FakeKernel::scratch`]'s memory, the stack or the context).
    pub fn write(&mut self, addr: u64, bytes: &[u8]) {
        self.mem(addr, bytes.len()).copy_from_slice(bytes);
    }

    /// The olds hash's value for `key`.
    pub fn old(&self, key: u64) -> Option<u64> {
        self.word(self.olds, key)
    }

    /// Sets the by-tgid array's current generation, as the tracer does at load and to forget every old
    /// value (a machine without one has nothing to set).
    pub fn set_generation(&mut self, generation: u64) {
        let Some(array) = self.by_tgid else {
            return;
        };
        let mut v = [0u8; OLD_SLOT as usize];
        v[8..16].copy_from_slice(&generation.to_le_bytes());
        self.set(array, &0u32.to_le_bytes(), &v);
    }

    /// Hits the program dropped (`stats` slot 0).
    pub fn dropped(&self) -> u64 {
        self.stat(0)
    }

    /// The program's `stats` slot `index`.
    pub fn stat(&self, index: u32) -> u64 {
        self.word(self.stats, u64::from(index)).unwrap_or(0)
    }

    /// (region, offset) of map `fd`'s value for `key`.
    fn find(&self, fd: i32, key: &[u8]) -> Option<(usize, usize)> {
        let map = self.maps.get(&fd).unwrap_or_else(|| panic!("no map {fd}"));
        match &map.entries {
            Entries::Array(region) => {
                let index = u32::from_le_bytes(key[..4].try_into().ok()?) as usize;
                (index < map.max).then_some((*region, index * map.value))
            }
            Entries::Hash(entries) => entries
                .iter()
                .find(|(k, _)| k[..] == key[..map.key])
                .map(|(_, r)| (*r, 0)),
            _ => panic!("lookup in map {fd} of type {:?}", map.kind),
        }
    }

    /// `bpf_map_update_elem`: 0, or the kernel's error.
    fn update(&mut self, fd: i32, key: &[u8], value: &[u8], flags: u64) -> i64 {
        let (key_len, value_len, max) = {
            let map = &self.maps[&fd];
            (map.key, map.value, map.max)
        };
        let value = &value[..value_len];
        if let Some((region, off)) = self.find(fd, key) {
            if flags == NOEXIST as u64 {
                return i64::from(EEXIST);
            }
            self.regions[region].bytes[off..off + value_len].copy_from_slice(value);
            return 0;
        }
        let kind = self.maps[&fd].kind;
        if !matches!(kind, MapType::Hash | MapType::LruHash) {
            return E2BIG;
        }
        self.regions.push(Region {
            bytes: value.to_vec(),
            stride: value_len,
        });
        let region = self.regions.len() - 1;
        let Some(Map {
            entries: Entries::Hash(entries),
            ..
        }) = self.maps.get_mut(&fd)
        else {
            unreachable!("a hash");
        };
        if entries.len() >= max {
            if kind != MapType::LruHash {
                return E2BIG;
            }
            entries.remove(0);
        }
        entries.push((key[..key_len].to_vec(), region));
        0
    }

    fn mem(&mut self, addr: u64, len: usize) -> &mut [u8] {
        let region = (addr >> 32) as usize;
        let off = (addr & 0xffff_ffff) as usize;
        let Some(r) = region.checked_sub(1).and_then(|i| self.regions.get_mut(i)) else {
            panic!("access to unmapped 0x{addr:x}");
        };
        assert!(
            off + len <= r.bytes.len() && off % r.stride + len <= r.stride,
            "access of {len} bytes at 0x{addr:x}, past its value"
        );
        &mut r.bytes[off..off + len]
    }

    fn load(&mut self, addr: u64, len: usize) -> u64 {
        let mut b = [0u8; 8];
        b[..len].copy_from_slice(self.mem(addr, len));
        u64::from_le_bytes(b)
    }

    fn store(&mut self, addr: u64, len: usize, v: u64) {
        let b = v.to_le_bytes();
        self.mem(addr, len).copy_from_slice(&b[..len]);
    }

    fn bytes(&mut self, addr: u64, len: usize) -> Vec<u8> {
        self.mem(addr, len).to_vec()
    }

    /// `bpf_probe_read_user`/`_kernel` of `len` bytes at `src` into `dst`: 0, or -EFAULT with `dst`
    /// zeroed, as the kernel does.
    fn probe_read(&mut self, helper: Helper, (dst, len, src): (u64, usize, u64)) -> i64 {
        let user = helper == Helper::ProbeReadUser;
        let found = if src == self.addr {
            self.read_with = Some(helper);
            self.memory.map(|v| v.to_le_bytes()[..len.min(8)].to_vec())
        } else if (src < 1 << 63) == user {
            self.readable.iter().find_map(|(at, bytes)| {
                let from = src.checked_sub(*at)? as usize;
                bytes.get(from..from + len).map(<[u8]>::to_vec)
            })
        } else {
            None
        };
        match found.filter(|b| b.len() == len) {
            Some(b) => {
                self.mem(dst, len).copy_from_slice(&b);
                0
            }
            None => {
                self.mem(dst, len).fill(0);
                EFAULT
            }
        }
    }

    /// Calls `helper`; `Some(program)` when a tail call enters one.
    fn call(&mut self, helper: Helper, r: &mut [u64; 11]) -> Option<Vec<Insn>> {
        self.calls.push(helper);
        let map = |r: u64| (r - MAP_TAG) as i32;
        let mut entered = None;
        let ret: i64 = match helper {
            Helper::GetCurrentPidTgid => self.pid_tgid as i64,
            Helper::GetCurrentComm => {
                let comm = self.comm;
                let len = r[2] as usize;
                self.mem(r[1], len).copy_from_slice(&comm[..len]);
                0
            }
            Helper::GetCurrentTask | Helper::GetCurrentTaskBtf => {
                let task = base(TASK);
                let comm = self.comm;
                self.write(task + COMM_OFFSET as u64, &comm);
                self.write(task + PROCESS_START.leader as u64, &task.to_le_bytes());
                let start = self.start_time.to_le_bytes();
                self.write(task + PROCESS_START.start_time as u64, &start);
                let exec = self.exec_id.to_le_bytes();
                self.write(task + PROCESS_START.exec_id as u64, &exec);
                task as i64
            }
            Helper::CurrentTaskUnderCgroup => {
                let fd = map(r[1]);
                assert_eq!(self.maps[&fd].kind, MapType::CgroupArray, "map {fd}");
                match self.word(fd, r[2]) {
                    None => EINVAL,
                    Some(0) => EAGAIN,
                    Some(id) => i64::from(self.cgroups.contains(&id)),
                }
            }
            Helper::KtimeGetNs => self.now as i64,
            Helper::GetCurrentCgroupId => self.cgroup_id as i64,
            Helper::GetSmpProcessorId => i64::from(self.cpu),
            Helper::ProbeReadUser | Helper::ProbeReadKernel => {
                self.probe_read(helper, (r[1], r[2] as usize, r[3]))
            }
            Helper::MapLookupElem => {
                let fd = map(r[1]);
                let key_len = self.maps[&fd].key;
                let key = self.bytes(r[2], key_len);
                self.find(fd, &key)
                    .map_or(0, |(region, off)| (base(region) + off as u64) as i64)
            }
            Helper::MapUpdateElem => {
                let fd = map(r[1]);
                let (key_len, value_len) = (self.maps[&fd].key, self.maps[&fd].value);
                let key = self.bytes(r[2], key_len);
                let value = self.bytes(r[3], value_len);
                self.update(fd, &key, &value, r[4])
            }
            Helper::MapDeleteElem => {
                let fd = map(r[1]);
                let key_len = self.maps[&fd].key;
                let key = self.bytes(r[2], key_len);
                match self.maps.get_mut(&fd).map(|m| &mut m.entries) {
                    Some(Entries::Hash(entries)) => {
                        let before = entries.len();
                        entries.retain(|(k, _)| *k != key);
                        if entries.len() < before {
                            0
                        } else {
                            ENOENT
                        }
                    }
                    _ => panic!("delete from map {fd}"),
                }
            }
            Helper::PerfEventOutput => {
                assert_eq!(r[1], base(CTX), "the context is passed on");
                assert!(matches!(self.maps[&map(r[2])].entries, Entries::Perf));
                assert_eq!(r[3], CURRENT_CPU, "BPF_F_CURRENT_CPU");
                let rec = self.bytes(r[4], r[5] as usize);
                self.output.push(rec);
                0
            }
            Helper::GetStack => {
                assert_eq!(r[1], base(CTX), "the context is passed on");
                let stack = match r[4] as i32 & USER_STACK {
                    0 => &self.kernel_stack,
                    _ => &self.user_stack,
                };
                let words: Vec<u8> = stack.iter().flat_map(|w| w.to_le_bytes()).collect();
                let n = words.len().min(r[3] as usize);
                self.mem(r[2], n).copy_from_slice(&words[..n]);
                n as i64
            }
            Helper::RingbufOutput => {
                let rec = self.bytes(r[2], r[3] as usize);
                if rec.len() > self.ring_room {
                    EAGAIN
                } else {
                    self.ring_room -= rec.len();
                    match self.maps.get_mut(&map(r[1])).map(|m| &mut m.entries) {
                        Some(Entries::Ring(records)) => records.push((rec, r[4])),
                        _ => panic!("ringbuf output into map {}", map(r[1])),
                    }
                    0
                }
            }
            Helper::TailCall => {
                assert_eq!(r[1], base(CTX), "the context is passed on");
                let index = r[3] as u32;
                match &self.maps[&map(r[2])].entries {
                    Entries::Progs(progs) => entered = progs.get(&index).cloned(),
                    _ => panic!("tail call through map {}", map(r[2])),
                }
                ENOENT
            }
        };
        r[0] = ret as u64;
        // Calls clobber r1-r5.
        for reg in r.iter_mut().take(6).skip(1) {
            *reg = 0xdead_beef;
        }
        entered
    }

    /// Runs `prog` once, as the kernel would at one hit (a tail call included); returns r0.
    pub fn run(&mut self, prog: &[Insn]) -> u64 {
        let mut prog = prog.to_vec();
        self.regions[CTX].bytes.fill(0);
        // What the stack held before is not the program's: a read of a slot it did not write shows.
        self.regions[STACK].bytes.fill(0xa5);
        let mut regs = self.regs;
        regs[17] = if self.user_mode { 0x33 } else { 0x10 };
        for (i, w) in regs.iter().enumerate() {
            self.store(base(CTX) + 8 * i as u64, 8, *w);
        }
        self.store(base(CTX) + ctx::ADDR as u64, 8, self.addr);
        self.store(base(KERN_CTX), 8, base(CTX));
        self.store(base(KERN_CTX) + EVENT_OFFSET as u64, 8, self.event);
        self.read_with = None;
        self.calls.clear();
        let mut r = [0u64; 11];
        r[1] = base(CTX);
        r[10] = base(STACK) + 512;
        let mut pc = 0usize;
        for _ in 0..100_000 {
            let i = prog[pc];
            pc += 1;
            let class = i.code & 0x07;
            let (dst, src) = (i.dst as usize, i.src as usize);
            let imm = i.imm as i64 as u64;
            let size = |code: u8| match code & 0x18 {
                W => 4,
                H => 2,
                DW => 8,
                _ => 1,
            };
            match class {
                ALU64 => {
                    let b = if i.code & 0x08 != 0 { r[src] } else { imm };
                    let a = r[dst];
                    r[dst] = match i.code & 0xf0 {
                        0x00 => a.wrapping_add(b),
                        0x10 => a.wrapping_sub(b),
                        0x20 => a.wrapping_mul(b),
                        0x40 => a | b,
                        0x50 => a & b,
                        0x60 => a << (b & 63),
                        0x70 => a >> (b & 63),
                        0xa0 => a ^ b,
                        0xb0 => b,
                        0xc0 => ((a as i64) >> (b & 63)) as u64,
                        op => panic!("alu op 0x{op:x}"),
                    };
                }
                LD => {
                    let hi = prog[pc].imm as u32 as u64;
                    pc += 1;
                    let lo = i.imm as u32 as u64;
                    r[dst] = match i.src {
                        PSEUDO_MAP_FD => MAP_TAG + lo,
                        PSEUDO_MAP_VALUE => match self.maps[&(lo as i32)].entries {
                            Entries::Array(region) => base(region) + hi,
                            _ => panic!("the value of map {lo}, not an array"),
                        },
                        _ => lo | (hi << 32),
                    };
                }
                LDX => r[dst] = self.load(r[src].wrapping_add(i.off as i64 as u64), size(i.code)),
                STX if i.code & 0xe0 == ATOMIC => {
                    // BPF_ADD, with BPF_FETCH (1) the old value back in src.
                    assert!(i.imm == 0 || i.imm == 1, "only BPF_ADD");
                    let (at, len) = (dst_addr(&r, &i), size(i.code));
                    let old = self.load(at, len);
                    self.store(at, len, old.wrapping_add(r[src]));
                    if i.imm == 1 {
                        r[src] = old;
                    }
                }
                STX => self.store(dst_addr(&r, &i), size(i.code), r[src]),
                ST => self.store(dst_addr(&r, &i), size(i.code), imm),
                JMP => match i.code & 0xf0 {
                    0x80 if i.src == PSEUDO_KFUNC_CALL => {
                        assert_eq!(i.imm, KERN_CTX_ID, "the one kfunc the machine has");
                        assert_eq!(r[1], base(CTX), "the program's own context is cast");
                        r[0] = base(KERN_CTX);
                        for reg in r.iter_mut().take(6).skip(1) {
                            *reg = 0xdead_beef;
                        }
                    }
                    0x80 => {
                        let helper =
                            Helper::from_id(i.imm).unwrap_or_else(|| panic!("helper {}", i.imm));
                        if let Some(next) = self.call(helper, &mut r) {
                            prog = next;
                            pc = 0;
                            r[1] = base(CTX);
                        }
                    }
                    0x90 => return r[0],
                    0x00 => pc = (pc as i64 + i.off as i64) as usize,
                    op => {
                        let b = if i.code & 0x08 != 0 { r[src] } else { imm };
                        let a = r[dst];
                        let taken = match op {
                            0x10 => a == b,
                            0x20 => a > b,
                            0x30 => a >= b,
                            0x40 => a & b != 0,
                            0x50 => a != b,
                            0x60 => (a as i64) > (b as i64),
                            0x70 => (a as i64) >= (b as i64),
                            0xa0 => a < b,
                            0xb0 => a <= b,
                            0xc0 => (a as i64) < (b as i64),
                            0xd0 => (a as i64) <= (b as i64),
                            _ => panic!("jump op 0x{op:x}"),
                        };
                        if taken {
                            pc = (pc as i64 + i.off as i64) as usize;
                        }
                    }
                },
                _ => panic!("class {class}"),
            }
        }
        panic!("the program did not finish in 100,000 steps");
    }
}

fn dst_addr(r: &[u64; 11], i: &Insn) -> u64 {
    r[i.dst as usize].wrapping_add(i.off as i64 as u64)
}
