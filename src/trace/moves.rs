//! `--control` as the session runs it: the line source and the target resolver, the lines read and not
//! yet applied, the watch the lines steer, and what each line asks for ([`Step`]): switch the watches off
//! or on, move the steered watch to a resolved target, or refuse the line. A step is carried out between
//! two drains of the rings ([`Moves::apply`], through the session's [`Steering`]); [`refusal`] is the
//! stream's mark for a line that was not applied.

use std::io;

use crate::error::{Error, Result};
use crate::model::target::Target;
use crate::model::watch::{Access, Watch};
use crate::perf::event::OpenError;
use crate::report::{Covered, StopReason, StreamEvent};
use crate::trace::context::{Poll, Rings};
use crate::trace::control::{self, Command, Control};

/// Resolves a `--control watch` target the way the command line's targets were resolved.
pub type Resolve<'a> = Box<dyn FnMut(&Target, Access) -> Result<Watch> + 'a>;

/// A `control_refused` kind: the line is not a command.
pub const BAD_COMMAND: &str = "bad_command";
/// A `control_refused` kind: the target cannot be resolved, or the watch cannot move there.
pub const BAD_TARGET: &str = "bad_target";

/// `--control`'s line source and target resolver.
pub struct Controller<'a> {
    pub source: Control,
    pub resolve: Resolve<'a>,
    /// The access a `watch` line without `w`/`rw` gets: the command's (`write` or `rw`).
    pub access: Access,
}

/// What one control line asks of the session.
#[derive(Debug)]
pub enum Step {
    /// Disable every watch (their debug registers stay taken).
    Off,
    On,
    /// Move the steered watch to this target.
    Move(Watch),
    /// The line is not applied, for this reason; `kind` names it ([`BAD_COMMAND`], [`BAD_TARGET`]).
    Refuse(String, &'static str),
}

/// The session's `--control`: where lines come from, and the lines read and not applied yet.
pub struct Moves<'a> {
    ctl: Controller<'a>,
    /// Lines read, not yet applied (reused).
    lines: Vec<String>,
    /// The source cannot be polled (a regular file): read on the loop's first turn, to its end.
    unpolled: bool,
    /// The epoll token of the source's events.
    token: u64,
    /// The target index a `watch` line moves.
    steers: usize,
}

impl<'a> Moves<'a> {
    /// Adds the source to `epoll` under `token`; `watch` lines move target `steers`. A regular file or
    /// /dev/null as `--control -` cannot be polled (epoll refuses it with EPERM); it never blocks either,
    /// so it is read to its end as the loop starts instead.
    pub fn new(
        ctl: Controller<'a>,
        epoll: &impl Poll,
        token: u64,
        steers: usize,
    ) -> Result<Moves<'a>> {
        let unpolled = match epoll.add(ctl.source.fd(), token) {
            Ok(()) => false,
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => true,
            Err(e) => return Err(Error::runtime("epoll").caused_by(e)),
        };
        Ok(Moves {
            ctl,
            lines: Vec::new(),
            unpolled,
            token,
            steers,
        })
    }

    /// The source is unpolled and not read to its end yet: the loop reads it before it waits.
    pub fn unpolled(&self) -> bool {
        self.unpolled && !self.ctl.source.ended
    }

    /// A FIFO's line is unended, and its writer's close may raise no event: the loop reads on each turn
    /// ([`control::Control::mid_line`]).
    pub fn mid_line(&self) -> bool {
        self.ctl.source.mid_line()
    }

    /// Reads what the source has, returning the complete lines (hand them back with [`Moves::recycle`])
    /// and how the read went: the lines read before a failure are still to be applied. A source that
    /// ended or failed leaves `epoll`: the watch goes on as it is, with no more commands. A FIFO opened
    /// afresh after a writer's close is polled under the same token (its old descriptor left `epoll` as
    /// it closed).
    pub fn read(&mut self, epoll: &impl Poll) -> (Vec<String>, io::Result<()>) {
        let mut lines = std::mem::take(&mut self.lines);
        let mut read = self.ctl.source.read_lines(&mut lines);
        if read.is_ok() && self.ctl.source.reopened {
            read = epoll.add(self.ctl.source.fd(), self.token);
        }
        if self.ctl.source.ended || read.is_err() {
            let _ = epoll.delete(self.ctl.source.fd());
        }
        (lines, read)
    }

    /// Gives back the line buffer [`Moves::read`] lent, emptied, for the next read.
    pub fn recycle(&mut self, mut lines: Vec<String>) {
        lines.clear();
        self.lines = lines;
    }

    /// What `line` asks for; `None` for a blank line or a comment. A `watch` target is resolved here.
    pub fn step(&mut self, line: &str) -> Option<Step> {
        let command = match control::parse(line) {
            Ok(None) => return None,
            Ok(Some(c)) => c,
            Err(reason) => return Some(Step::Refuse(reason, BAD_COMMAND)),
        };
        Some(match command {
            Command::Off => Step::Off,
            Command::On => Step::On,
            Command::Watch { target, access } => {
                let access = access.unwrap_or(self.ctl.access);
                match (self.ctl.resolve)(&target, access) {
                    Ok(w) => Step::Move(w),
                    Err(e) => Step::Refuse(e.to_string(), BAD_TARGET),
                }
            }
        })
    }
}

