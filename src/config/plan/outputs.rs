//! The request's output options checked against each other: what the stream prints, in which format and
//! where ([`Stream`]), where the end-of-session reports go ([`Outputs`]), and which hits are kept
//! ([`Filter`]).

use std::path::{Path, PathBuf};

use crate::config::request::{Format, OutputRequest};
use crate::error::{Error, Result};
use crate::model::filter::{Filter, Place};

/// Where a product goes: stdout, or a file of its own (`-o FILE`, `--folded=FILE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    Stdout,
    File(PathBuf),
}

/// The stream: what it prints, in which format (`--format`, `--json`), and where (`-o FILE`, or stdout).
/// Every format goes to either place, with or without `--quiet`; only `--folded` on stdout narrows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stream {
    /// Each hit as it comes, then the format's end-of-session report.
    Hits { format: Format, to: Destination },
    /// `--quiet`: no hit, only the format's end-of-session report (with `--summary`'s counts).
    Quiet { format: Format, to: Destination },
    /// `--folded` on stdout without `-o FILE`: stdout carries the stacks, so the stream is the text
    /// printer's, quiet, on stdout, with no counts to print there (`--summary`, `--quiet` and another
    /// format are refused with it): only its summary line, on stderr.
    FoldedOnStdout,
}

impl Stream {
    /// Whether the stream writes stdout (its hits, or its end-of-session report).
    pub fn writes_stdout(&self) -> bool {
        match self {
            Stream::Hits { to, .. } | Stream::Quiet { to, .. } => *to == Destination::Stdout,
            Stream::FoldedOnStdout => true,
        }
    }
}

/// Where a watch's products go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outputs {
    stream: Stream,
    /// How many call chains the text summary lists.
    top: usize,
    folded: Option<Destination>,
    flamegraph: Option<PathBuf>,
    perfetto: Option<PathBuf>,
    /// The live status line may be shown (not `--no-status`).
    status: bool,
    /// Keep the `--summary` counts.
    tally: bool,
}

impl Outputs {
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    pub fn top(&self) -> usize {
        self.top
    }

    pub fn folded(&self) -> Option<&Destination> {
        self.folded.as_ref()
    }

    pub fn flamegraph(&self) -> Option<&Path> {
        self.flamegraph.as_deref()
    }

    pub fn perfetto(&self) -> Option<&Path> {
        self.perfetto.as_deref()
    }

    pub fn status(&self) -> bool {
        self.status
    }

    pub fn tally(&self) -> bool {
        self.tally
    }

    /// stdout carries a product: the stream, or `--folded`'s stacks.
    pub fn stdout_carries_a_product(&self) -> bool {
        self.stream.writes_stdout() || self.folded == Some(Destination::Stdout)
    }
}

/// The outputs `r` asks for and the hits it keeps; two products on stdout, or a contradiction among the
/// filters, are a usage error.
pub fn check(r: &OutputRequest, notes: &mut Vec<String>) -> Result<(Outputs, Filter)> {
    let filter = filter(r, notes)?;
    Ok((Outputs::of(r)?, filter))
}

impl Outputs {
    fn of(r: &OutputRequest) -> Result<Outputs> {
        let format = stream_format(r)?;
        let folded_to_stdout = r.folded_to_stdout();
        // With `-o FILE` the stream and its reports go there: stdout carries the stacks alone either way.
        let instead_of_stream = folded_to_stdout && r.stream_file.is_none();
        if instead_of_stream {
            let flag = match (r.json, format) {
                (true, _) => "--json".to_string(),
                (false, f) => format!("--format {}", f.name()),
            };
            for (set, flag) in [
                (format != Format::Text, flag.as_str()),
                (r.summary, "--summary"),
                (r.quiet, "--quiet"),
            ] {
                if set {
                    return Err(Error::usage(format!(
                        "--folded writes stdout, and so does {flag}; use --folded=FILE"
                    )));
                }
            }
        }
        // `-o -` is stdout, but these write files of their own beside the stream: a `-` would silently
        // become a file named `-`.
        for (path, flag, example) in [
            (&r.flamegraph, "--flamegraph", "flame.svg"),
            (&r.perfetto, "--perfetto", "trace.pftrace"),
        ] {
            if path.as_deref() == Some(Path::new("-")) {
                return Err(Error::usage(format!(
                    "{flag} writes a file of its own beside the stream, and `-` is not stdout there; give a \
                     path, e.g. {flag} {example}"
                )));
            }
        }
        let to = match &r.stream_file {
            Some(path) => Destination::File(path.clone()),
            None => Destination::Stdout,
        };
        let stream = match (instead_of_stream, r.quiet) {
            (true, _) => Stream::FoldedOnStdout,
            (false, true) => Stream::Quiet { format, to },
            (false, false) => Stream::Hits { format, to },
        };
        Ok(Outputs {
            stream,
            top: r.top,
            folded: r.folded.as_ref().map(|p| match folded_to_stdout {
                true => Destination::Stdout,
                false => Destination::File(p.clone()),
            }),
            flamegraph: r.flamegraph.clone(),
            perfetto: r.perfetto.clone(),
            status: !r.no_status,
            tally: r.summary || r.quiet,
        })
    }
}

