//! What a watch's session is given besides its events, opened before anything is armed and in this
//! order: the kernel's symbol table and `--lines`' line table (a vmlinux without usable line tables fails
//! before any hit), `--cgroup`'s names of the writers' cgroups (from the v2 hierarchy, looked up here
//! once), the printers the options ask for (their files created before the stop signals are blocked),
//! `--control`'s source with its target resolver, `--last`'s recorder with its tracepoints attached, the
//! stop signals blocked, and the CPU hotplug follower.

use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::os::fd::AsFd;
use std::path::Path;

use ksymwatch_symbols::VmlinuxLines;

use crate::cli::advice;
use crate::cli::gives_way::GivesWay;
use crate::cli::otlp;
use crate::cli::output_file::{self, Named};
use crate::config::plan::{Destination, Outputs, Stream, WatchPlan};
use crate::config::request::Format;
use crate::config::symbols::{FileSymbols, KernelTable};
use crate::error::{Context, ExitCode, Result};
use crate::host::cgroup::{CgroupError, Hierarchy, Names};
use crate::model::cgroup::Cgroup;
use crate::perf::bpf::trigger::Tracepoint;
use crate::perf::sys::{self, SignalFd};
use crate::report::cgroup::CgroupNames;
use crate::report::folded::{Folded, Sink};
use crate::report::ftrace::Ftrace;
use crate::report::json::Json;
use crate::report::otlp::Otlp;
use crate::report::perfetto::{Clocks, Perfetto};
use crate::report::sent::{Ledger, Sent};
use crate::report::status::Status;
use crate::report::{Output, Quiet, Tee};
use crate::stderr::{self, Stderr};
use crate::trace::control::Control;
use crate::trace::flight::Recorder;
use crate::trace::hotplug::Hotplug;
use crate::trace::moves::Controller;

/// The session's parts, opened by [`Parts::open`].
pub struct Parts<'p> {
    /// The table call chains are named from.
    pub symbols: KernelTable<'p>,
    /// `--lines`: the vmlinux's line table.
    pub lines: Option<VmlinuxLines<'p>>,
    /// Every printer, in the order they run.
    pub out: Tee,
    /// `--control`: where commands come from, and how their targets are resolved.
    pub control: Option<Controller<'p>>,
    /// `--cgroup`: the writers' cgroups named from the hierarchy.
    pub cgroups: Option<CgroupNames>,
    /// `--last`: the flight recorder.
    pub recorder: Option<Recorder>,
    pub signals: SignalFd,
    pub hotplug: Hotplug,
}

impl<'p> Parts<'p> {
    /// Opens `plan`'s parts, in the order the module says; `title` names the session (`--flamegraph`'s).
    pub fn open(plan: &'p WatchPlan, title: &str) -> Result<Parts<'p>> {
        let (kernel, running, flight) = (plan.kernel(), plan.running(), plan.flight());
        let symbols = kernel.symbols().chains()?;
        let lines = line_source(kernel.symbols().files(), running.lines())?;
        let cgroups = cgroup_names(&plan.filter().cgroups, Hierarchy::find);
        let out = outputs(plan.outputs(), title)?;
        let control = match plan.control() {
            Some(control) => Some(Controller {
                source: Control::open(control.path())?,
                resolve: Box::new(|t, access| control.resolver().resolve(t, access)),
                access: plan.access(),
            }),
            None => None,
        };
        // `--last`'s tracepoints are attached before arming: one the kernel refuses fails the run before
        // any breakpoint is set.
        let recorder = match flight {
            Some(f) => {
                let tracepoints = f
                    .tracepoints()
                    .map(|(group, name)| {
                        Tracepoint::attach(group, name).map_err(advice::tracepoint)
                    })
                    .collect::<Result<Vec<_>>>()?;
                Some(Recorder::new(f, tracepoints))
            }
            None => None,
        };
        // The stop signals (and `--flight`'s dump signal) are blocked before arming: a Ctrl-C from then on
        // is read by the loop, which releases the breakpoints, instead of killing us with events
        // half-set-up. (A launched command was started before: it must not inherit the blocked signals.)
        let dump_signal: &[libc::c_int] = match flight {
            Some(f) if f.on_signal() => &[libc::SIGUSR1],
            _ => &[],
        };
        let signals =
            SignalFd::stop_signals_and(dump_signal).or_exit(ExitCode::Runtime, "signalfd")?;
        let (hotplug, warning) = Hotplug::new(plan.cpus().follow.clone(), running.strict_hotplug());
        if let Some(w) = warning {
            stderr::line(format_args!("ksymwatch: warning: {w}"));
        }
        Ok(Parts {
            symbols,
            lines,
            out,
            control,
            cgroups,
            recorder,
            signals,
            hotplug,
        })
    }
}

/// The line table `--lines` asks for, from the vmlinux's own files; none without them.
fn line_source(files: Option<&FileSymbols>, lines: bool) -> Result<Option<VmlinuxLines<'_>>> {
    Ok(match files {
        Some(files) if lines => Some(files.line_source()?),
        _ => None,
    })
}

