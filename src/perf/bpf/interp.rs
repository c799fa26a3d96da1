//! A test-only interpreter for the instructions [`super::insn`] builds, with the kernel helpers the value
//! program calls played by a [`Machine`]: so the generated program's behaviour (every operator, width,
//! sign, filter, unknown old value) is checked offline against a plain Rust reading of the condition, and
//! the live tests only check what needs the kernel.

use std::collections::HashMap;

use super::insn::{Insn, ALU64, ATOMIC, DW, H, JMP, LD, LDX, PSEUDO_MAP_FD, ST, STX, W};
use super::kernel::{ctx, Helper};
use super::program::Maps;

const STACK: u64 = 0x1_0000_0000;
const CTX: u64 = 0x2_0000_0000;
const OLDS: u64 = 0x3_0000_0000;
const STATS: u64 = 0x4_0000_0000;
const MAP_TAG: u64 = 0x5_0000_0000;
const BY_TGID: u64 = 0x6_0000_0000;
const HEAP: u64 = 0x7_0000_0000;
/// Entries of the machine's by-tgid olds array: tgids from here on go to the hash.
pub const BY_TGID_ENTRIES: usize = 1000;

/// The world one run of the program sees.
pub struct Machine {
    pub maps: Maps,
    pub pid_tgid: u64,
    pub comm: [u8; 16],
    /// The breakpoint's address and whether the writer was in user space.
    pub addr: u64,
    pub user_mode: bool,
    /// The bytes at `addr` (little-endian integer), or `None` when the read fails.
    pub memory: Option<u64>,
    /// The olds map: key to value, and each key's slot.
    olds: HashMap<u64, usize>,
    old_slots: Vec<[u8; 8]>,
    /// The by-tgid olds array's values, `{old, generation}` (see [`super::program::Olds::by_tgid`]).
    by_tgid: Vec<[u8; 16]>,
    stats: [u8; 8],
    /// Records the program wrote with `bpf_perf_event_output`.
    pub output: Vec<Vec<u8>>,
    /// Which read helper the last run used.
    pub read_with: Option<Helper>,
    stack: [u8; 512],
    ctx: [u8; 184],
    /// Memory a test lays out itself ([`Machine::scratch`]), e.g. a record as in a map value.
    heap: Vec<u8>,
}

impl Machine {
    pub fn new(maps: Maps, addr: u64) -> Machine {
        Machine {
            maps,
            pid_tgid: (100 << 32) | 101,
            comm: *b"writer\0\0\0\0\0\0\0\0\0\0",
            addr,
            user_mode: true,
            memory: Some(0),
            olds: HashMap::new(),
            old_slots: Vec::new(),
            by_tgid: vec![[0; 16]; BY_TGID_ENTRIES],
            stats: [0; 8],
            output: Vec::new(),
            read_with: None,
            stack: [0; 512],
            ctx: [0; 184],
            heap: Vec::new(),
        }
    }

    /// `len` zeroed bytes the program may read and write (a test lays a record out there); their address.
    pub fn scratch(&mut self, len: usize) -> u64 {
        self.heap = vec![0; len];
        HEAP
    }

    /// Writes `bytes` at `addr` (in [`Machine::scratch`]'s memory, the stack or the context).
    pub fn write(&mut self, addr: u64, bytes: &[u8]) {
        self.mem(addr, bytes.len()).copy_from_slice(bytes);
    }

    pub fn old(&self, key: u64) -> Option<u64> {
        self.olds
            .get(&key)
            .map(|&i| u64::from_le_bytes(self.old_slots[i]))
    }

    /// Sets the by-tgid array's current generation, as the tracer does at load and to forget every old value.
    pub fn set_generation(&mut self, generation: u64) {
        self.by_tgid[0][8..].copy_from_slice(&generation.to_le_bytes());
    }

    /// Hits the program dropped (the `stats` map).
    pub fn dropped(&self) -> u64 {
        u64::from_le_bytes(self.stats)
    }

