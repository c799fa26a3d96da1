//! How slow work tells its caller how far it got. The crate draws nothing itself: a debuginfod download
//! and a scan of a vmlinux's DWARF report to a [`Progress`] the caller passes in, and the caller decides
//! what to show (a bar on a terminal, a line in a log, nothing). [`NoProgress`] is the default.

use std::fmt;

/// What the work being reported is; the units of `total` and `done` follow from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Task<'a> {
    /// A vmlinux downloaded from the debuginfod server whose URL prefix is `url`; units are bytes, and
    /// `total` is the size the server announced, if it did.
    Download { url: &'a str },
    /// A vmlinux's `.debug_info` searched for a variable, unit by unit; units are bytes of the section.
    /// Such a scan is often over in a moment, so a caller may wait before showing anything.
    DwarfScan,
}

/// Receives the progress of slow work. One task runs at a time: `start`, any number of `advance`, then
/// `finish`, which comes on every way out (success, error or early return). `note` lines may come at any
/// time. Every method does nothing by default.
pub trait Progress: Send + Sync {
    /// A line worth telling a person watching, such as the server about to be asked
    /// (`debuginfod: connecting to URL ...`). Lines name their subsystem first and end without a newline.
    fn note(&self, _line: &str) {}

    /// `task` begins; `total` is how many units it will take, when that is known.
    fn start(&self, _task: Task<'_>, _total: Option<u64>) {}

    /// `done` units of the current task are done (a position, not an increment).
    fn advance(&self, _done: u64) {}

    /// The current task has ended, whether it succeeded or not.
    fn finish(&self) {}
}

/// Reports nothing: what library callers and tests get unless they ask for progress.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {}

impl fmt::Debug for dyn Progress + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("dyn Progress")
    }
}

/// Calls [`Progress::finish`] when dropped, so a task ends on every way out of the code that started it.
pub(crate) struct Running<'p>(&'p dyn Progress);

impl<'p> Running<'p> {
    pub(crate) fn start(p: &'p dyn Progress, task: Task<'_>, total: Option<u64>) -> Running<'p> {
        p.start(task, total);
        Running(p)
    }

    pub(crate) fn advance(&self, done: u64) {
        self.0.advance(done);
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Log(Mutex<Vec<String>>);

    impl Progress for Log {
        fn start(&self, task: Task<'_>, total: Option<u64>) {
            self.0
                .lock()
                .unwrap()
                .push(format!("start {task:?} {total:?}"));
        }
        fn advance(&self, done: u64) {
            self.0.lock().unwrap().push(format!("advance {done}"));
        }
        fn finish(&self) {
            self.0.lock().unwrap().push("finish".into());
        }
    }

    #[test]
    fn a_running_task_finishes_on_every_way_out() {
        let log = Log::default();
        let early = |fail: bool| -> Result<(), ()> {
            let r = Running::start(&log, Task::DwarfScan, Some(10));
            r.advance(3);
            if fail {
                return Err(());
            }
            r.advance(10);
            Ok(())
        };
        assert!(early(true).is_err());
        assert!(early(false).is_ok());
        assert_eq!(
            *log.0.lock().unwrap(),
            [
                "start DwarfScan Some(10)",
                "advance 3",
                "finish",
                "start DwarfScan Some(10)",
                "advance 3",
                "advance 10",
                "finish"
            ]
        );
    }
}
