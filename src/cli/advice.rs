//! perf's errors, which speak of the kernel (a ring's pages, a BPF program, CAP_BPF), worded for this
//! command line: each remedy that is an option names the option. The one place the flags behind a kernel
//! refusal are named, for refusals at start-up and (through `trace::session::Setup::advise`) while running.

pub use crate::config::plan::no_bpf;
use crate::config::plan::no_firing_event;
use crate::error::{Error, ExitCode};
use crate::perf::bpf::hit_set::LoadError;
use crate::perf::bpf::trigger::TracepointError;
use crate::perf::bpf::ProgramError;
use crate::perf::refusal::{Refusal, Remedy};

/// An arming refusal as the one line the user reads.
pub fn refusal(r: &Refusal) -> String {
    let remedy = match &r.remedy {
        Remedy::None => None,
        Remedy::Kernel(text) => Some(text.as_str()),
        Remedy::SmallerRing => {
            Some("try a smaller --buffer-pages, or raise RLIMIT_MEMLOCK / perf_event_mlock_kb")
        }
        Remedy::NoBpf => Some("a watch without --value/--if still works"),
    };
    r.with_remedy(remedy)
}

/// An arming refusal as the error that ends the run, with the refusal's exit code.
pub fn arming(r: Refusal) -> Error {
    Error::new(r.code, refusal(&r))
}

/// A breakpoint program (`--value`'s, or the hit path's) that could not be had.
pub fn program(e: ProgramError) -> Error {
    match e {
        ProgramError::Unavailable(err) => no_bpf(&err),
        ProgramError::TooManyComparisons { terms } => Error::usage(format!(
            "--if has {terms} comparisons, more than one in-kernel program can hold (a BPF jump reaches \
             32,767 instructions, about 6,000 comparisons); use fewer terms, or ranges (`value >= 10 && \
             value <= 20`) instead of one comparison per value"
        )),
        ProgramError::Refused {
            program: "value",
            err,
            log,
        } => Error::runtime(format!(
            "the kernel's verifier refused the --value program ({err}); please report this with its log: {log}"
        )),
        ProgramError::Build(asm) => Error::runtime("building the in-kernel program").caused_by(asm),
        e @ ProgramError::Refused { .. } => Error::from_cause(e.code(), e),
        ProgramError::NoFiringEvent => no_firing_event(),
    }
}

/// A refusal to load the events' programs (the hit path's, with the watched processes entered).
pub fn loading(e: LoadError) -> Error {
    match e {
        LoadError::Program(e) => program(e),
        LoadError::WatchProcess(e) => Error::new(
            ExitCode::Runtime,
            "adding a process to the watched-process map",
        )
        .caused_by(e),
    }
}

/// A `--dump-on tracepoint:` trigger the kernel would not count.
pub fn tracepoint(e: TracepointError) -> Error {
    Error::new(
        e.code(),
        format!("--dump-on tracepoint:{}: {}", e.tracepoint, e.why),
    )
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;
    use crate::error::ExitCode;
    use crate::perf::event::{OpenError, Stage};
    use crate::perf::refusal::explain;

    fn refused(stage: Stage, errno: i32) -> Refusal {
        let e = OpenError {
            cpu: 0,
            tid: None,
            stage,
            err: io::Error::from_raw_os_error(errno),
            bp: None,
        };
        explain(&e, &[]).nothing_armed()
    }

    /// The remedies that are options name them; the kernel's facts and the exit code are kept.
    #[test]
    fn a_refusal_names_the_option_that_helps() {
        let e = arming(refused(Stage::Mmap, libc::ENOMEM));
        assert_eq!(e.code, ExitCode::Arm);
        assert_eq!(
            e.to_string(),
            "cpu 0: cannot map the perf ring buffer: Cannot allocate memory (os error 12); try a smaller \
             --buffer-pages, or raise RLIMIT_MEMLOCK / perf_event_mlock_kb; nothing was armed"
        );
        let bpf = refusal(&refused(Stage::Bpf, libc::EINVAL));
        assert!(
            bpf.starts_with("cpu 0: cannot attach the BPF program to the breakpoint: ")
                && bpf.ends_with("; a watch without --value/--if still works; nothing was armed"),
            "{bpf}"
        );
    }

    /// Program errors keep their exit codes: not permitted 4, a condition too long 2, a verifier refusal 1.
    #[test]
    fn program_errors_name_value_and_if() {
        let e = program(ProgramError::Unavailable(io::Error::from_raw_os_error(
            libc::EPERM,
        )));
        assert_eq!(e.code, ExitCode::NotPermitted);
        assert!(e.to_string().starts_with("--value and --if read the value in the kernel with BPF, but loading a BPF program was refused"), "{e}");
        let e = program(ProgramError::TooManyComparisons { terms: 12000 });
        assert_eq!(e.code, ExitCode::Usage);
        assert!(
            e.to_string().starts_with("--if has 12000 comparisons"),
            "{e}"
        );
        let e = program(ProgramError::Refused {
            program: "value",
            err: io::Error::from_raw_os_error(libc::EINVAL),
            log: "0: r0 = 0 | 1: exit".into(),
        });
        assert_eq!(e.code, ExitCode::Runtime);
        assert!(e.to_string().contains("refused the --value program"), "{e}");
        assert!(
            e.to_string().ends_with("its log: 0: r0 = 0 | 1: exit"),
            "{e}"
        );
    }

    /// A tracefs event with no raw tracepoint is the user's to change (2), named as it was given.
    #[test]
    fn a_tracepoint_error_names_dump_on() {
        use crate::perf::bpf::trigger::Refused;
        let e = tracepoint(TracepointError {
            tracepoint: "syscalls:sys_enter_getppid".into(),
            why: Refused::NoRawTracepoint("sys_enter_getppid".into()),
        });
        assert_eq!(e.code, ExitCode::Usage);
        assert!(
            e.to_string().starts_with(
                "--dump-on tracepoint:syscalls:sys_enter_getppid: the kernel has no raw tracepoint \
                 `sys_enter_getppid`"
            ),
            "{e}"
        );
    }
}