/// What a control line asks of the session: every watch switched off or on, one watch (by target index)
/// moved, and what they cover.
pub trait Steering: Rings {
    /// What the watches cover now (for acknowledgements).
    fn coverage(&self) -> Covered;
    /// Whether the watches are on.
    fn enabled(&self) -> bool;
    /// Disables every event, each keeping its debug register.
    fn pause(&mut self);
    /// Enables every event.
    fn enable(&mut self) -> Result<(), OpenError>;
    /// Why target `index` cannot move to `watch` in place, if it cannot.
    fn cannot_move(&self, index: usize, watch: &Watch) -> Option<String>;
    /// Moves target `index` to `watch`, left disabled; on a refusal every event is back on the old watch.
    /// The old watch names the target's hits drained until the events are enabled again: all of them were
    /// recorded before the move, also at an address the new watch covers too.
    fn retarget(&mut self, index: usize, watch: Watch) -> io::Result<()>;
    /// Target `index`'s `old` values start afresh.
    fn forget_olds(&mut self, index: usize);
    /// The kernel's refusal of a moved breakpoint at `watch`, in the user's words, and its kind.
    fn explain_move(&self, e: &io::Error, watch: &Watch) -> (String, &'static str);
}

impl Moves<'_> {
    /// Reads the source and applies each complete line in order (see [`Moves::read`]).
    pub fn on_readable(
        &mut self,
        epoll: &impl Poll,
        ctx: &mut impl Steering,
    ) -> Result<Option<StopReason>> {
        let (mut lines, read) = self.read(epoll);
        let mut stop = None;
        for line in lines.drain(..) {
            stop = self.apply(&line, ctx);
            if stop.is_some() {
                break;
            }
        }
        self.recycle(lines);
        if let Err(e) = read {
            return Err(Error::runtime("reading --control").caused_by(e));
        }
        Ok(stop)
    }

    /// One control line. A move or an `off` disables the events first, then drains and prints everything
    /// they recorded, and only then acknowledges: every hit printed before the mark is of the old state,
    /// every hit after it of the new one.
    pub fn apply(&mut self, line: &str, ctx: &mut impl Steering) -> Option<StopReason> {
        let steers = self.steers;
        let step = self.step(line)?;
        let switch = match step {
            Step::Off => Some(false),
            Step::On => Some(true),
            _ => None,
        };
        if let Some(reason) = switch.and_then(|on| control::already(on, ctx.enabled())) {
            return refuse(line, reason, control::UNCHANGED, steers, ctx);
        }
        match step {
            Step::Refuse(reason, kind) => refuse(line, reason, kind, steers, ctx),
            Step::Off => {
                ctx.pause();
                if let Some(stop) = ctx.flush() {
                    return Some(stop);
                }
                let now = ctx.now();
                ctx.emit(&StreamEvent::Switched { on: false }, now)
            }
            Step::On => {
                let now = ctx.now();
                if let Err(e) = ctx.enable() {
                    ctx.pause();
                    let (reason, kind) = ctx.explain(&e);
                    let reason = format!("{reason}; the watch stays off");
                    return refuse(line, reason, kind, steers, ctx);
                }
                ctx.emit(&StreamEvent::Switched { on: true }, now)
            }
            Step::Move(watch) => move_watch(line, steers, watch, ctx),
        }
    }
}

