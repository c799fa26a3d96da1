//! Builders shared by the printers' unit tests: one kallsyms table, samples decoded from record bytes the
//! way the session gets them, watches, and hits with their frames named from the table. The printers are
//! tested on given frames: how the tracer names them (return addresses, user symbols, caches) is
//! `trace::symbolize`'s, tested there; this layer uses nothing above it.

use super::frame::{Rendered, ResolvedFrame};
use super::{Header, Hit, StreamEvent, Value};
use crate::model::watch::{Access, Watch};
use crate::perf::record::{decode, encode, Context, Record, Sample, SAMPLE_TYPE};
use ksymwatch_symbols::{kallsyms, SymbolTable};
use std::collections::BTreeSet;
use std::path::Path;

/// Four kernel functions, 0x100 bytes each.
pub const SYMS: &str = "\
ffffffff81000000 T read_zero
ffffffff81000100 T vfs_read
ffffffff81000200 T ksys_read
ffffffff81000300 T end_marker
";

pub fn table() -> SymbolTable {
    kallsyms::from_text(SYMS, Path::new("fixture")).unwrap()
}

/// A sample record's bytes (from [`encode::sample`]) decoded the way the session decodes them.
pub fn decoded(bytes: &[u8]) -> Sample {
    let Record::Sample(s) = decode(bytes, SAMPLE_TYPE).unwrap() else {
        panic!("not a sample")
    };
    s
}

/// A read of /dev/zero into 0x7ffd0000 by pid 1234 (tid 1235) on CPU 1 at 412.123456789 s: ip
/// read_zero+0x77, called from vfs_read+0xbb, from user code at 0x401000.
pub fn read_zero_sample() -> Sample {
    let chain = [
        encode::KERNEL,
        0xffffffff81000077,
        0xffffffff810001bb,
        encode::USER,
        0x401000,
    ];
    decoded(&encode::sample(
        chain[1],
        1234,
        1235,
        412_123_456_789,
        0x7ffd0000,
        1,
        &chain,
    ))
}

/// read_zero+0x77/0x100, the kernel frame of [`read_zero_sample`]'s ip, as the table names it.
pub fn read_zero_frame() -> ResolvedFrame {
    ResolvedFrame {
        sym: Some("read_zero".into()),
        off: 0x77,
        size: Some(0x100),
        ..ResolvedFrame::unknown(0xffffffff81000077, true)
    }
}

/// A kernel chain through read_zero and vfs_read, called from user code at 0x401000.
pub const READ_CHAIN: [u64; 5] = [
    encode::KERNEL,
    0xffffffff81000010,
    0xffffffff81000110,
    encode::USER,
    0x401000,
];

/// The header of a system-wide watch of `watches` on `cpus`: no process, no value, no condition, no
/// objects.
pub fn system_wide_header<'a>(
    watches: &'a [Watch],
    cpus: &'a BTreeSet<u32>,
    source: &'a str,
) -> Header<'a> {
    Header {
        watches,
        cpus,
        source,
        processes: &[],
        threads: 0,
        values: false,
        condition: None,
        objects: None,
        cgroups: &[],
    }
}

/// `count` records lost on cpu 1: a full ring's, `counted` in the kernel's totals on the hit path.
pub fn lost_on_cpu1(count: u64, counted: bool) -> StreamEvent {
    StreamEvent::Lost {
        cpu: 1,
        count,
        counted,
    }
}

pub fn watch(label: &str, addr: u64, access: Access) -> Watch {
    Watch {
        label: label.into(),
        addr,
        len: 8,
        access,
        module: None,
        per_cpu: None,
    }
}

/// A 4-byte per-CPU watch, each CPU its own copy: cpu0's at 0x7ffc0000 + `offset`... (bases 0x7ffc0000 and
/// 0x7ffd0000 - 0x10, so cpu1's copy of offset 0x10 is at 0x7ffd0000, where the samples here often hit).
pub fn percpu_watch(label: &str, copy: Option<u32>) -> Watch {
    let bases = [(0, 0x7ffc_0000), (1, 0x7ffd_0000 - 0x10)].into();
    let per_cpu = crate::model::watch::PerCpu {
        offset: 0x10,
        bases,
        copy,
    };
    Watch {
        len: 4,
        addr: 0x7ffc_0010,
        per_cpu: Some(per_cpu),
        ..watch(label, 0, Access::Write)
    }
}

