//! Overlapping the first breakpoint open's wait with start-up work.
//!
//! Opening (or closing) a CPU-bound breakpoint takes the kernel's hw_breakpoint constraint lock for writing,
//! a percpu rwsem: the first writer after a quiet spell waits for an RCU grace period (8-15 ms on the
//! reference VM, see BENCHMARKS.md "Hotplug"), and one within a grace period of the last does not. A
//! [`Warmup`] opens and closes a disabled breakpoint from a thread, again every millisecond, while the
//! main thread loads symbols; when it is finished the real opens find the lock warm.
//!
//! The probe asks for a breakpoint of no type (`HW_BREAKPOINT_EMPTY`): the kernel takes the constraint
//! lock, then refuses the type (EINVAL) before it counts a slot. So the probe never holds a debug register,
//! not even for the moment between an open and its close: a disabled breakpoint of a real type would,
//! and another tool (or a test holding every register) arming in that moment would find one missing.
//! Task-bound breakpoints (a process watch on perf samples) take that lock only for reading, so only a
//! watch whose breakpoints are bound to CPUs gains from this: a system-wide one, and a process watch
//! whose hit program chooses the processes in the kernel.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::model::watch::{Access, Watch};
use crate::perf::event::{attr, Bind, EventConfig};
use crate::perf::sys;

/// An address in our own data for the probe; it is never enabled.
static PROBE: u64 = 0;

/// `HW_BREAKPOINT_EMPTY`: a breakpoint type the constraint code refuses after taking its lock.
const HW_BREAKPOINT_EMPTY: u32 = 0;

/// How often the lock is taken again: well inside a grace period.
const EVERY: Duration = Duration::from_millis(1);

/// A thread keeping the constraint lock warm until [`Warmup::finish`] (or drop).
pub struct Warmup {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Warmup {
    /// Starts the thread, probing on `cpu` (the lock is one for all CPUs). If the kernel refuses the
    /// probe (no permission, no free debug register) the thread just ends: arming will say why.
    pub fn start(cpu: u32) -> Warmup {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("ksymwatch-warmup".into())
            .spawn(move || {
                let cfg = EventConfig::bare(1);
                let w = Watch {
                    label: "warmup".into(),
                    addr: &PROBE as *const u64 as u64,
                    len: 8,
                    access: Access::Write,
                    module: None,
                    per_cpu: None,
                };
                let mut a = attr(&w, &cfg, Bind::Cpu);
                a.bp_type = HW_BREAKPOINT_EMPTY;
                while !flag.load(Ordering::Relaxed) {
                    // EINVAL is the kernel refusing the type under the lock: the probe did its work. Any
                    // other answer (no permission) means it never reached the lock.
                    match sys::perf_event_open(&a, -1, cpu as i32) {
                        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                        _ => return,
                    }
                    std::thread::sleep(EVERY);
                }
            })
            .ok();
        Warmup { stop, thread }
    }

    /// Stops the thread and waits for its last probe to be closed.
    pub fn finish(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Warmup {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}
