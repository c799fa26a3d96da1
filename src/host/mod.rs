//! What the tracer reads of the host outside perf and the symbol files: the cgroup v2 hierarchy
//! ([`cgroup`]: a `--cgroup` path to the id the kernel reports, and ids back to paths). Plain file reads
//! of /proc and the cgroup filesystem; no system call of its own (those are [`crate::perf`]'s).

pub mod cgroup;