/// Hands `f` one process watch's hit with each of `values`: a user-space store by `writer` (pid 4321,
/// tid 4322, cpu 0, at 5 s) into `counter` at 0x404028, from ip 0x401136.
pub fn each_value_of_a_user_store(values: &[Value], mut f: impl FnMut(&Hit<'_>)) {
    let s = decoded(&encode::sample(
        0x401136,
        4321,
        4322,
        5_000_000_000,
        0x404028,
        0,
        &[encode::USER, 0x401136],
    ));
    let watches = [watch("counter", 0x404028, Access::Write)];
    each_hit(&table(), &watches, &[(s, "writer", 0)], |hit| {
        for &value in values {
            f(&Hit { value, ..*hit });
        }
    });
}

/// A hit of `sample` on `watch` (index 0) by `app` at the bare `ip`: no chain, no value, from `cgroup`.
pub fn app_hit<'a>(
    sample: &'a Sample,
    watch: &'a Watch,
    ip: &'a ResolvedFrame,
    cgroup: Option<&'a super::cgroup::CgroupName>,
) -> Hit<'a> {
    Hit {
        sample,
        watch,
        watch_index: 0,
        comm: "app",
        ip,
        chain: &[],
        value: Value::NotRead,
        rendered: None,
        cgroup,
    }
}

/// A frame named from `table` (kernel frames; user frames stay unnamed, as with no process maps).
fn frame(table: &SymbolTable, addr: u64, kernel: bool) -> ResolvedFrame {
    let mut f = ResolvedFrame::unknown(addr, kernel);
    if let Some(s) = table.symbolize(addr).filter(|_| kernel) {
        f.sym = Some(s.symbol.name.into());
        f.off = s.offset;
        f.size = s.symbol.size;
        f.module = s.symbol.module.cloned();
    }
    f
}

/// Names each `(sample, comm, watch index)` with `table` and hands `f` the hit, with no value (as a
/// system-wide watch has; a test wants one with `Hit { value, ..*hit }`). As in the session, a chain
/// repeated in `hits` is spelled once and its rendering reused.
pub fn each_hit(
    table: &SymbolTable,
    watches: &[Watch],
    hits: &[(Sample, &str, usize)],
    mut f: impl FnMut(&Hit<'_>),
) {
    let mut chains: Vec<(Vec<u64>, ResolvedFrame, Vec<ResolvedFrame>, Rendered)> = Vec::new();
    for (s, comm, w) in hits {
        let key: Vec<u64> = std::iter::once(s.ip)
            .chain(s.frames.iter().map(|fr| fr.addr))
            .collect();
        let at = match chains.iter().position(|c| c.0 == key) {
            Some(i) => i,
            None => {
                let ip = frame(table, s.ip, s.in_kernel());
                let frames: Vec<ResolvedFrame> = s
                    .frames
                    .iter()
                    .map(|fr| frame(table, fr.addr, fr.context == Context::Kernel))
                    .collect();
                let rendered = Rendered::new(&ip, &frames);
                chains.push((key, ip, frames, rendered));
                chains.len() - 1
            }
        };
        let (_, ip, frames, rendered) = &chains[at];
        f(&Hit {
            sample: s,
            watch: &watches[*w],
            watch_index: *w,
            comm,
            ip,
            chain: frames,
            value: Value::NotRead,
            rendered: Some(rendered),
            cgroup: None,
        });
    }
}

/// An output's destination that takes `room` bytes, at most `slice` at a time (a pipe's reader taking
/// what it reads), then fails as a reader gone.
pub struct Room {
    pub room: usize,
    pub slice: usize,
}

impl std::io::Write for Room {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.room == 0 {
            return Err(std::io::ErrorKind::BrokenPipe.into());
        }
        let n = buf.len().min(self.room).min(self.slice);
        self.room -= n;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