/// `--cgroup`'s names for the hits' cgroup ids, from the v2 hierarchy (`find`) the `cgroups` were found
/// in; none without the option (the hierarchy is not looked for), or without the hierarchy (the hits keep
/// their ids).
fn cgroup_names(
    cgroups: &[Cgroup],
    find: impl FnOnce() -> std::result::Result<Hierarchy, CgroupError>,
) -> Option<CgroupNames> {
    if cgroups.is_empty() {
        return None;
    }
    let hierarchy = find().ok()?;
    Some(CgroupNames::new(Names::new(hierarchy).into_lookup()))
}

/// The output file `path` of option `flag`, buffered; its write errors name `flag` and `path`.
fn create(path: &Path, flag: &str) -> Result<Box<dyn Write>> {
    let file = BufWriter::new(GivesWay::new(output_file::create(path, flag)?));
    Ok(Box::new(Named::file(file, flag, path)))
}

/// The printers `args` ask for, in the order they run. Files are created now, before anything is armed and
/// before the stop signals are blocked, so a bad path fails at once instead of after a long session (and
/// an open that did block could still be interrupted; see `output_file` for why none does).
fn outputs(args: &Outputs, title: &str) -> Result<Tee> {
    // Written through its own descriptor (a duplicate of fd 1), so each write is one write(2) that can
    // give way to a stop signal (std's stdout buffers lines of its own). Nothing else writes stdout while
    // a session runs.
    let stdout_fd = || -> Result<File> {
        let fd = io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .or_exit(ExitCode::Runtime, "duplicating stdout")?;
        Ok(File::from(fd))
    };
    let stdout = || -> Result<Named<BufWriter<GivesWay<File>>>> {
        let out = BufWriter::with_capacity(1 << 16, GivesWay::new(stdout_fd()?));
        Ok(Named::new(out, "stdout".to_string()))
    };
    // The stream's writers keep the books of which hits' lines went out: a hit whose line was still in
    // the buffer when the output failed was not printed (`report::sent`).
    let ledger = Ledger::default();
    let buffered = |file: File| {
        ledger.taking(BufWriter::with_capacity(
            1 << 16,
            ledger.sending(GivesWay::new(file)),
        ))
    };
    // `--folded` on stdout leaves the stream the text printer's end-of-session report, which has nothing
    // to print there.
    let (format, to, quiet) = match args.stream() {
        Stream::Hits { format, to } => (*format, to, false),
        Stream::Quiet { format, to } => (*format, to, true),
        Stream::FoldedOnStdout => (Format::Text, &Destination::Stdout, true),
    };
    let stream_sink = || -> Result<Box<dyn Write>> {
        match to {
            Destination::File(path) => {
                let file = buffered(output_file::create(path, "--output")?);
                Ok(Box::new(Named::file(file, "--output", path)))
            }
            Destination::Stdout => Ok(Box::new(Named::new(
                buffered(stdout_fd()?),
                "stdout".to_string(),
            ))),
        }
    };
    // stderr carries messages, never the product: its failure must not end the session (crate::stderr).
    let stream: Box<dyn Output> = match (format, quiet) {
        (Format::Json, false) => {
            Box::new(Sent::new(Json::new(stream_sink()?, Stderr), ledger.clone()))
        }
        (Format::Json, true) => Box::new(Quiet::new(Json::new(stream_sink()?, Stderr), Stderr)),
        (Format::OtlpJson, quiet) => {
            let o = Otlp::new(stream_sink()?, Stderr, &otlp::resource(), otlp::clock());
            if quiet {
                Box::new(Quiet::new(o, Stderr))
            } else {
                Box::new(Sent::new(o, ledger.clone()))
            }
        }
        (Format::Text, quiet) => {
            let f = Ftrace::new(stream_sink()?, Stderr).with_top(args.top());
            if quiet {
                Box::new(Quiet::new(f, Stderr))
            } else {
                Box::new(Sent::new(f, ledger.clone()))
            }
        }
    };
    // The status line shares the terminal with a stream on stdout only if stdout is elsewhere; first in the
    // tee so it is cleared before any end-of-session report.
    let status = args.status()
        && io::stderr().is_terminal()
        && (!matches!(
            args.stream(),
            Stream::Hits {
                to: Destination::Stdout,
                ..
            }
        ) || !io::stdout().is_terminal());
    let mut outs: Vec<Box<dyn Output>> = Vec::new();
    if status {
        outs.push(Box::new(Status::new()));
    }
    outs.push(stream);
    if let Some(folded) = args.folded() {
        let sink = match folded {
            Destination::Stdout => Box::new(stdout()?),
            Destination::File(path) => create(path, "--folded")?,
        };
        outs.push(Box::new(Folded::new(Sink::Lines(sink))));
    }
    if let Some(path) = args.flamegraph() {
        let sink = create(path, "--flamegraph")?;
        outs.push(Box::new(Folded::new(Sink::Svg(sink, title.to_string()))));
    }
    if let Some(path) = args.perfetto() {
        let clocks = Clocks {
            monotonic_ns: sys::monotonic_ns(),
            boottime_ns: sys::boottime_ns(),
        };
        outs.push(Box::new(Perfetto::new(
            create(path, "--perfetto")?,
            Some(clocks),
        )));
    }
    Ok(Tee(outs))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    /// Without `--cgroup` the hierarchy is not looked for; without a hierarchy the hits keep their ids; with
    /// both, a hit's cgroup id is named by its path in the hierarchy.
    #[test]
    fn cgroup_names_come_from_the_hierarchy_only_for_cgroup() {
        assert!(cgroup_names(&[], || panic!("looked for a hierarchy without --cgroup")).is_none());
        let root = std::env::temp_dir().join(format!("ksymwatch-parts-{}", std::process::id()));
        std::fs::create_dir_all(root.join("pods/a")).expect("cgroup directories");
        let id = std::fs::metadata(root.join("pods/a"))
            .expect("pods/a")
            .ino();
        let pod = Cgroup {
            path: "/pods/a".into(),
            dir: root.join("pods/a"),
            id,
        };
        let gone = cgroup_names(std::slice::from_ref(&pod), || Err(CgroupError::NoHierarchy));
        assert!(gone.is_none());
        let mountinfo = root.join("mountinfo");
        std::fs::write(
            &mountinfo,
            format!("30 1 0:26 / {} rw - cgroup2 cgroup2 rw\n", root.display()),
        )
        .expect("mountinfo");
        let names = cgroup_names(&[pod], || Hierarchy::from_mountinfo(&mountinfo));
        let named = names.map(|mut n| n.name(id).path.clone());
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(named, Some(Some("/pods/a".to_string())));
    }
}
