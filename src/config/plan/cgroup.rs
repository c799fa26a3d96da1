//! `--cgroup PATH` checked against the rest of the request and found on the host: each argument names one
//! cgroup of the v2 hierarchy (its directory, or its path as `/proc/PID/cgroup` prints it), and the hit
//! program is what keeps only those writers' hits, so a watch whose hits come without one (perf samples:
//! no BPF, or a `--per-thread`/`--remove-on-exec` watch reading no value on a kernel whose program cannot
//! tell which event fired) is refused rather than run unfiltered. Every other watch runs the program, per
//! CPU or on every thread's events, and the program tests the writer's cgroup either way.
//!
//! Why the perf-sample path refuses instead of using perf's own cgroup mode (`PERF_FLAG_PID_CGROUP`, the
//! cgroup directory's descriptor as the pid, cpu-wide events): such an event counts only while a task of
//! that one cgroup runs, so each chosen cgroup would need its own breakpoint on every CPU, a debug register
//! each (four per CPU, shared with every watch); and on a hybrid mount with a v1 `perf_event` controller
//! the kernel takes only that v1 hierarchy's directories, never the unified one's.

use std::io;

use crate::error::{Error, Result};
use crate::host::cgroup::CgroupError;
use crate::model::cgroup::Cgroup;
use crate::perf::bpf;

use super::Hits;

/// The cgroups `--cgroup`'s `args` name, each once, found by `find`; none without the option.
/// `hits` is how the watch's hits come (the plan's delivery): only the hit program tests the writer's
/// cgroup. `bpf` answers whether BPF loads, as the plan asked it (only called for a watch whose hits are
/// perf samples, to say why).
pub fn check<'b>(
    args: &[String],
    hits: Hits,
    bpf: impl FnOnce() -> &'b io::Result<()>,
    find: impl Fn(&str) -> std::result::Result<Cgroup, CgroupError>,
) -> Result<Vec<Cgroup>> {
    let Some(first) = args.first() else {
        return Ok(Vec::new());
    };
    if args.len() > bpf::cgroup::MAX {
        return Err(Error::usage(format!(
            "{} --cgroup options given; at most {} (each costs every trap a test), or give their \
             common parent",
            args.len(),
            bpf::cgroup::MAX
        )));
    }
    let mut out: Vec<Cgroup> = Vec::new();
    for arg in args {
        // An unset variable (`--cgroup "$POD_CGROUP"`) would otherwise name the root: every writer.
        if arg.trim().is_empty() {
            return Err(Error::usage(
                "--cgroup '': an empty path; give the cgroup's path (`/` for every writer), as \
                 `cat /proc/PID/cgroup` prints it on its `0::` line",
            ));
        }
        let c = find(arg).map_err(|e| Error::usage(format!("--cgroup {arg}: {e}")))?;
        if !out.iter().any(|o| o.id == c.id) {
            out.push(c);
        }
    }
    // After the paths: a wrong one is the first thing to fix, whoever runs it; what this machine makes of
    // the watch comes after.
    match hits {
        Hits::Program => Ok(out),
        Hits::Samples => Err(without_program(first, bpf())),
    }
}

