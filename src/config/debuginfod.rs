//! What a command needs of debuginfod, in this program's terms. The running kernel's vmlinux replaces
//! the picked source when a target names a struct member or array element (or `--lines` asks for
//! file:line) and the pick has no DWARF, or when a plain symbol is missing from a kallsyms without data
//! symbols (`ksymwatch write jiffies` on a kernel without CONFIG_KALLSYMS_ALL), `DEBUGINFOD_URLS` naming a
//! server. That choice and the fetch are the symbols crate's ([`ksymwatch_symbols::kernel`]); this module
//! says which targets need DWARF and which names a kallsyms must have, builds the client with this
//! program's options (`--offline`, `--debuginfod-max-size`, `--debuginfod-timeout`, progress on stderr),
//! and tells on stderr what was fetched or taken from the cache. Failures are
//! worded with this program's flags in [`crate::config::advice`].

use std::sync::Arc;
use std::time::Duration;

use ksymwatch_symbols::kernel::{Delivered, Fetcher};
use ksymwatch_symbols::PathElem;

use crate::config::progress::Bars;
use crate::model::target::{Base, Target};

/// Suffixes compilers add to a symbol's name (`counter.lto.7`, `f.isra.0`, `__key.123`): a dotted target
/// ending in these names a symbol, not a member, and needs no DWARF.
const NAME_SUFFIXES: &[&str] = &[
    "lto",
    "isra",
    "constprop",
    "part",
    "cold",
    "llvm",
    "localalias",
];

/// The debuginfod options of a command (`--offline`, `--debuginfod-max-size`, `--debuginfod-timeout`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    pub offline: bool,
    pub max_size: Option<u64>,
    pub deadline: Option<Duration>,
}

/// Whether a kernel TARGET names a struct member or an array element, which only DWARF can place.
pub fn needs_dwarf(target: &Target) -> bool {
    // A `(TYPE)` cast takes its members from BTF.
    if !matches!(target.base, Base::Symbol { .. }) || target.cast.is_some() {
        return false;
    }
    target.path.iter().any(|e| match e {
        PathElem::Index(_) => true,
        PathElem::Field(f) => {
            !(f.bytes().all(|b| b.is_ascii_digit()) || NAME_SUFFIXES.contains(&f.as_str()))
        }
    })
}

/// Each symbol among kernel `targets` as the names it may be (longest first): what a kallsyms without data
/// symbols is checked for ([`ksymwatch_symbols::kernel::missing_data_symbol`]). Addresses and module
/// symbols (`MOD:SYM`) are left out: a vmlinux does not have the latter either.
pub fn data_symbols(targets: &[Target]) -> Vec<Vec<String>> {
    targets
        .iter()
        .filter(|t| matches!(t.base, Base::Symbol { .. }) && t.kernel_module().is_none())
        .map(|t| t.symbol_splits().into_iter().map(|(n, _)| n).collect())
        .collect()
}

/// How this command may fetch the running kernel's vmlinux: the client `DEBUGINFOD_URLS` names, with
/// progress bars on stderr, the command's limits, and its temporary file removed on a stop signal.
pub fn fetcher(opts: Options) -> Fetcher {
    match Fetcher::from_env() {
        // Offline, only the cache is read: nothing to show progress of or to limit.
        Fetcher::Client { client, .. } if opts.offline => Fetcher::Client {
            client,
            offline: true,
        },
        Fetcher::Client { client, .. } => {
            let mut client = client
                .with_progress(Arc::new(Bars::stderr()))
                .with_interrupt_cleanup(true);
            if let Some(n) = opts.max_size {
                client = client.with_max_size(n);
            }
            if let Some(d) = opts.deadline {
                client = client.with_deadline(d);
            }
            Fetcher::Client {
                client,
                offline: false,
            }
        }
        other => other,
    }
}

/// Tells on stderr what debuginfod delivered (fetched, or found in its cache).
pub fn tell(delivered: &Delivered) {
    crate::stderr::line(format_args!("ksymwatch: debuginfod: {delivered}"));
}

/// A `--debuginfod-max-size` value: bytes, or a number with K, M, G or T (powers of 1024; `KiB`, `MB`
/// and the like read the same), not zero.
pub fn parse_size(text: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || format!("`{text}` is not a size; use e.g. 3G, 500M or 1048576");
    let n: u64 = num.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(bad()),
    };
    if n == 0 {
        return Err(format!("`{text}`: the size must be greater than zero"));
    }
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("`{text}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::target::parse;

    #[test]
    fn members_and_elements_need_dwarf_compiler_suffixes_do_not() {
        for t in [
            "init_uts_ns.name",
            "x[3]",
            "a.b.c",
            "counter.lto.7.x",
            "s.f[1]",
        ] {
            assert!(needs_dwarf(&parse(t).unwrap()), "{t}");
        }
        for t in [
            "banner",
            "counter.lto.7",
            "f.isra.0",
            "__key.123",
            "0xffff0000",
            "jiffies+8",
        ] {
            assert!(!needs_dwarf(&parse(t).unwrap()), "{t}");
        }
    }

    #[test]
    fn sizes_are_bytes_or_powers_of_1024() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("500m"), Ok(500 << 20));
        assert_eq!(parse_size("3GiB"), Ok(3 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("64 KB"), Ok(64 << 10));
        for bad in ["", "G", "1.5G", "-1", "12X", "0", "0G", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
