//! The hit program's memory, as its parts agree on it: the per-CPU scratch entry (the record being built,
//! then the words the emitter, the totals and the repeats check keep between hits) and the `stats` map's
//! slots. Kept apart from the code that writes them so that each part reads the one layout, and none has to
//! import another part for a number.

use crate::perf::hit_record as rec;

/// The events one store can be reported by: a thread has 4 debug registers, one per event installed.
pub const EVENTS: usize = 4;

/// The scratch entry's bytes past the record: the wake-up asked for, the bytes written to the ring since
/// its reader was last woken, the record's size (the hit program's reckoning), and the writer (pid_tgid)
/// and name of the last record this CPU handed over since one was lost, which a record carries its name
/// only when it differs from ([`crate::perf::hit_record::COMM_KNOWN`]), and the hash of the last chain
/// this CPU found in the watch's `chains` map ([`crate::perf::bpf::totals`]: a chain again is not looked
/// up again), and the CPU's pending count: a `counts` key and the hits under it not yet added to the map
/// ([`crate::perf::bpf::totals`]: a writer storing along one chain again and again pays no map operation),
/// and on the per-thread path the last store reported on the CPU and the events that reported it
/// ([`crate::perf::bpf::repeats`]).
pub const OFF_WAKE: i16 = rec::MAX_LEN as i16;
pub const OFF_SINCE: i16 = OFF_WAKE + 8;
pub const OFF_SIZE: i16 = OFF_SINCE + 8;
pub const OFF_LAST_WRITER: i16 = OFF_SIZE + 8;
pub const OFF_LAST_COMM: i16 = OFF_LAST_WRITER + 8;
pub const OFF_LAST_CHAIN: i16 = OFF_LAST_COMM + rec::COMM_BYTES as i16;
pub const OFF_PENDING_KEY: i16 = OFF_LAST_CHAIN + 8;
pub const OFF_PENDING_N: i16 = OFF_PENDING_KEY + rec::COUNT_KEY as i16;
pub const OFF_REPORTED_WRITER: i16 = OFF_PENDING_N + 8;
pub const OFF_REPORTED_IP: i16 = OFF_REPORTED_WRITER + 8;
pub const OFF_REPORTED_BY: i16 = OFF_REPORTED_IP + 8;
pub const OFF_REPORTING: i16 = OFF_REPORTED_BY + 8 * EVENTS as i16;
/// The scratch entry: the largest record and those words.
pub const SCRATCH_LEN: u32 = OFF_REPORTING as u32 + 8;

/// `stats` slot: traps the filters or the condition dropped.
pub const STAT_FILTERED: u32 = 0;
/// `stats` slot: traps of a process that is not watched.
pub const STAT_OTHER_PROCESS: u32 = 1;
/// `stats` slot: kept hits the CPU's ring had no room for.
pub const STAT_LOST: u32 = 2;
/// `stats` slot: on the per-thread path, second reports of one store by another event ([`super::repeats`]).
pub const STAT_REPEATED: u32 = 3;
/// Slots in `stats`.
pub const STATS: u32 = 4;