/// Why a watch whose hits are perf samples cannot test `--cgroup first`, and the way out: BPF does not
/// load (`bpf`), or it does and the watch is a per-thread one on a kernel whose program cannot tell which
/// event fired (the only other watch the delivery gives perf samples).
fn without_program(first: &str, bpf: &io::Result<()>) -> Error {
    match bpf {
        Err(e) => Error::not_permitted(format!(
            "--cgroup {first}: the writer's cgroup is tested in the kernel by a BPF program, but {}; \
             drop --cgroup (a container's processes can be watched with -p PID instead)",
            bpf::why_unavailable(e)
        )),
        // `--value` would not help: a per-thread program reading values is refused there by the plan.
        Ok(()) => Error::not_permitted(format!(
            "--cgroup {first}: the writer's cgroup is tested by the BPF hit program, which runs on \
             every thread's breakpoint (--per-thread, --remove-on-exec) only where it can tell which \
             event fired, and this kernel lacks {}; drop --per-thread and --remove-on-exec (one \
             breakpoint per CPU runs the program)",
            bpf::repeats::NEEDS
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::error::ExitCode;

    fn find(arg: &str) -> std::result::Result<Cgroup, CgroupError> {
        let path = arg.trim_start_matches("/sys/fs/cgroup/unified");
        match path.trim_start_matches('/') {
            "pods/a" | "pods/b" => Ok(Cgroup {
                path: format!("/{}", path.trim_start_matches('/')),
                dir: PathBuf::from("/sys/fs/cgroup/unified").join(path.trim_start_matches('/')),
                id: if path.ends_with('a') { 0x1a } else { 0x1b },
            }),
            _ => Err(CgroupError::NotFound {
                path: path.into(),
                dir: PathBuf::from("/sys/fs/cgroup/unified").join(path),
            }),
        }
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    const OK: &io::Result<()> = &Ok(());

    #[test]
    fn each_argument_names_one_cgroup_once() {
        let got = check(
            &args(&["/pods/a", "pods/b", "/sys/fs/cgroup/unified/pods/a"]),
            Hits::Program,
            || OK,
            find,
        )
        .expect("found");
        let ids: Vec<u64> = got.iter().map(|c| c.id).collect();
        assert_eq!(ids, [0x1a, 0x1b]);
        assert_eq!(got[1].path, "/pods/b");
        assert!(check(
            &[],
            Hits::Samples,
            || -> &io::Result<()> { unreachable!("asked BPF with nothing to check") },
            find
        )
        .expect("nothing to check")
        .is_empty());
    }

    #[test]
    fn a_missing_cgroup_is_a_usage_error_naming_the_way_out() {
        let e = check(&args(&["/pods/nope"]), Hits::Program, || OK, find).unwrap_err();
        assert_eq!(e.code, ExitCode::Usage);
        let text = e.to_string();
        assert!(
            text.contains("--cgroup /pods/nope") && text.contains("/proc/PID/cgroup"),
            "{text}"
        );
        let e = check(
            &args(&["/pods/a"]),
            Hits::Program,
            || OK,
            |_| Err(CgroupError::NoHierarchy),
        )
        .unwrap_err();
        assert_eq!(e.code, ExitCode::Usage);
        assert!(e.to_string().contains("cgroup2"), "{e}");
    }

    /// An empty argument (an unset variable) is refused, not taken as the root, which keeps every writer.
    #[test]
    fn an_empty_path_is_refused_not_taken_as_the_root() {
        let root = |_: &str| {
            Ok(Cgroup {
                path: "/".into(),
                dir: PathBuf::from("/sys/fs/cgroup/unified"),
                id: 1,
            })
        };
        for arg in ["", " "] {
            let e = check(&args(&["/pods/a", arg]), Hits::Program, || OK, root).unwrap_err();
            assert_eq!(e.code, ExitCode::Usage);
            assert!(e.to_string().contains("empty path"), "{e}");
        }
    }

    /// A watch whose hits are perf samples is refused after its paths are found, for its own reason and
    /// with its own way out; one whose hits come from the program, per CPU or per thread, is not asked
    /// whether BPF loads (its delivery did).
    #[test]
    fn a_watch_without_the_hit_program_is_refused() {
        // Without BPF; with it, the per-thread watch on a kernel whose program cannot tell which event
        // fired (the only other watch whose hits are perf samples).
        let no_bpf = Err(io::Error::from_raw_os_error(libc::EPERM));
        let reasons = [
            (&no_bpf, ["BPF program", "drop --cgroup"]),
            (
                OK,
                [
                    "which event fired",
                    "drop --per-thread and --remove-on-exec",
                ],
            ),
        ];
        for (bpf, needles) in reasons {
            let e = check(&args(&["/pods/a"]), Hits::Samples, || bpf, find).unwrap_err();
            assert_eq!(e.code, ExitCode::NotPermitted);
            let text = e.to_string();
            assert!(text.starts_with("--cgroup /pods/a: "), "{text}");
            assert!(needles.iter().all(|n| text.contains(n)), "{text}");
        }
        // A wrong path first, whatever the machine.
        let e = check(&args(&["/pods/nope"]), Hits::Samples, || OK, find).unwrap_err();
        assert_eq!(e.code, ExitCode::Usage);
        let unasked = || -> &io::Result<()> { unreachable!("asked BPF with the program chosen") };
        let got = check(&args(&["/pods/a"]), Hits::Program, unasked, find).expect("kept");
        assert_eq!(got.len(), 1);
        let many: Vec<String> = (0..=bpf::cgroup::MAX).map(|_| "/pods/a".into()).collect();
        assert_eq!(
            check(&many, Hits::Program, || OK, find).unwrap_err().code,
            ExitCode::Usage
        );
    }
}
