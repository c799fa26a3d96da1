//! The type of a user-space object (`'(struct widget)$obj.count'`): its member's offset and size, and the
//! type's own size, from the DWARF of the file that allocates it (its own `.debug_*` sections, else its
//! separate debug file by build-id, under the process's root first, as [`crate::process`] finds them).

use std::path::Path;

use crate::btf::CastType;
use crate::dwarf::{self, FieldError, MemberInfo};
use crate::path::PathElem;
use crate::process::debug;
use crate::user::elf::Headers;
use crate::user::open_if_regular;

/// Where `path` lands below an object of type `cast` described in `file` (the program or library of
/// process `pid`), and the type's own size. The error is a sentence naming the file and the way out.
pub fn object_member(
    pid: u32,
    file: &Path,
    cast: &CastType,
    path: &[PathElem],
) -> Result<(MemberInfo, Option<u64>), String> {
    let shown = file.display();
    let (f, _) = open_if_regular(file).ok_or_else(|| format!("cannot open {shown}"))?;
    let headers = Headers::read(&f).ok_or_else(|| format!("{shown} is not an ELF file"))?;
    let sections = match debug::find(Path::new("/proc"), pid, &f, &headers, &shown.to_string()) {
        Ok(Some(d)) => d,
        Ok(None) => {
            return Err(format!(
                "{shown} has no DWARF (and no debug file by build-id) to say what `({cast})` is; build it \
                 with -g, install its debug symbols, or give the field as `$obj+OFFSET/LEN`"
            ))
        }
        Err(problem) => return Err(format!("{shown}: {problem}")),
    };
    let explain = |e: FieldError| {
        match e {
        FieldError::NoType { .. } => format!(
            "the DWARF of {shown} describes no `{cast}`; name a type the program defines, or give the \
             field as `$obj+OFFSET/LEN`"
        ),
        other => format!("{shown}: {other}"),
    }
    };
    let member = dwarf::resolve_type(&sections, cast, path).map_err(explain)?;
    let whole = dwarf::resolve_type(&sections, cast, &[])
        .ok()
        .and_then(|m| m.size);
    Ok((member, whole))
}
