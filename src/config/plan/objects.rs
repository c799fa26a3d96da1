//! The plan's objects stage, `--on SOURCE '(TYPE)$obj.FIELD'`: objects armed as they are allocated, one
//! debug register each (the plan's [`ObjectPlan`]). Where they come from is planned by the source's
//! kind: a kernel allocation tracepoint in the kernel's symbols, BTF and tracefs
//! ([`super::kernel_objects`]), a user-space allocating function in the watched process's files
//! ([`super::user_objects`]); either is checked before anything is armed.

use crate::config::objects;
use crate::error::Result;
use crate::model::watch::Access;

use super::host::Host;
use super::kernel::KernelSide;
use super::options::OnRequest;
use super::{kernel_objects, user_objects};
use super::{ObjectPlan, Scope};

/// The plan's objects stage: `--on`'s source and `$obj` target, planned where the source is (none
/// without `--on`). A user-space source is planned in the watched process ([`super::user_objects`]), a
/// kernel source in the kernel's symbols and BTF; their notes and warnings go to `notes`.
pub fn plan(
    on: Option<&OnRequest>,
    scope: &Scope,
    kernel: &KernelSide,
    access: Access,
    host: &dyn Host,
    notes: &mut Vec<String>,
) -> Result<Option<ObjectPlan>> {
    let Some(on) = on else {
        return Ok(None);
    };
    let plan = match &on.source {
        objects::Source::User(probe) => user_objects::in_process(on, probe, access, scope, notes)?,
        _ => kernel_objects::in_kernel(on, kernel, access, host, notes)?,
    };
    Ok(Some(plan))
}
