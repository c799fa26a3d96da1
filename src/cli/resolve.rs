//! `ksymwatch resolve TARGET`: where a target is, according to which file, and whether that file is the
//! running kernel. Arms nothing, so it also answers for another machine's vmlinux (link-time addresses).
//! `resolve --pid PID TARGET`: where it is in that process (which binary, file address, load bias).
//! `resolve '(TYPE)BASE.FIELD'`: the member BTF names at that base, its type and size.

use std::path::Path;

use ksymwatch_symbols::kernel::{self, KernelRequest};
use ksymwatch_symbols::{Resolver, Source};

use crate::cli::args::ResolveArgs;
use crate::config::advice::SymbolsContext;
use crate::config::request::SymbolRequest;
use crate::config::symbols;
use crate::config::{kernel_source, process, typed};
use crate::error::{Context, Error, Result};
use crate::model::target;
use crate::model::target::{Base, Target};

/// `resolve`'s command line as plain values.
struct Query {
    target: String,
    json: bool,
    pid: Option<u32>,
    symbols: SymbolRequest,
}

pub fn run(args: ResolveArgs) -> Result<()> {
    let args = Query {
        target: args.target,
        json: args.json,
        pid: args.pid,
        // `resolve` opens the files it is given; `--force`, `--lines` and the cache are a watch's.
        symbols: args.files.request(false, false, true),
    };
    let answered = answer(&args);
    // After an answer only: a refusal stays one line.
    if answered.is_ok() {
        if let Some(note) = typed::btf_note(&args.symbols.btf) {
            crate::stderr::line(format_args!("ksymwatch: note: {note}"));
        }
    }
    answered
}

fn answer(args: &Query) -> Result<()> {
    let target = target::parse(&args.target).bad_input()?;
    if target.len.is_some() {
        return Err(Error::usage(format!(
            "`{}`: /LEN chooses what `write` watches; `resolve` prints the whole object, so drop the /LEN",
            target.text
        )));
    }
    let types = typed::Types::new(&args.symbols.btf);
    if target.cast.is_some() {
        return typed(args, &target, &types);
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
    // The source is the symbols crate's choice, as for a watch: DWARF a member path needs is fetched first.
    let mut request = request(args, &target, kernel_source::needs_dwarf(&target));
    let chosen = kernel::choose(&mut request).bad_symbols()?;
    if let Some(d) = &chosen.delivered {
        kernel_source::tell(d);
    }
    // Without DWARF, BTF may still know the variable's type: `SYMBOL.FIELD` as a typed target.
    if !matches!(chosen.picked, Source::Vmlinux(_)) {
        if let Some(t) = typed::btf_variable(&types, &target)? {
            return typed(args, &t, &types);
        }
    }
    let resolver = open(request, chosen)?;
    let r = symbols::resolve(&resolver, &target, true)?;
    let text = if args.json {
        r.to_json()
    } else {
        r.to_string()
    };
    super::print_answer(&(text + "\n"))
}

/// A typed target: its base resolved as a plain target would be (in the process with `--pid`), then
/// the member from BTF.
fn typed(args: &Query, target: &Target, types: &typed::Types) -> Result<()> {
    let base = typed::base_target(target);
    let (addr, label, source) = match (&base.base, args.pid) {
        (Base::Address(a), _) => (*a, base.text.clone(), None),
        (Base::Symbol { .. }, Some(pid)) => {
            let r = process::resolve(Path::new(process::PROC), pid, &base)?;
            let source = format!("{} of process {pid}", r.found.object.display());
            (r.addr, base.text.clone(), Some(source))
        }
        (Base::Symbol { .. }, None) => {
            let mut request = request(args, &base, false);
            let chosen = kernel::choose(&mut request).bad_symbols()?;
            let resolver = open(request, chosen)?;
            let r = symbols::resolve(&resolver, &base, true)?;
            // A file that is not the running kernel places the base at its link address; say which.
            let source = format!("{}, kernel: {}", r.source, r.kernel_match);
            (r.watch_addr(), r.target, Some(source))
        }
    };
    let mut t = typed::resolve(types, target, addr, &label)?;
    t.base_source = source;
    let text = if args.json {
        t.to_json()
    } else {
        t.to_string()
    };
    super::print_answer(&(text + "\n"))
}

/// What `resolve` asks of the kernel's symbols for `target`: DWARF when `dwarf`, and the target's symbol
/// as a data symbol a kallsyms must have ([`kernel_source::request`]). Kallsyms is read as named, not
/// through the cache: the cache is a watch's.
fn request(args: &Query, target: &Target, dwarf: bool) -> KernelRequest {
    kernel_source::request(&args.symbols, dwarf, std::slice::from_ref(target))
}

/// Opens the chosen source: a kallsyms without data symbols cannot place `jiffies`, so when it lacks the
/// name the running kernel's vmlinux is fetched and opened beside it ([`kernel::lookup`]); what
/// debuginfod delivered is told before any error opening it.
fn open(request: KernelRequest, chosen: kernel::Chosen) -> Result<Resolver> {
    let found = kernel::lookup(request, chosen);
    if let Some(d) = &found.delivered {
        kernel_source::tell(d);
    }
    found.resolver.bad_symbols()
}
