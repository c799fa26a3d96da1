//! `ksymwatch resolve TARGET`: where a target is, according to which file, and whether that file is the
//! running kernel. Arms nothing, so it also answers for another machine's vmlinux (link-time addresses).
//! `resolve --pid PID TARGET`: where it is in that process (which binary, file address, load bias).

use std::path::Path;

use crate::cli::args::ResolveArgs;
use crate::config::symbols::{self, Files};
use crate::config::{debuginfod, process, target};
use crate::error::{Context, Error, Result};

pub fn run(args: ResolveArgs) -> Result<()> {
    let target = target::parse(&args.target).bad_input()?;
    if target.len.is_some() {
        return Err(Error::usage(format!(
            "`{}`: /LEN chooses what `write` watches; `resolve` prints the whole object, so drop the /LEN",
            target.text
        )));
    }
    if let Some(pid) = args.pid {
        let r = process::resolve(Path::new(process::PROC), pid, &target)?;
        let text = if args.json {
            r.to_json()
        } else {
            r.to_string()
        };
        return super::print_answer(&(text + "\n"));
    }
    let mut search = symbols::search(Files {
        kallsyms: &args.kallsyms,
        vmlinux: args.vmlinux.as_deref(),
        system_map: args.system_map.as_deref(),
        notes: &args.kernel_notes,
    });
    let picked = search.pick();
    let picked = debuginfod::fetch_if_needed(
        &mut search,
        picked,
        debuginfod::needs_dwarf(&target),
        args.offline,
    )?;
    let resolver = symbols::open(picked, &search)?;
    let r = symbols::resolve(&resolver, &target, true)?;
    let text = if args.json {
        r.to_json()
    } else {
        r.to_string()
    };
    super::print_answer(&(text + "\n"))
}
