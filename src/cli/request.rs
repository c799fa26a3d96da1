//! `write`/`rw`'s clap arguments turned into the plain [`WatchRequest`] planning takes: the one place a
//! watch's clap types are read. Reads nothing but the arguments (a bare trailing `--`, which clap does not
//! tell apart from none, is told by the caller). A value whose syntax alone decides it was parsed by clap
//! as it entered (`parsed`), so the request holds it typed.

use crate::cli::args::{OutputArgs, WatchArgs};
use crate::config::request::{OutputRequest, WatchRequest};
use crate::model::watch::Access;

/// The request `args` make for `access`. `bare_dashes`: the command line has a `--` (clap gives an empty
/// command for a bare trailing one, which is a missing command, not a system-wide watch).
pub fn watch(args: WatchArgs, access: Access, bare_dashes: bool) -> WatchRequest {
    let command = (!args.command.is_empty() || bare_dashes).then_some(args.command);
    WatchRequest {
        access,
        command,
        targets: args.targets,
        pids: args.pids,
        cpus: args.cpus,
        on: args.on,
        rotate: args.rotate,
        free: args.free,
        percpu_cpu: args.percpu_cpu,
        buffer_pages: args.buffer_pages,
        realtime: args.realtime,
        strict_hotplug: args.strict_hotplug,
        control: args.control,
        remove_on_exec: args.remove_on_exec,
        per_thread: args.per_thread,
        value: args.value,
        condition: args.condition,
        last: args.last,
        dump_on: args.dump_on,
        duration: args.duration,
        count: args.count,
        symbols: args.symbols.request(),
        output: outputs(args.output),
    }
}

fn outputs(a: OutputArgs) -> OutputRequest {
    OutputRequest {
        json: a.json,
        format: a.format,
        // `-o -` is stdout, as `--control -` is stdin (it wrote a file named `-`).
        stream_file: a.stream_file.filter(|p| p.as_os_str() != "-"),
        summary: a.summary,
        quiet: a.quiet,
        top: a.top,
        folded: a.folded,
        no_status: a.no_status,
        flamegraph: a.flamegraph,
        perfetto: a.perfetto,
        comms: a.comms,
        tids: a.tids,
        cgroups: a.cgroups,
        exclude_idle: a.exclude_idle,
        kernel_only: a.kernel_only,
        user_only: a.user_only,
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use clap::Parser;

    use super::*;
    use crate::cli::args::{Cli, Command};
    use crate::config::request::Format;

    fn request(line: &[&str]) -> WatchRequest {
        let cli = Cli::try_parse_from(line).expect("parses");
        let bare = line.contains(&"--");
        match cli.command {
            Command::Write(args) => watch(args, Access::Write, bare),
            Command::Rw(args) => watch(args, Access::ReadWrite, bare),
            other => panic!("not a watch: {other:?}"),
        }
    }

    /// Every flag lands in its field, typed as clap parsed it; nothing is checked yet.
    #[test]
    fn flags_become_plain_fields() {
        let r = request(&[
            "ksymwatch",
            "rw",
            "jiffies",
            "0x10/4",
            "-p",
            "7",
            "-p",
            "9",
            "--cpus",
            "0-1",
            "--buffer-pages",
            "64",
            "--if",
            "value == 0",
            "--last",
            "5",
            "--dump-on",
            "signal",
            "--format",
            "otlp-json",
            "--folded=out.folded",
            "--comm",
            "bash",
            "--tid",
            "3",
            "--cgroup",
            "/pods/a",
            "--cgroup",
            "pods/b",
            "--vmlinux",
            "/tmp/vmlinux",
            "--offline",
            "--no-symbol-cache",
            "--lines",
        ]);
        assert_eq!(r.access, Access::ReadWrite);
        assert_eq!(r.targets, ["jiffies", "0x10/4"]);
        assert_eq!(r.pids, [7, 9]);
        assert_eq!(r.command, None);
        assert_eq!(r.cpus.as_deref(), Some("0-1"));
        assert_eq!(r.buffer_pages, Some(64));
        assert_eq!(r.condition.as_deref(), Some("value == 0"));
        let dump_on: Vec<&str> = r.dump_on.iter().map(|d| d.text.as_str()).collect();
        assert_eq!((r.last, dump_on.as_slice()), (Some(5), &["signal"][..]));
        assert_eq!(r.dump_on[0].trigger, crate::config::flight::Trigger::Signal);
        assert_eq!(r.realtime, "1");
        assert_eq!(r.output.format, Some(Format::OtlpJson));
        assert_eq!(r.output.folded, Some(PathBuf::from("out.folded")));
        assert!(!r.output.folded_to_stdout());
        assert_eq!(
            (r.output.comms.as_slice(), r.output.tids.as_slice()),
            (&["bash".to_string()][..], &[3][..])
        );
        assert_eq!(r.output.cgroups, ["/pods/a", "pods/b"]);
        assert_eq!(r.symbols.vmlinux, Some(PathBuf::from("/tmp/vmlinux")));
        assert!(r.symbols.debuginfod.offline && r.symbols.lines && !r.symbols.symbol_cache);
    }

    /// `-- CMD` is a command; a bare `--` is an empty one (refused by the plan), and none is `None`.
    #[test]
    fn a_command_after_dashes() {
        let r = request(&["ksymwatch", "write", "counter", "--", "./app", "-v"]);
        assert_eq!(r.command, Some(vec!["./app".into(), "-v".into()]));
        let r = request(&["ksymwatch", "write", "counter", "--"]);
        assert_eq!(r.command, Some(Vec::new()));
        let r = request(&["ksymwatch", "write", "counter", "--folded"]);
        assert_eq!(r.command, None);
        assert!(r.output.folded_to_stdout());
    }
}
