//! The plan's objects stage, `--on SOURCE '(TYPE)$obj.FIELD'`: objects armed as they are allocated, one
//! debug register each ([`ObjectPlan`]). Where they come from is planned by the source's kind: a kernel
//! allocation tracepoint in the kernel's symbols, BTF and tracefs ([`super::kernel_objects`]), a
//! user-space allocating function in the watched process's files ([`super::user_objects`]); either is
//! checked before anything is armed.

use crate::config::objects::{self, Allocators};
use crate::error::Result;
use crate::model::watch::{Access, Watch};
use crate::perf::bpf;

use super::host::Host;
use super::kernel::KernelSide;
use super::options::OnRequest;
use super::Scope;
use super::{kernel_objects, user_objects};

/// `--on SOURCE '(TYPE)$obj.FIELD'`: objects armed as the kernel allocates them, one debug register each.
#[derive(Debug, Clone)]
pub struct ObjectPlan {
    pub source: objects::Source,
    pub target: objects::ObjectTarget,
    pub select: bpf::objects::Select,
    /// Where the allocation program is attached.
    pub attach: bpf::objects::Attach,
    /// A tracepoint source: which argument or field is the object, and what was not checked (the header's
    /// parenthesis after the source).
    pub detail: Option<String>,
    /// Where a free slot's breakpoint waits: kernel text, or a process's first page, which nothing writes.
    pub park: u64,
    pub rotate: bool,
    /// `-p` and `--comm`: only objects these processes or tasks allocate.
    pub allocators: Allocators,
}

/// Debug registers a CPU has: the most objects armed at once.
const OBJECT_SLOTS: usize = 4;

impl ObjectPlan {
    /// A free slot's watch.
    pub fn parked(&self, slot: usize) -> Watch {
        Watch {
            label: format!("$obj slot {slot} (free)"),
            addr: self.park & !(u64::from(self.target.len) - 1),
            len: self.target.len,
            access: self.target.access,
            module: None,
            per_cpu: None,
        }
    }

    /// Every slot, parked (the execution keeps as many as the debug registers free allow).
    pub fn slots(&self) -> Vec<Watch> {
        (0..OBJECT_SLOTS).map(|i| self.parked(i)).collect()
    }

    /// The header's line: what is watched, from where, which requests are taken.
    pub fn describe(&self) -> String {
        let size = match self.select.size {
            Some((bpf::objects::SizeFrom::Requested | bpf::objects::SizeFrom::AtEntry, n)) => {
                format!(", {n}-byte requests")
            }
            Some((bpf::objects::SizeFrom::Cache(_), n)) => {
                format!(", caches of {n}-byte objects or more")
            }
            None => String::new(),
        };
        let mut by = Vec::new();
        if !self.allocators.pids.is_empty() {
            let pids: Vec<String> = self.allocators.pids.iter().map(u32::to_string).collect();
            by.push(format!("process {}", pids.join(", ")));
        }
        if !self.allocators.comms.is_empty() {
            by.push(format!("tasks named {}", self.allocators.comms.join(", ")));
        }
        let by = if by.is_empty() {
            String::new()
        } else {
            format!(" allocated by {}", by.join(" and "))
        };
        let detail = self
            .detail
            .as_ref()
            .map_or(String::new(), |d| format!(" ({d})"));
        format!(
            "# objects: {} from {}{detail}{size}{by}, len={} access={}{}",
            self.target.text,
            self.source,
            self.target.len,
            self.target.access.letters(),
            if self.rotate {
                ", the oldest evicted when every register is busy"
            } else {
                ""
            }
        )
    }
}

/// The plan's objects stage: `--on`'s source and `$obj` target, planned where the source is (none
/// without `--on`). A user-space source is planned in the watched process ([`super::user_objects`]), a
/// kernel source in the kernel's symbols and BTF.
pub fn plan(
    on: Option<&OnRequest>,
    scope: &Scope,
    kernel: &KernelSide,
    access: Access,
    host: &dyn Host,
) -> Result<Option<ObjectPlan>> {
    let Some(on) = on else {
        return Ok(None);
    };
    let plan = match &on.source {
        objects::Source::User(probe) => user_objects::in_process(on, probe, access, scope)?,
        _ => kernel_objects::in_kernel(on, kernel, access, host)?,
    };
    Ok(Some(plan))
}
