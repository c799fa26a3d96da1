//! The live status line on a terminal's stderr: hits, hits per second, lost records, hits not printed
//! (a full ring's on the hit path, which the kernel's totals still count), CPUs armed. It is a
//! printer like the others, so it sees exactly the reported hits and stream events, and it redraws from the
//! event loop's flush at most four times a second. It never writes stdout, is only made when stderr is a
//! terminal, and clears itself before the end-of-session report is printed.

use std::collections::BTreeSet;
use std::io;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::report::{Header, Hit, Output, StreamEvent, Summary};

const EVERY: Duration = Duration::from_millis(250);

pub struct Status {
    bar: ProgressBar,
    hits: u64,
    lost: u64,
    /// Hits a full ring dropped that the kernel's totals count: not lost.
    unprinted: u64,
    cpus: BTreeSet<u32>,
    /// Hits and time at the last redraw, for the rate.
    last: (u64, Instant),
}

impl Status {
    /// A status line drawn on stderr (indicatif draws nothing when stderr is not a terminal; the caller
    /// checks too, so none is made at all).
    pub fn new() -> Status {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4));
        if let Ok(style) = ProgressStyle::with_template("{msg}") {
            bar.set_style(style);
        }
        Status {
            bar,
            hits: 0,
            lost: 0,
            unprinted: 0,
            cpus: BTreeSet::new(),
            last: (0, Instant::now()),
        }
    }

    /// The line's text, given the rate; hits not printed only when there are some, as in the summary.
    pub fn text(hits: u64, per_sec: f64, (lost, unprinted): (u64, u64), cpus: usize) -> String {
        let unprinted = match unprinted {
            0 => String::new(),
            n => format!(", {n} not printed"),
        };
        format!(
            "ksymwatch: {hits} hits, {per_sec:.0}/s, {lost} lost{unprinted}, {cpus} cpu{} armed",
            if cpus == 1 { "" } else { "s" }
        )
    }

    fn redraw(&mut self, now: Instant) {
        let dt = now.duration_since(self.last.1).as_secs_f64();
        let rate = if dt > 0.0 {
            (self.hits - self.last.0) as f64 / dt
        } else {
            0.0
        };
        self.last = (self.hits, now);
        let dropped = (self.lost, self.unprinted);
        self.bar
            .set_message(Status::text(self.hits, rate, dropped, self.cpus.len()));
    }
}

impl Default for Status {
    fn default() -> Self {
        Status::new()
    }
}

impl Output for Status {
    fn header(&mut self, _: &Header<'_>) -> io::Result<()> {
        Ok(())
    }
    fn armed(&mut self, _: usize, cpus: &BTreeSet<u32>, _: u64) -> io::Result<()> {
        // The first draw waits for a flush: stderr's `armed` note from a quiet printer comes right after this.
        self.cpus = cpus.clone();
        self.last = (0, Instant::now());
        Ok(())
    }
    fn hit(&mut self, _: &Hit<'_>) -> io::Result<()> {
        self.hits += 1;
        Ok(())
    }
    fn event(&mut self, event: &StreamEvent, _: u64) -> io::Result<()> {
        match event {
            StreamEvent::Lost {
                count,
                counted: true,
                ..
            } => self.unprinted += count,
            StreamEvent::Lost { count, .. } => self.lost += count,
            StreamEvent::CpuOffline { cpu } => {
                self.cpus.remove(cpu);
            }
            StreamEvent::CpuOnline { cpu, .. } => {
                self.cpus.insert(*cpu);
            }
            StreamEvent::CpuArmFailed { .. }
            | StreamEvent::Retargeted(_)
            | StreamEvent::Switched { .. }
            | StreamEvent::ControlRefused { .. }
            | StreamEvent::ModuleUnloaded { .. }
            | StreamEvent::ProcessExec { .. }
            | StreamEvent::ObjectArmed(_)
            | StreamEvent::ObjectFreed { .. }
            | StreamEvent::Dump { .. } => {}
        }
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        let now = Instant::now();
        if now.duration_since(self.last.1) >= EVERY {
            self.redraw(now);
        }
        Ok(())
    }
    fn finish(&mut self, _: &Summary) -> io::Result<()> {
        self.bar.finish_and_clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_counts() {
        assert_eq!(
            Status::text(1234, 311.6, (0, 0), 2),
            "ksymwatch: 1234 hits, 312/s, 0 lost, 2 cpus armed"
        );
        assert_eq!(
            Status::text(1234, 311.6, (3, 56), 1),
            "ksymwatch: 1234 hits, 312/s, 3 lost, 56 not printed, 1 cpu armed"
        );
        let mut s = Status::new();
        s.bar.set_draw_target(ProgressDrawTarget::hidden());
        s.armed(2, &BTreeSet::from([0, 1]), 0).unwrap();
        let lost = |count, counted| StreamEvent::Lost {
            cpu: 1,
            count,
            counted,
        };
        s.event(&lost(4, false), 0).unwrap();
        // On the hit path a full ring's hits are counted in the kernel: not printed, not lost.
        s.event(&lost(7, true), 0).unwrap();
        s.event(&StreamEvent::CpuOffline { cpu: 1 }, 0).unwrap();
        assert_eq!((s.lost, s.unprinted, s.cpus.len()), (4, 7, 1));
        s.finish(&Summary::default()).unwrap();
    }
}
