//! The plan's objects stage, `--on SOURCE '(TYPE)$obj.FIELD'`: objects armed as they are allocated, one
//! debug register each (the plan's [`ObjectPlan`]). Where they come from is planned by the source's
//! kind: a kernel allocation tracepoint in the kernel's symbols, BTF and tracefs
//! ([`super::kernel_objects`]), a user-space allocating function in the watched process's files
//! ([`super::user_objects`]); either places the `$obj` target's member, which this stage then sizes as a
//! watch, the same way for both. All of it is checked before anything is armed.

use crate::config::objects;
use crate::error::Result;
use crate::model::watch::Access;

use super::host::Host;
use super::kernel::KernelSide;
use super::options::OnRequest;
use super::{kernel_objects, user_objects};
use super::{ObjectPlan, Placed, Scope};

/// The plan's objects stage: `--on`'s source and `$obj` target, planned where the source is (none
/// without `--on`), then the target's watch sized on its member for `access`. A user-space source is
/// planned in the watched process ([`super::user_objects`]), a kernel source in the kernel's symbols and
/// BTF; their notes and warnings go to `notes`.
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
    let placed: Placed = match &on.source {
        objects::Source::User(probe) => user_objects::in_process(on, probe, scope)?,
        _ => kernel_objects::in_kernel(on, kernel, host)?,
    };
    // The member's watch, sized as any watch is (`config::watch`).
    let (target, warnings) = placed.member.sized(access, placed.stand_in)?;
    // A kernel target's /LEN past its member is said by the header's length; in user space, here.
    if matches!(on.source, objects::Source::User(_)) {
        for w in &warnings {
            notes.push(format!("ksymwatch: warning: {w}"));
        }
    }
    notes.extend(placed.note);
    Ok(Some(ObjectPlan {
        reports: placed.reports,
        source: on.source.clone(),
        target,
        select: placed.select,
        attach: placed.attach,
        detail: placed.detail,
        park: placed.park,
        rotate: on.rotate,
        allocators: placed.allocators,
    }))
}