/// `--control watch`: target `index` moves to `watch`, its old target's hits printed before the mark.
fn move_watch(
    line: &str,
    index: usize,
    watch: Watch,
    ctx: &mut impl Steering,
) -> Option<StopReason> {
    if let Some((reason, kind)) = watched_already(ctx.watches(), index, &watch) {
        return refuse(line, reason, kind, index, ctx);
    }
    if let Some(reason) = ctx.cannot_move(index, &watch) {
        return refuse(line, reason, BAD_TARGET, index, ctx);
    }
    let started = ctx.now();
    // Hits of the old target still in the rings are printed below, with their own olds: the new
    // target's first hit then starts afresh.
    if let Err(e) = ctx.retarget(index, watch.clone()) {
        // The kernel checks a moved breakpoint as it checks a new one: a kernel address where kernel
        // breakpoints are refused is said as at arming.
        let (reason, kind) = ctx.explain_move(&e, &watch);
        return refuse(line, reason, kind, index, ctx);
    }
    if let Some(stop) = ctx.flush() {
        return Some(stop);
    }
    ctx.forget_olds(index);
    let acked = ctx.now();
    if ctx.enabled() {
        if let Err(e) = ctx.enable() {
            // Everything is already moved; what cannot be enabled is off, and the reader must know.
            ctx.pause();
            let (reason, kind) = ctx.explain(&e);
            let reason = format!("{reason}; the watch is now off");
            return refuse(line, reason, kind, index, ctx);
        }
    }
    let event = StreamEvent::Retargeted(crate::report::Retarget {
        index,
        watch,
        covered: ctx.coverage(),
        took_ns: ctx.now().saturating_sub(started),
        enabled: ctx.enabled(),
    });
    ctx.emit(&event, acked)
}

/// Why moving target `index` to `watch` is not done when some target already watches those bytes the same
/// way, and its kind. Target `index` itself: the move would change nothing (it used to re-arm every event
/// for it), so it is a no-op marked as such, as a second `off` is ([`control::UNCHANGED`]). Another
/// target: each store there would be reported twice, which the command line refuses too (a target given
/// twice).
fn watched_already(
    watches: &[Watch],
    index: usize,
    watch: &Watch,
) -> Option<(String, &'static str)> {
    let (at, same) = watches
        .iter()
        .enumerate()
        .find(|(_, w)| w.same_bytes(watch))?;
    let bytes = format!(
        "the same {} bytes at 0x{:x}, {}",
        watch.len,
        watch.addr,
        watch.access.letters()
    );
    Some(if at == index {
        (
            format!("`{}` is already watched ({bytes})", watch.label),
            control::UNCHANGED,
        )
    } else {
        (
            format!(
                "`{}` is already watched as `{}` ({bytes}): each store there would be reported twice",
                watch.label, same.label
            ),
            BAD_TARGET,
        )
    })
}

/// Marks `line` as not applied, naming what target `steers` still watches.
fn refuse(
    line: &str,
    reason: String,
    kind: &'static str,
    steers: usize,
    ctx: &mut impl Steering,
) -> Option<StopReason> {
    let event = refusal(line, reason, kind, ctx.watches().get(steers));
    let now = ctx.now();
    ctx.emit(&event, now)
}

