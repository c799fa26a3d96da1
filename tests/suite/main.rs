//! The root crate's one integration-test binary: one module per area, sharing [`util`].
//!
//! Live modules (`live_*`, `check`, parts of `bad_input` and `resolve_cli`) arm real breakpoints and take
//! CPU 1 offline and back. Such a test is a `live_test!` (or `live_kernel_test!`, both in `util`): an
//! ignored `#[test]` whose body holds the machine-wide lock of `util::live()` (the hotplug tests take it
//! in their own setup). A test that cannot run here
//! prints `SKIP: <test>: <reason>` (see `util::skip`), which `scripts/test` counts. Some kernels refuse
//! hardware breakpoints on kernel addresses: a test whose subject is not a kernel address watches a helper
//! process's memory (it runs alike on both kinds of machine), and one whose subject is a kernel address
//! takes `util::live_kernel()`, which skips with the shared probe's reason where they are refused.

#[macro_use]
mod util;

mod bad_input;
mod check;
mod debuginfod_cli;
mod dry_run;
mod live_arm;
mod live_bugs;
mod live_bugs2;
mod live_cache;
mod live_cgroup;
mod live_contended;
mod live_control;
mod live_count_filters;
mod live_count_objects;
mod live_exact;
mod live_exact_closed;
mod live_exited;
mod live_flight;
mod live_hotplug;
mod live_hunt;
mod live_module;
mod live_objects;
mod live_olds_reuse;
mod live_otlp;
mod live_output;
mod live_perfetto;
mod live_process;
mod live_process_wide;
mod live_realtime;
mod live_refusal;
mod live_rollback;
mod live_samples;
mod live_store_values;
mod live_thread_values;
mod live_totals;
mod live_typed;
mod live_uprobe;
mod live_uprobe_objects;
mod live_value;
mod live_watch;
mod properties;
mod resolve_cli;
mod resolve_pid;
