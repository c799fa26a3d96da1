//! The request's output options checked against each other: the stream's format, where the stream and the
//! end-of-session reports go ([`Outputs`]), and which hits are kept ([`Filter`]).

use std::path::{Path, PathBuf};

use crate::config::request::{Format, OutputRequest};
use crate::error::{Error, Result};
use crate::model::filter::{Filter, Place};

/// `--folded`'s destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FoldedTo {
    Stdout,
    File(PathBuf),
}

/// Where a watch's products go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outputs {
    format: Format,
    /// No per-hit stream, only the end-of-session report (`--quiet`, or `--folded` on stdout without
    /// `-o FILE`).
    quiet: bool,
    /// `-o FILE`; stdout otherwise.
    stream_file: Option<PathBuf>,
    /// How many call chains the text summary lists.
    top: usize,
    folded: Option<FoldedTo>,
    flamegraph: Option<PathBuf>,
    perfetto: Option<PathBuf>,
    /// The live status line may be shown (not `--no-status`).
    status: bool,
    /// Keep the `--summary` counts.
    tally: bool,
}

impl Outputs {
    pub fn format(&self) -> Format {
        self.format
    }

    pub fn quiet(&self) -> bool {
        self.quiet
    }

    pub fn stream_file(&self) -> Option<&Path> {
        self.stream_file.as_deref()
    }

    pub fn top(&self) -> usize {
        self.top
    }

    pub fn folded(&self) -> Option<&FoldedTo> {
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
        Ok(Outputs {
            format,
            quiet: r.quiet || instead_of_stream,
            stream_file: r.stream_file.clone(),
            top: r.top,
            folded: r.folded.as_ref().map(|p| match folded_to_stdout {
                true => FoldedTo::Stdout,
                false => FoldedTo::File(p.clone()),
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