/// The stream's mark for a control `line` not applied for `reason` (of `kind`), naming what the steered
/// watch still watches (`watching`).
pub fn refusal(
    line: &str,
    reason: String,
    kind: &'static str,
    watching: Option<&Watch>,
) -> StreamEvent {
    let watching = watching
        .map(|w| format!("{} (0x{:x}/{})", w.label, w.addr, w.len))
        .unwrap_or_default();
    StreamEvent::ControlRefused {
        command: line.trim().to_string(),
        reason,
        watching,
        kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::testutil::watch;
    use crate::trace::context::fake::{through_log, Log, Polled};

    /// An epoll set that refuses a regular file, as the kernel's does.
    fn epoll() -> Polled {
        Polled {
            refuse: Some(libc::EPERM),
            ..Polled::default()
        }
    }

    /// A controller reading `text` from a regular file, resolving every target to a watch at 0x1000 with
    /// the access and length asked (and refusing `missing`), steering target 0.
    fn moves(text: &str, epoll: &impl Poll) -> Moves<'static> {
        moves_steering(text, epoll, 0)
    }

    /// [`moves`], steering target `steers`.
    fn moves_steering(text: &str, epoll: &impl Poll, steers: usize) -> Moves<'static> {
        // One file per call: tests run in parallel, and two texts of one length raced for one name (one
        // test removed the file another was about to open).
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("ksymwatch-moves-{}-{call}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let resolve: Resolve<'static> = Box::new(|t: &Target, access: Access| {
            if t.text == "missing" {
                return Err(Error::usage("no symbol `missing`"));
            }
            let w = watch(&t.text, 0x1000, access);
            Ok(Watch {
                len: t.len.unwrap_or(w.len),
                ..w
            })
        });
        let ctl = Controller {
            source: Control::from_file(file),
            resolve,
            access: Access::Write,
        };
        Moves::new(ctl, epoll, 3, steers).unwrap()
    }

    #[test]
    fn a_regular_file_is_read_to_its_end_unpolled() {
        let epoll = epoll();
        let mut m = moves("off\non\nwatch x rw", &epoll);
        assert!(m.unpolled(), "epoll refuses a regular file");
        let mut all = Vec::new();
        while m.unpolled() {
            let (lines, read) = m.read(&epoll);
            read.unwrap();
            all.extend(lines.iter().cloned());
            m.recycle(lines);
        }
        assert_eq!(
            all,
            ["off", "on", "watch x rw"],
            "the last line needs no newline"
        );
    }

    #[test]
    fn lines_become_steps_with_targets_resolved() {
        let epoll = epoll();
        let mut m = moves("", &epoll);
        assert!(m.step("# a comment").is_none());
        assert!(matches!(m.step("off"), Some(Step::Off)));
        assert!(matches!(m.step("on"), Some(Step::On)));
        let Some(Step::Move(w)) = m.step("watch counter") else {
            panic!("watch is a move");
        };
        assert_eq!((w.label.as_str(), w.access), ("counter", Access::Write));
        let Some(Step::Move(w)) = m.step("watch counter rw") else {
            panic!("watch is a move");
        };
        assert_eq!(w.access, Access::ReadWrite, "the line's access wins");
        let Some(Step::Refuse(reason, kind)) = m.step("watch missing") else {
            panic!("an unresolved target is refused");
        };
        assert!(reason.contains("missing"), "{reason}");
        assert_eq!(kind, BAD_TARGET);
        assert!(matches!(m.step("jump"), Some(Step::Refuse(_, BAD_COMMAND))));
    }

    #[test]
    fn a_refusal_names_the_line_and_what_is_still_watched() {
        let watches = [watch("counter", 0x1000, Access::Write)];
        let StreamEvent::ControlRefused {
            command,
            reason,
            watching,
            kind,
        } = refusal(
            "  watch nowhere \n",
            "no such symbol".into(),
            BAD_TARGET,
            watches.first(),
        )
        else {
            panic!("not a refusal");
        };
        assert_eq!(command, "watch nowhere");
        assert_eq!(reason, "no such symbol");
        assert_eq!(watching, "counter (0x1000/8)");
        assert_eq!(kind, BAD_TARGET);
        let StreamEvent::ControlRefused { watching, .. } =
            refusal("x", String::new(), BAD_COMMAND, None)
        else {
            panic!("not a refusal");
        };
        assert_eq!(watching, "");
    }
    /// A session of one watch for [`Moves::apply`]: the watch (`counter`, 8 bytes, read-write, in the
    /// log: the fake resolver's targets, at its address but for writes, are other bytes), whether
    /// it is on, whether `--value` reads its length, what the kernel refuses, and a log.
    struct Watching {
        log: Log,
        enabled: bool,
        written: bool,
        /// The kernel refuses a moved breakpoint with this errno.
        refuse_move: Option<i32>,
        refuse_enable: bool,
        /// The target index each move asked about, moved or started afresh, in order.
        steered: Vec<usize>,
    }

    fn watching() -> Watching {
        Watching {
            log: Log {
                watches: vec![watch("counter", 0x1000, Access::ReadWrite)],
                explain: Some(|e| (format!("cpu {}: no free debug register", e.cpu), "busy")),
                ..Log::default()
            },
            enabled: true,
            written: false,
            refuse_move: None,
            refuse_enable: false,
            steered: Vec::new(),
        }
    }

    through_log!(Watching);

    impl Steering for Watching {
        fn coverage(&self) -> Covered {
            Covered::Cpus(2)
        }

        fn enabled(&self) -> bool {
            self.enabled
        }

        fn pause(&mut self) {
            self.log.call("pause");
            self.enabled = false;
        }

        fn enable(&mut self) -> Result<(), OpenError> {
            self.log.call("enable");
            if self.refuse_enable {
                return Err(OpenError {
                    cpu: 1,
                    tid: None,
                    stage: crate::perf::event::Stage::Enable,
                    err: io::Error::from_raw_os_error(libc::ENOSPC),
                    bp: None,
                });
            }
            self.enabled = true;
            Ok(())
        }

        fn cannot_move(&self, index: usize, watch: &Watch) -> Option<String> {
            let now = self.log.watches[index].len;
            (self.written && watch.len != now).then(|| format!("--value reads {now} bytes"))
        }

        fn retarget(&mut self, index: usize, watch: Watch) -> io::Result<()> {
            self.steered.push(index);
            self.log.call(format!("retarget {}", watch.label));
            // The log moves 1 µs on: the move takes that long.
            self.log.now += 1_000;
            if let Some(errno) = self.refuse_move {
                // Every event is back on the old watch.
                return Err(io::Error::from_raw_os_error(errno));
            }
            self.log.watches[index] = watch;
            Ok(())
        }

        fn forget_olds(&mut self, index: usize) {
            self.steered.push(index);
            self.log.call("forget olds");
        }

        fn explain_move(&self, e: &io::Error, watch: &Watch) -> (String, &'static str) {
            let errno = e.raw_os_error().unwrap_or(0);
            (
                format!("{} refused (errno {errno})", watch.label),
                "permission",
            )
        }
    }

    /// The refusal mark's reason, kind and what it says is still watched.
    fn refused(ctx: &Watching) -> (String, &'static str, String) {
        match ctx.log.events.last() {
            Some((
                StreamEvent::ControlRefused {
                    reason,
                    kind,
                    watching,
                    ..
                },
                _,
            )) => (reason.clone(), *kind, watching.clone()),
            other => panic!("not a refusal: {other:?}"),
        }
    }

    /// A move: the old target's hits are printed (the flush) before the mark, the new target's olds
    /// start afresh, and the watch is on again; the mark is at the moment the move was done.
    #[test]
    fn a_move_prints_the_old_targets_hits_before_its_mark() {
        let epoll = epoll();
        let mut m = moves("", &epoll);
        let mut ctx = watching();
        ctx.log.now = 5_000;
        assert_eq!(m.apply("watch other/4", &mut ctx), None);
        assert_eq!(
            ctx.log.calls(),
            [
                "retarget other/4",
                "flush",
                "forget olds",
                "enable",
                "emit Retargeted"
            ]
        );
        let Some((
            StreamEvent::Retargeted(crate::report::Retarget {
                index,
                watch,
                covered,
                took_ns,
                enabled,
            }),
            at,
        )) = ctx.log.events.last()
        else {
            panic!("no acknowledgement: {:?}", ctx.log.events);
        };
        assert_eq!((*index, watch.label.as_str(), watch.len), (0, "other/4", 4));
        assert_eq!(
            (*covered, *took_ns, *enabled, *at),
            (Covered::Cpus(2), 1_000, true, 6_000)
        );
        // Moved while off, it stays off.
        ctx.enabled = false;
        ctx.log.calls.clear();
        assert_eq!(m.apply("watch third", &mut ctx), None);
        assert_eq!(
            ctx.log.calls(),
            ["retarget third", "flush", "forget olds", "emit Retargeted"]
        );
    }

    /// With `--value` the program reads the watch's length: a move to another length is refused before
    /// anything moves, naming the watch still watched; the same length moves.
    #[test]
    fn a_length_move_with_value_is_refused_and_nothing_moves() {
        let epoll = epoll();
        let mut m = moves("", &epoll);
        let mut ctx = watching();
        ctx.written = true;
        assert_eq!(m.apply("watch other/4", &mut ctx), None);
        assert_eq!(ctx.log.calls(), ["emit ControlRefused"]);
        let (reason, kind, still) = refused(&ctx);
        assert_eq!(
            (reason.as_str(), kind, still.as_str()),
            ("--value reads 8 bytes", BAD_TARGET, "counter (0x1000/8)")
        );
        ctx.log.calls.clear();
        assert_eq!(m.apply("watch other/8", &mut ctx), None);
        assert_eq!(ctx.log.calls()[0], "retarget other/8");
    }

    /// The kernel refuses the new breakpoint: the events are back on the old target, nothing is flushed
    /// or acknowledged, and the refusal says why in the kernel's words and names the old target.
    #[test]
    fn a_refused_rearm_keeps_the_old_target() {
        let epoll = epoll();
        let mut m = moves("", &epoll);
        let mut ctx = watching();
        ctx.refuse_move = Some(libc::EACCES);
        assert_eq!(m.apply("watch kernel_var", &mut ctx), None);
        assert_eq!(
            ctx.log.calls(),
            ["retarget kernel_var", "emit ControlRefused"]
        );
        let (reason, kind, still) = refused(&ctx);
        assert_eq!(
            reason,
            format!("kernel_var refused (errno {})", libc::EACCES)
        );
        assert_eq!((kind, still.as_str()), ("permission", "counter (0x1000/8)"));
        assert_eq!(ctx.log.watches[0].label, "counter");
        // An unresolvable target and a bad line are refused without touching the watch.
        ctx.log.calls.clear();
        assert_eq!(m.apply("watch missing", &mut ctx), None);
        assert_eq!(m.apply("jump", &mut ctx), None);
        assert_eq!(
            ctx.log.calls(),
            ["emit ControlRefused", "emit ControlRefused"]
        );
        assert_eq!(refused(&ctx).1, BAD_COMMAND);
    }

    /// `off` disables, prints what was recorded, then marks; `on` enables, or, refused, says the watch
    /// stays off.
    #[test]
    fn off_and_on_switch_the_watch_and_a_refused_enable_leaves_it_off() {
        let epoll = epoll();
        let mut m = moves("", &epoll);
        let mut ctx = watching();
        assert_eq!(m.apply("off", &mut ctx), None);
        assert_eq!(ctx.log.calls(), ["pause", "flush", "emit Switched"]);
        assert!(!ctx.enabled);
        ctx.log.calls.clear();
        ctx.refuse_enable = true;
        assert_eq!(m.apply("on", &mut ctx), None);
        assert_eq!(ctx.log.calls(), ["enable", "pause", "emit ControlRefused"]);
        let (reason, kind, _) = refused(&ctx);
        assert_eq!(reason, "cpu 1: no free debug register; the watch stays off");
        assert_eq!(kind, "busy");
        ctx.log.calls.clear();
        ctx.refuse_enable = false;
        assert_eq!(m.apply("on", &mut ctx), None);
        assert_eq!(ctx.log.calls(), ["enable", "emit Switched"]);
        assert!(ctx.enabled);
        // A closed output ends the run at the mark; a comment asks nothing.
        ctx.log.closed = true;
        assert_eq!(m.apply("# nothing", &mut ctx), None);
        assert_eq!(m.apply("off", &mut ctx), Some(StopReason::BrokenPipe));
    }

    /// A second `off` (or `on`) changes nothing: nothing is paused, flushed or enabled, and its mark says
    /// the watch already is so, naming what is watched; the switch back applies.
    #[test]
    fn a_second_off_or_on_says_the_watch_already_is() {
        let epoll = epoll();
        let (mut m, mut ctx) = (moves("", &epoll), watching());
        let mut reasons = Vec::new();
        for line in ["on", "off", "off", "on"] {
            assert_eq!(m.apply(line, &mut ctx), None);
            if ctx.log.calls().last() == Some(&"emit ControlRefused") {
                let (reason, kind, still) = refused(&ctx);
                assert_eq!(
                    (kind, still.as_str()),
                    (control::UNCHANGED, "counter (0x1000/8)")
                );
                reasons.push(reason);
            }
        }
        assert_eq!(
            reasons,
            ["the watch is already on", "the watch is already off"]
        );
        assert_eq!(
            ctx.log.calls(),
            [
                "emit ControlRefused",
                "pause",
                "flush",
                "emit Switched",
                "emit ControlRefused",
                "enable",
                "emit Switched"
            ]
        );
        assert!(ctx.enabled);
    }

    /// A move to the bytes the steered watch already watches the same way changes nothing and says so,
    /// as a second `off` does (it used to re-arm every event); a move to another target's bytes is
    /// refused, each store there would be reported twice; the same bytes for another access move.
    #[test]
    fn a_move_to_bytes_already_watched_changes_nothing() {
        let epoll = epoll();
        let mut ctx = watching();
        ctx.log
            .watches
            .push(watch("other_counter", 0x2000, Access::Write));
        let twice =
            "`x` is already watched as `counter` (the same 8 bytes at 0x1000, RW): each store \
                     there would be reported twice";
        // (target steered, line, the refusal's reason, kind and what is still watched; `None`: moved)
        let cases = [
            (
                0,
                "watch 0x1000 rw",
                Some((
                    "`0x1000` is already watched (the same 8 bytes at 0x1000, RW)",
                    control::UNCHANGED,
                    "counter (0x1000/8)",
                )),
            ),
            (
                1,
                "watch x rw",
                Some((twice, BAD_TARGET, "other_counter (0x2000/8)")),
            ),
            (1, "watch x w", None),
        ];
        for (steers, line, want) in cases {
            ctx.log.calls.clear();
            let mut m = moves_steering("", &epoll, steers);
            assert_eq!(m.apply(line, &mut ctx), None);
            match want {
                Some(want) => {
                    assert_eq!(ctx.log.calls(), ["emit ControlRefused"], "{line}");
                    let (reason, kind, still) = refused(&ctx);
                    assert_eq!((reason.as_str(), kind, still.as_str()), want);
                }
                None => assert_eq!(ctx.log.calls()[0], "retarget x", "{line}"),
            }
        }
    }

    /// A regular file's lines are applied in order as the loop starts.
    #[test]
    fn lines_read_are_applied_in_order() {
        let epoll = epoll();
        let mut m = moves("off\nwatch other\n", &epoll);
        let mut ctx = watching();
        assert_eq!(m.on_readable(&epoll, &mut ctx).ok(), Some(None));
        assert_eq!(
            ctx.log.calls(),
            [
                "pause",
                "flush",
                "emit Switched",
                "retarget other",
                "flush",
                "forget olds",
                "emit Retargeted"
            ]
        );
    }

    /// A regular file is read unpolled; a polled source goes into the epoll set under its token and
    /// leaves it at its end.
    #[test]
    fn a_polled_source_leaves_the_epoll_set_at_its_end() {
        let epoll = Polled::default();
        let mut m = moves("off\n", &epoll);
        assert!(!m.unpolled());
        let mut all = Vec::new();
        while !m.ctl.source.ended {
            let (lines, read) = m.read(&epoll);
            read.unwrap();
            all.extend(lines.iter().cloned());
            m.recycle(lines);
        }
        assert_eq!(all, ["off"]);
        let calls = epoll.calls();
        let fd = calls[0].split(' ').nth(1).unwrap().to_string();
        assert_eq!(calls, [format!("add {fd} 3"), format!("delete {fd}")]);
    }

    /// The moves steer the watch named at the start: target 1 of two moves, its olds start afresh, the
    /// mark names it, a refusal names what it still watches, and target 0 stays as it is; `off` and `on`
    /// switch every watch.
    #[test]
    fn the_steered_watch_is_the_one_moved_and_named() {
        let epoll = epoll();
        let mut m = moves_steering("", &epoll, 1);
        let mut ctx = watching();
        ctx.log
            .watches
            .push(watch("other_counter", 0x2000, Access::Write));
        ctx.written = true;
        assert_eq!(m.apply("watch third/8", &mut ctx), None);
        assert_eq!(ctx.steered, [1, 1]);
        assert_eq!(
            (
                ctx.log.watches[0].label.as_str(),
                ctx.log.watches[1].label.as_str()
            ),
            ("counter", "third/8")
        );
        let Some((StreamEvent::Retargeted(r), _)) = ctx.log.events.last() else {
            panic!("no acknowledgement: {:?}", ctx.log.events);
        };
        assert_eq!((r.index, r.watch.label.as_str()), (1, "third/8"));
        assert_eq!(m.apply("watch missing", &mut ctx), None);
        assert_eq!(refused(&ctx).2, "third/8 (0x1000/8)");
        ctx.log.calls.clear();
        assert_eq!(m.apply("off", &mut ctx), None);
        assert_eq!(ctx.log.calls(), ["pause", "flush", "emit Switched"]);
    }
}
