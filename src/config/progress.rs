//! The symbols crate's progress, drawn on stderr: its notes as `ksymwatch: ...` lines, a debuginfod
//! download as a bar (size, rate, ETA) on a terminal or one `receiving` line otherwise, and a DWARF scan
//! as a bar once it has run long enough to be worth one, on a terminal only.

use std::io::{self, IsTerminal, Write};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ksymwatch_symbols::{Progress, Task};

/// How long a DWARF scan runs silently before a bar is worth showing: most end well before.
const SCAN_BAR_AFTER: Duration = Duration::from_millis(400);

/// A [`Progress`] that draws on stderr.
pub struct Bars {
    /// Bars only on a terminal; off one, the lines alone.
    terminal: bool,
    state: Mutex<State>,
}

#[derive(Default)]
enum State {
    #[default]
    Idle,
    /// A DWARF scan on a terminal, not slow enough yet for a bar.
    Waiting {
        since: Instant,
        total: u64,
    },
    Drawn(ProgressBar),
}

impl Bars {
    pub fn stderr() -> Bars {
        Bars {
            terminal: io::stderr().is_terminal(),
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is a bar or a timestamp: one a panicking thread left behind is as good as any.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Progress for Bars {
    fn note(&self, line: &str) {
        // A URL is part of the note: written whole, not bounded like an echo of user input.
        let _ = writeln!(io::stderr(), "ksymwatch: {line}");
    }

    fn start(&self, task: Task<'_>, total: Option<u64>) {
        let terminal = self.terminal;
        let next = match task {
            Task::Download { url } if terminal => State::Drawn(download_bar(url, total)),
            Task::Download { url } => {
                let _ = match total {
                    Some(n) => writeln!(
                        io::stderr(),
                        "ksymwatch: debuginfod: receiving {n} bytes from {url}"
                    ),
                    None => writeln!(
                        io::stderr(),
                        "ksymwatch: debuginfod: receiving from {url} (size not given)"
                    ),
                };
                State::Idle
            }
            Task::DwarfScan if terminal => State::Waiting {
                since: Instant::now(),
                total: total.unwrap_or(0),
            },
            _ => State::Idle,
        };
        *self.state() = next;
    }

    fn advance(&self, done: u64) {
        let mut state = self.state();
        match &*state {
            State::Drawn(bar) => bar.set_position(done),
            State::Waiting { since, total } if since.elapsed() >= SCAN_BAR_AFTER => {
                let bar = scan_bar(*total);
                bar.set_position(done);
                *state = State::Drawn(bar);
            }
            _ => {}
        }
    }

    fn finish(&self) {
        if let State::Drawn(bar) = std::mem::take(&mut *self.state()) {
            bar.finish_and_clear();
        }
    }
}

/// A download's bar, on one line of an 80-column terminal: the host alone, since the note before it
/// names the URL.
fn download_bar(url: &str, total: Option<u64>) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr());
    let template = if total.is_some() {
        "{spinner} vmlinux from {msg} {bar:16} {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}"
    } else {
        "{spinner} vmlinux from {msg} {bytes} {bytes_per_sec}"
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    let host = url.split("://").nth(1).unwrap_or(url);
    bar.set_message(host.split('/').next().unwrap_or(host).to_string());
    bar
}

fn scan_bar(total: u64) -> ProgressBar {
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} scanning DWARF for the variable {bar:30} {bytes}/{total_bytes} ({eta})",
    ) {
        bar.set_style(style);
    }
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bars(terminal: bool) -> Bars {
        Bars {
            terminal,
            state: Mutex::default(),
        }
    }

    #[test]
    fn off_a_terminal_no_bar_is_made() {
        let bars = bars(false);
        for task in [
            Task::DwarfScan,
            Task::Download {
                url: "http://127.0.0.1:1",
            },
        ] {
            bars.start(task, Some(100));
            bars.advance(50);
            assert!(matches!(*bars.state(), State::Idle));
            bars.finish();
        }
    }

    #[test]
    fn a_scan_gets_its_bar_only_when_slow_and_finish_drops_it() {
        let bars = bars(true);
        bars.start(Task::DwarfScan, Some(100));
        bars.advance(10);
        assert!(matches!(*bars.state(), State::Waiting { total: 100, .. }));
        *bars.state() = State::Waiting {
            since: Instant::now() - SCAN_BAR_AFTER,
            total: 100,
        };
        bars.advance(40);
        match &*bars.state() {
            State::Drawn(bar) => assert_eq!(bar.position(), 40),
            _ => panic!("no bar after {SCAN_BAR_AFTER:?}"),
        }
        bars.finish();
        assert!(matches!(*bars.state(), State::Idle));
    }
}