/// The stream's format: `--format`, or `--json` (which is `--format json`); the two disagreeing is a usage
/// error.
fn stream_format(r: &OutputRequest) -> Result<Format> {
    match (r.json, r.format) {
        (true, Some(f)) if f != Format::Json => Err(Error::usage(format!(
            "--json is --format json, and --format {} was given too; give one of them",
            f.name()
        ))),
        (true, _) => Ok(Format::Json),
        (false, f) => Ok(f.unwrap_or(Format::Text)),
    }
}

/// The hits `r` keeps; a contradiction is a usage error.
fn filter(r: &OutputRequest, notes: &mut Vec<String>) -> Result<Filter> {
    let place = match (r.kernel_only, r.user_only) {
        (true, true) => {
            return Err(Error::usage(
                "--kernel-only and --user-only exclude each other; give one",
            ))
        }
        (true, false) => Place::Kernel,
        (false, true) => Place::User,
        (false, false) => Place::Anywhere,
    };
    Ok(Filter {
        comms: r.comms.iter().map(|c| kernel_comm(c, notes)).collect(),
        tids: r.tids.clone(),
        exclude_idle: r.exclude_idle,
        place,
        // Found on the host by planning (`cgroup`).
        cgroups: Vec::new(),
    })
}

/// The kernel keeps the first 15 bytes of a task's name (TASK_COMM_LEN 16 with its NUL): a longer `--comm`
/// could never match, so it is matched on those 15 (cut at a character boundary), and a note says so.
fn kernel_comm(name: &str, notes: &mut Vec<String>) -> String {
    const KEPT: usize = 15;
    if name.len() <= KEPT || name.starts_with('<') {
        return name.to_string();
    }
    let cut = (0..=KEPT)
        .rev()
        .find(|&i| name.is_char_boundary(i))
        .unwrap_or(0);
    let kept = &name[..cut];
    notes.push(format!(
        "ksymwatch: note: --comm {name}: the kernel keeps only the first 15 bytes of a task's name; matching `{kept}`"
    ));
    kept.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(r: OutputRequest) -> (Stream, bool) {
        let outputs = check(&r, &mut Vec::new()).expect("a usable request").0;
        let on_stdout = outputs.stdout_carries_a_product();
        (outputs.stream, on_stdout)
    }

    /// Every format goes to stdout or `-o FILE`, with or without `--quiet`; `--folded` on stdout takes
    /// stdout from the stream unless `-o FILE` gives the stream a place of its own.
    #[test]
    fn the_stream_is_what_the_flags_ask_for() {
        let file = || Some(PathBuf::from("/tmp/x"));
        let to_file = || Destination::File(PathBuf::from("/tmp/x"));
        let stdout = || Some(PathBuf::from("-"));
        let cases = [
            (
                OutputRequest::default(),
                Stream::Hits {
                    format: Format::Text,
                    to: Destination::Stdout,
                },
                true,
            ),
            (
                OutputRequest {
                    json: true,
                    stream_file: file(),
                    ..Default::default()
                },
                Stream::Hits {
                    format: Format::Json,
                    to: to_file(),
                },
                false,
            ),
            (
                OutputRequest {
                    quiet: true,
                    format: Some(Format::OtlpJson),
                    ..Default::default()
                },
                Stream::Quiet {
                    format: Format::OtlpJson,
                    to: Destination::Stdout,
                },
                true,
            ),
            (
                OutputRequest {
                    quiet: true,
                    stream_file: file(),
                    ..Default::default()
                },
                Stream::Quiet {
                    format: Format::Text,
                    to: to_file(),
                },
                false,
            ),
            (
                OutputRequest {
                    folded: stdout(),
                    ..Default::default()
                },
                Stream::FoldedOnStdout,
                true,
            ),
            (
                OutputRequest {
                    folded: stdout(),
                    stream_file: file(),
                    json: true,
                    ..Default::default()
                },
                Stream::Hits {
                    format: Format::Json,
                    to: to_file(),
                },
                true,
            ),
        ];
        for (r, want, on_stdout) in cases {
            assert_eq!(stream(r.clone()), (want, on_stdout), "{r:?}");
        }
    }
}
