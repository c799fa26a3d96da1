//! The kernel interface and nothing else: every raw system call (`sys`; the only other `unsafe` reads the mapped ring), the
//! attributes every ring's events share (`attr`), the typed breakpoint event, with the BPF programs a watch's events attach loaded ([`event`]), the ring-buffer readers (`ring`, and [`bpf_ring`] for the hit programs' BPF ring buffers), the pure record decoders
//! ([`record`]; [`hit_record`] for the records the hit programs write), the all-or-nothing arming of a set of events ([`arm`]), why the kernel refused one ([`refusal`]; [`denial`] for a refusal of permission, worded from the process's [`privilege`]), the privilege check
//! ([`privilege`]), the warm-up that overlaps the first open's RCU wait with start-up ([`warmup`]), and the
//! BPF program that reads each hit's value and decides `--if` in the kernel ([`bpf`]), and the `uprobe` PMU's
//! events ([`uprobe`]).
//!
//! Uses only the watch it is asked to arm ([`crate::model::watch::Watch`]), for `--value` the condition
//! and filters compiled into the program, and the shared error type; it
//! knows nothing of symbols, printing or the CLI: its errors speak of the kernel (a ring's pages, a BPF
//! program, RLIMIT_MEMLOCK, CAP_BPF) and leave naming the command-line option that helps to the CLI.

pub mod arm;
pub(crate) mod attr;
pub mod bpf;
pub mod bpf_ring;
pub mod denial;
pub mod event;
pub mod hit_record;
pub mod privilege;
pub mod probe;
pub mod record;
pub mod refusal;
pub(crate) mod ring;
pub(crate) mod sys;
pub mod uprobe;
pub mod warmup;