    fn mem(&mut self, addr: u64, len: usize) -> &mut [u8] {
        let (base, buf): (u64, &mut [u8]) = if (STACK..STACK + 512).contains(&addr) {
            (STACK, &mut self.stack)
        } else if (CTX..CTX + 184).contains(&addr) {
            (CTX, &mut self.ctx)
        } else if (OLDS..OLDS + 0x1000_0000).contains(&addr) {
            let slot = ((addr - OLDS) / 8) as usize;
            let off = ((addr - OLDS) % 8) as usize;
            assert!(off + len <= 8, "access across an olds value");
            return &mut self.old_slots[slot][off..off + len];
        } else if (BY_TGID..BY_TGID + 16 * BY_TGID_ENTRIES as u64).contains(&addr) {
            let slot = ((addr - BY_TGID) / 16) as usize;
            let off = ((addr - BY_TGID) % 16) as usize;
            assert!(off + len <= 16, "access across a by-tgid value");
            return &mut self.by_tgid[slot][off..off + len];
        } else if (HEAP..HEAP + self.heap.len() as u64).contains(&addr) {
            (HEAP, &mut self.heap)
        } else if (STATS..STATS + 8).contains(&addr) {
            let off = (addr - STATS) as usize;
            return &mut self.stats[off..off + len];
        } else {
            panic!("access to unmapped 0x{addr:x}");
        };
        let off = (addr - base) as usize;
        &mut buf[off..off + len]
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

    fn call(&mut self, id: i32, r: &mut [u64; 11]) {
        let Some(helper) = Helper::from_id(id) else {
            panic!("helper {id}");
        };
        r[0] = match helper {
            Helper::GetCurrentPidTgid => self.pid_tgid,
            Helper::GetCurrentComm => {
                let comm = self.comm;
                self.mem(r[1], r[2] as usize)
                    .copy_from_slice(&comm[..r[2] as usize]);
                0
            }
            Helper::ProbeReadUser | Helper::ProbeReadKernel => {
                self.read_with = Some(helper);
                assert_eq!(r[3], self.addr, "reads the breakpoint's address");
                match self.memory {
                    Some(v) => {
                        let len = r[2] as usize;
                        self.mem(r[1], len).copy_from_slice(&v.to_le_bytes()[..len]);
                        0
                    }
                    None => (-14i64) as u64,
                }
            }
            Helper::MapLookupElem => {
                let map = (r[1] - MAP_TAG) as i32;
                if map == self.maps.olds {
                    let key = self.load(r[2], 8);
                    self.olds.get(&key).map_or(0, |&i| OLDS + 8 * i as u64)
                } else if Some(map) == self.maps.olds_by_tgid {
                    let index = self.load(r[2], 4) as usize;
                    if index < BY_TGID_ENTRIES {
                        BY_TGID + 16 * index as u64
                    } else {
                        0
                    }
                } else if map == self.maps.stats {
                    assert_eq!(self.load(r[2], 4), 0);
                    STATS
                } else {
                    panic!("lookup in map {map}")
                }
            }
            Helper::MapUpdateElem => {
                assert_eq!((r[1] - MAP_TAG) as i32, self.maps.olds);
                let key = self.load(r[2], 8);
                let value = self.load(r[3], 8);
                let slot = *self.olds.entry(key).or_insert(self.old_slots.len());
                if slot == self.old_slots.len() {
                    self.old_slots.push(value.to_le_bytes());
                } else {
                    self.old_slots[slot] = value.to_le_bytes();
                }
                0
            }
            Helper::PerfEventOutput => {
                assert_eq!(r[1], CTX, "the context is passed on");
                assert_eq!((r[2] - MAP_TAG) as i32, self.maps.outputs);
                assert_eq!(r[3], 0xffff_ffff, "BPF_F_CURRENT_CPU");
                let len = r[5] as usize;
                let rec = self.mem(r[4], len).to_vec();
                self.output.push(rec);
                0
            }
            other => panic!("helper {other:?}"),
        };
        // Calls clobber r1-r5.
        for reg in r.iter_mut().take(6).skip(1) {
            *reg = 0xdead_beef;
        }
    }

    /// Runs `prog` once, as the kernel would at one hit; returns r0.
    pub fn run(&mut self, prog: &[Insn]) -> u64 {
        self.ctx = [0; 184];
        let cs = if self.user_mode { 0x33 } else { 0x10 };
        self.store(CTX + ctx::CS as u64, 8, cs);
        self.store(CTX + ctx::ADDR as u64, 8, self.addr);
        self.read_with = None;
        let mut r = [0u64; 11];
        r[1] = CTX;
        r[10] = STACK + 512;
        let mut pc = 0usize;
        for _ in 0..10_000 {
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
                    let v = (i.imm as u32 as u64) | (hi << 32);
                    r[dst] = if i.src == PSEUDO_MAP_FD {
                        MAP_TAG + v
                    } else {
                        v
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
                    0x80 => self.call(i.imm, &mut r),
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
        panic!("the program did not finish in 10,000 steps");
    }
}

fn dst_addr(r: &[u64; 11], i: &Insn) -> u64 {
    r[i.dst as usize].wrapping_add(i.off as i64 as u64)
}
