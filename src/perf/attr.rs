//! The perf attributes shared by every event that writes into a breakpoint ring, kept apart from the
//! breakpoint event ([`crate::perf::event`]) and the value event ([`crate::perf::bpf`]) so that each builds on
//! them without the two depending on each other.

use perf_event_open_sys::bindings as pb;

/// The attributes every event writing into a breakpoint ring shares: the breakpoint's own and `--value`'s
/// value event ([`crate::perf::bpf`]). The kernel refuses to redirect an event into a ring of another clock,
/// and the LOST records either event writes must carry the same trailer.
pub(crate) fn ring_attr(type_: u32) -> pb::perf_event_attr {
    // All zero is the documented "nothing set" value; the bindings' Default is exactly that.
    let mut a = pb::perf_event_attr {
        type_,
        size: std::mem::size_of::<pb::perf_event_attr>() as u32,
        ..Default::default()
    };
    a.sample_period = 1;
    // Every record carries the TID/TIME/CPU trailer, so COMM, FORK, EXIT, MMAP2 and LOST records are merged
    // in time order with the samples: a hit is named as its task was named, and mapped, when it wrote.
    a.set_sample_id_all(1);
    a.set_use_clockid(1);
    a.clockid = libc::CLOCK_MONOTONIC;
    a
}
