//! The running kernel's symbols for a tracer, chosen and loaded in one descent ([`load`]): the source
//! the search picks ([`SourceSearch::pick`]), replaced by the running kernel's vmlinux from debuginfod
//! where the pick cannot serve (the caller needs DWARF and the pick has none; a kallsyms without data
//! symbols lacks a symbol the caller names), and loaded with the running kernel's kallsyms read at most
//! once: for the table itself, for a vmlinux's or System.map's relocation and check against the running
//! kernel, and for naming call chains alike.
//!
//! What the caller decides comes in the [`KernelRequest`] (what it needs of the symbols, whether the
//! table may wait for its first use, whether hidden kernel addresses matter); which file answers is
//! decided here, once. Nothing is printed: what debuginfod delivered comes back for the caller to tell.

use std::fmt;

use crate::buildid::{BuildId, MismatchPolicy};
use crate::cache::{self, Origin, SymbolCache};
use crate::debuginfod::{Debuginfod, Fetched, Need, Unfetched};
use crate::error::Error;
use crate::resolve::{Resolver, VmlinuxLines};
use crate::search::SourceSearch;
use crate::source::Source;
use crate::table::SymbolTable;

/// How the running kernel's vmlinux may be had from debuginfod.
#[derive(Debug, Clone)]
pub enum Fetcher {
    /// `DEBUGINFOD_URLS` names no server: nothing is fetched, and the pick stands.
    NoServer,
    /// Servers are named, but there is no cache directory to fetch into.
    NoCache,
    /// This client; `offline`: only what its cache holds, nothing from the network.
    Client { client: Debuginfod, offline: bool },
}

impl Fetcher {
    /// What `DEBUGINFOD_URLS` and the cache variables allow (the client as [`Debuginfod::from_env`]
    /// makes it, online: the caller applies its own options, offline, progress and limits).
    pub fn from_env() -> Fetcher {
        match Debuginfod::from_env() {
            Some(client) => Fetcher::Client {
                client,
                offline: false,
            },
            None => {
                let urls = std::env::var(crate::debuginfod::URLS_ENV).unwrap_or_default();
                match crate::debuginfod::parse_urls(&urls).is_empty() {
                    true => Fetcher::NoServer,
                    false => Fetcher::NoCache,
                }
            }
        }
    }
}

/// What a tracer needs of the running kernel's symbols.
#[derive(Debug)]
pub struct KernelRequest {
    /// Where to look (the files the user named among them); a fetched vmlinux is set as its `vmlinux`.
    pub search: SourceSearch,
    /// A member path, an array element or source lines need DWARF: a pick without it is replaced by the
    /// running kernel's vmlinux from debuginfod, where one can be had.
    pub dwarf: bool,
    /// The data symbols the caller resolves, each as the names it may be (longest first): a kallsyms
    /// without data symbols that has none of one's names is replaced by the running kernel's vmlinux
    /// from debuginfod, where one can be had.
    pub data_symbols: Vec<Vec<String>>,
    /// A picked kallsyms is left to its first use ([`Loaded::Later`]) rather than read now.
    pub later: bool,
    /// Kernel addresses hidden from this user (kptr_restrict) leave an empty kallsyms table rather than
    /// an error: the caller records no kernel frame.
    pub hidden_ok: bool,
    /// The cache kallsyms is read through, if any (only for the real `/proc/kallsyms`).
    pub cache: Option<SymbolCache>,
    pub fetcher: Fetcher,
    /// Arm on a file proven not to be the running kernel ([`MismatchPolicy::Allow`]).
    pub force: bool,
    /// Source lines are asked for: a vmlinux's line tables are built as it is loaded.
    pub lines: bool,
}

/// The running kernel's symbols as [`load`] found them.
#[derive(Debug)]
pub struct KernelSymbols {
    /// The source the search picked, or the vmlinux fetched because DWARF is needed.
    pub picked: Source,
    /// What debuginfod delivered on the way, for the caller to tell.
    pub delivered: Option<Delivered>,
    /// The source loaded, or why it could not be: the caller says it in its turn.
    pub loaded: Result<Loaded, Error>,
}

/// A loaded source of the running kernel's symbols.
#[derive(Debug)]
pub enum Loaded {
    /// A vmlinux or System.map, and the running kernel's kallsyms (call chains are named from it), or
    /// why that could not be read (they are then named from the file's own table, loaded with it). Its
    /// line tables are built where the request asks for source lines.
    File {
        resolver: Box<Resolver>,
        running: Result<SymbolTable, Error>,
    },
    /// The running kernel's kallsyms, and whether it came from the cache.
    Kallsyms(SymbolTable, Origin),
    /// The running kernel's kallsyms, left to its first use.
    Later,
}

/// The running kernel's vmlinux as debuginfod delivered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub build_id: BuildId,
    pub fetched: Fetched,
}

impl fmt::Display for Delivered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let id = &self.build_id;
        match &self.fetched {
            Fetched::Cached(p) => write!(
                f,
                "the running kernel's vmlinux (build-id {id}) from the cache: {}",
                p.display()
            ),
            Fetched::Downloaded { path, bytes, from } => write!(
                f,
                "fetched the running kernel's vmlinux (build-id {id}, {bytes} bytes) from {from} into {}",
                path.display()
            ),
        }
    }
}

/// The running kernel's symbols as `request` asks: the source chosen once and loaded, kallsyms read at
/// most once. A vmlinux that DWARF needs and that cannot be had fails the call; anything else that goes
/// wrong (kallsyms unreadable, a file that cannot serve, a vmlinux for a missing data symbol that cannot
/// be had) is [`KernelSymbols::loaded`]'s error.
pub fn load(mut request: KernelRequest) -> Result<KernelSymbols, Error> {
    let Chosen {
        picked,
        mut delivered,
    } = choose(&mut request)?;
    let answer = |delivered, loaded| KernelSymbols {
        picked: picked.clone(),
        delivered,
        loaded,
    };
    let (file, running) = match &picked {
        Source::Kallsyms(_) if request.later => return Ok(answer(delivered, Ok(Loaded::Later))),
        Source::Kallsyms(_) => match read_kallsyms(&mut request, &picked) {
            Err(e) => return Ok(answer(delivered, Err(e))),
            Ok(Read::Kallsyms(table, origin)) => {
                return Ok(answer(delivered, Ok(Loaded::Kallsyms(table, origin))))
            }
            Ok(Read::Fetched {
                vmlinux,
                delivered: d,
                running,
            }) => {
                delivered = Some(d);
                (vmlinux, running)
            }
        },
        file => (
            file.clone(),
            running_kallsyms(&request.search, request.cache.as_ref()).map(|(t, _)| t),
        ),
    };
    let flags = (request.force, request.lines);
    let loaded = open_file(file, &request.search, running, flags);
    Ok(answer(delivered, loaded))
}

/// The source a request's search picks, replaced by the running kernel's vmlinux from debuginfod where
/// the request needs DWARF and the pick has none: [`load`]'s first step, and [`lookup`]'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    pub picked: Source,
    /// The vmlinux debuginfod delivered for DWARF, for the caller to tell.
    pub delivered: Option<Delivered>,
}

/// The source for `request` ([`Chosen`]), nothing loaded yet: for a caller that looks at the choice
/// before it loads (`resolve` answers `SYMBOL.FIELD` from BTF where no DWARF is to be had). A fetched
/// vmlinux is set as the request's `search.vmlinux`. A vmlinux that DWARF needs and that cannot be had
/// fails the call; without a server the pick stands (its lookup names the ways out).
pub fn choose(request: &mut KernelRequest) -> Result<Chosen, Error> {
    let picked = request.search.pick();
    if !request.dwarf || matches!(picked, Source::Vmlinux(_)) {
        return Ok(Chosen {
            picked,
            delivered: None,
        });
    }
    let need = Need::Dwarf {
        picked: picked.clone(),
    };
    Ok(
        match fetch_running(&mut request.search, need, &request.fetcher)? {
            Some(d) => Chosen {
                picked: Source::Vmlinux(d.fetched.path().to_path_buf()),
                delivered: Some(d),
            },
            None => Chosen {
                picked,
                delivered: None,
            },
        },
    )
}

/// A resolver for a one-off lookup of the request's symbols, on the source [`choose`] gave: a picked
/// kallsyms is read once (through the request's cache) and gives way to the running kernel's vmlinux,
/// opened beside it, when it lacks a data symbol the request names, as in [`load`]. Nothing is named from
/// call chains, so a vmlinux or System.map is opened as [`Resolver::open_source`] opens it: kallsyms read
/// only as far as the file needs (a vmlinux, its relocation markers), not refused when proven not the
/// running kernel (the lookup's answer says which kernel it is), no line tables. The request's `later`,
/// `force` and `lines` are a tracer's, and not looked at.
pub fn lookup(mut request: KernelRequest, chosen: Chosen) -> Lookup {
    // What debuginfod delivered for DWARF came with the choice, for the caller to tell then.
    let picked = chosen.picked;
    let opened = |resolver| Lookup {
        delivered: None,
        resolver,
    };
    if !matches!(picked, Source::Kallsyms(_)) {
        return opened(Resolver::open_source(picked, &request.search));
    }
    match read_kallsyms(&mut request, &picked) {
        Err(e) => opened(Err(e)),
        Ok(Read::Kallsyms(table, _)) => opened(Ok(Resolver::from_kallsyms(
            picked,
            table,
            &request.search.kallsyms,
        ))),
        Ok(Read::Fetched {
            vmlinux,
            delivered,
            running,
        }) => Lookup {
            resolver: Resolver::open_beside(vmlinux, &request.search, running.as_ref()),
            delivered: Some(delivered),
        },
    }
}

/// What [`lookup`] opened.
#[derive(Debug)]
pub struct Lookup {
    /// The vmlinux debuginfod delivered for a data symbol the kallsyms lacks, for the caller to tell
    /// (one delivered for DWARF is the [`Chosen`]'s).
    pub delivered: Option<Delivered>,
    /// The source opened, or why it could not be.
    pub resolver: Result<Resolver, Error>,
}

/// A picked kallsyms as read, or what replaced it.
enum Read {
    /// The running kernel's kallsyms, and whether it came from the cache.
    Kallsyms(SymbolTable, Origin),
    /// The running kernel's vmlinux from debuginfod, for a data symbol the kallsyms lacks; the kallsyms
    /// as read beside it (hidden addresses the error they were).
    Fetched {
        vmlinux: Source,
        delivered: Delivered,
        running: Result<SymbolTable, Error>,
    },
}

/// The picked kallsyms, read once through the request's cache (hidden addresses an empty table where the
/// request allows them); replaced by the running kernel's vmlinux from debuginfod when it holds no data
/// symbols and lacks one the request names. Without a server the kallsyms stands.
fn read_kallsyms(request: &mut KernelRequest, picked: &Source) -> Result<Read, Error> {
    let (table, origin, hidden) = match running_kallsyms(&request.search, request.cache.as_ref()) {
        Ok((table, origin)) => (table, origin, None),
        Err(e @ Error::ZeroedAddresses { .. }) if request.hidden_ok => {
            (SymbolTable::new(Vec::new(), false), Origin::Parsed, Some(e))
        }
        Err(e) => return Err(e),
    };
    let Some(name) = missing_data_symbol(&table, &request.data_symbols) else {
        return Ok(Read::Kallsyms(table, origin));
    };
    let need = Need::DataSymbol {
        name,
        picked: picked.clone(),
    };
    Ok(
        match fetch_running(&mut request.search, need, &request.fetcher)? {
            None => Read::Kallsyms(table, origin),
            Some(delivered) => Read::Fetched {
                vmlinux: Source::Vmlinux(delivered.fetched.path().to_path_buf()),
                delivered,
                // The table stands for call chains as read: hidden addresses stay the error they were.
                running: hidden.map_or(Ok(table), Err),
            },
        },
    )
}

/// A vmlinux or System.map opened beside the running kernel's kallsyms: refused when proven not to be
/// the running kernel (unless `force`), and when the kallsyms path names no kallsyms file at all. What
/// it is asked for later is loaded now, so that a file that cannot give it fails before it is used: its
/// own table where kallsyms could not be read (call chains are then named from it), its line tables
/// with `lines`.
fn open_file(
    file: Source,
    search: &SourceSearch,
    running: Result<SymbolTable, Error>,
    (force, lines): (bool, bool),
) -> Result<Loaded, Error> {
    let resolver = Resolver::open_beside(file, search, running.as_ref())?;
    if !force {
        resolver.check(MismatchPolicy::Refuse)?;
    }
    let running = match running {
        // Unreadable kallsyms costs only call-chain names; a device or FIFO named as kallsyms is a
        // mistake on the command line.
        Err(e) if e.is_wrong_file() => return Err(e),
        Err(e) => {
            resolver.table()?;
            Err(e)
        }
        Ok(t) => Ok(t),
    };
    if lines {
        VmlinuxLines::new(&resolver)?;
    }
    Ok(Loaded::File {
        resolver: Box::new(resolver),
        running,
    })
}

/// The running kernel's symbols from `search.kallsyms`, through `cache` when given (pass one only for the
/// real kallsyms and notes: a made-up kernel must neither use nor overwrite the real one's cache), keyed
/// by the search's build-id (read once for the source search, the debuginfod fetch and the cache alike).
pub fn running_kallsyms(
    search: &SourceSearch,
    cache: Option<&SymbolCache>,
) -> Result<(SymbolTable, Origin), Error> {
    // Unreadable notes leave the key without a build-id, as a kernel without one.
    let build_id = match cache {
        Some(_) => search.running_build_id().ok().flatten(),
        None => None,
    };
    cache::load_kallsyms(&search.kallsyms, build_id, cache)
}

/// The first of `data_symbols` (each the names one symbol may be) that `table` cannot have because it
/// holds no data symbols (a kallsyms without CONFIG_KALLSYMS_ALL): one none of whose names is in the
/// table; its last (shortest) name.
pub fn missing_data_symbol(table: &SymbolTable, data_symbols: &[Vec<String>]) -> Option<String> {
    if table.has_data_symbols() {
        return None;
    }
    data_symbols.iter().find_map(|names| {
        if names.iter().any(|n| table.by_name(n).next().is_some()) {
            return None;
        }
        names.last().cloned()
    })
}

/// The running kernel's vmlinux from the debuginfod cache or servers, `need` saying why the pick does
/// not serve; then `search.vmlinux` names it, as if the user had. `None` when no server is named.
pub fn fetch_running(
    search: &mut SourceSearch,
    need: Need,
    fetcher: &Fetcher,
) -> Result<Option<Delivered>, Error> {
    let refused = |need, problem| Error::NoVmlinux { need, problem };
    let (client, offline) = match fetcher {
        Fetcher::NoServer => return Ok(None),
        Fetcher::NoCache => return Err(refused(need, Unfetched::NoCache)),
        Fetcher::Client { client, offline } => (client, *offline),
    };
    let build_id = match search.running_build_id() {
        Ok(Some(id)) => id.clone(),
        Ok(None) => {
            let notes = search.notes.clone();
            return Err(refused(need, Unfetched::NoBuildId { notes }));
        }
        Err(e) => return Err(refused(need, Unfetched::BuildId(Box::new(e)))),
    };
    let fetched = if offline {
        // The cache is a local file: offline only forbids the network.
        match Debuginfod::cached(client.cache_dir(), &build_id) {
            Some(p) => Fetched::Cached(p),
            None => return Err(refused(need, Unfetched::NotCached { build_id })),
        }
    } else {
        match client.fetch(&build_id) {
            Ok(f) => f,
            Err(e) => return Err(refused(need, Unfetched::Fetch(Box::new(e)))),
        }
    };
    search.vmlinux = Some(fetched.path().to_path_buf());
    Ok(Some(Delivered { build_id, fetched }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{fixture, note};
    use std::path::{Path, PathBuf};

    /// The running made-up kernel's kallsyms: text symbols only (no CONFIG_KALLSYMS_ALL), the fixture's
    /// `_text` moved by KASLR.
    const TEXT_ONLY: &str = "ffffffff9a000000 T _text\nffffffff9a000000 T _stext\n";

    /// A made-up machine under a directory of the test's own: its kallsyms and, when given, its notes.
    fn machine(tag: &str, kallsyms: &str, build_id: Option<&BuildId>) -> (PathBuf, SourceSearch) {
        let dir =
            std::env::temp_dir().join(format!("ksymwatch-kernel-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("proc")).unwrap();
        std::fs::create_dir_all(dir.join("sys/kernel")).unwrap();
        std::fs::write(dir.join("proc/kallsyms"), kallsyms).unwrap();
        if let Some(id) = build_id {
            std::fs::write(dir.join("sys/kernel/notes"), note(b"GNU\0", 3, &id.0)).unwrap();
        }
        let search = SourceSearch::with_root(&dir, None);
        (dir, search)
    }

    /// The fixture vmlinux as the running kernel (its build-id in the notes), with a text-only kallsyms.
    fn fixture_kernel(
        tag: &str,
    ) -> Option<(&'static fixture::Fixture, BuildId, PathBuf, SourceSearch)> {
        let f = fixture::build()?;
        let id = f.build_id();
        let (dir, search) = machine(tag, TEXT_ONLY, Some(&id));
        Some((f, id, dir, search))
    }

    fn request(search: SourceSearch) -> KernelRequest {
        KernelRequest {
            search,
            dwarf: false,
            data_symbols: Vec::new(),
            later: false,
            hidden_ok: false,
            cache: None,
            fetcher: Fetcher::NoServer,
            force: false,
            lines: false,
        }
    }

    fn names(name: &str) -> Vec<Vec<String>> {
        vec![vec![name.to_string()]]
    }

    /// A debuginfod client that may use only its cache, which holds the fixture vmlinux.
    fn cached_fixture(dir: &Path, f: &fixture::Fixture) -> Fetcher {
        let cache = dir.join("debuginfod");
        let at = cache.join(f.build_id().to_string());
        std::fs::create_dir_all(&at).unwrap();
        std::fs::copy(&f.vmlinux, at.join("debuginfo")).unwrap();
        let client = Debuginfod::new(vec!["http://127.0.0.1:9".into()], cache);
        Fetcher::Client {
            client,
            offline: true,
        }
    }

    /// A picked kallsyms is read now, or left to its first use when the caller says so; a kallsyms whose
    /// addresses are hidden is an empty table only for a caller that records no kernel frame.
    #[test]
    fn kallsyms_is_read_now_or_left_to_its_first_use() {
        let (dir, search) = machine("kallsyms", TEXT_ONLY, None);
        let kallsyms = Source::Kallsyms(dir.join("proc/kallsyms"));
        let later = load(KernelRequest {
            later: true,
            ..request(search.clone())
        })
        .unwrap();
        assert_eq!(later.picked, kallsyms);
        assert!(matches!(later.loaded, Ok(Loaded::Later)));
        let now = load(request(search.clone())).unwrap();
        assert!(matches!(now.loaded, Ok(Loaded::Kallsyms(ref t, Origin::Parsed)) if t.len() == 2));
        assert!(now.delivered.is_none());

        std::fs::write(
            dir.join("proc/kallsyms"),
            "0000000000000000 T _text\n0000000000000000 D jiffies\n",
        )
        .unwrap();
        let hidden = load(request(search.clone())).unwrap();
        assert!(matches!(hidden.loaded, Err(Error::ZeroedAddresses { .. })));
        let user_only = load(KernelRequest {
            hidden_ok: true,
            ..request(search)
        })
        .unwrap();
        assert!(matches!(user_only.loaded, Ok(Loaded::Kallsyms(ref t, _)) if t.is_empty()));
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A kallsyms without data symbols that lacks a symbol the caller resolves gives way to the running
    /// kernel's vmlinux from debuginfod, opened beside the kallsyms already read; the pick stays what it
    /// was. Without a server the kallsyms stands (its lookup then names the ways out); a server that
    /// cannot be asked is the load's error, for the caller to raise in its turn.
    #[test]
    fn a_kallsyms_lacking_a_data_symbol_gives_way_to_the_running_vmlinux() {
        let Some((f, id, dir, search)) = fixture_kernel("fallback") else {
            return;
        };
        let kallsyms = Source::Kallsyms(dir.join("proc/kallsyms"));
        let wanted = |fetcher| KernelRequest {
            data_symbols: names("banner"),
            fetcher,
            ..request(search.clone())
        };

        let found = load(wanted(cached_fixture(&dir, f))).unwrap();
        assert_eq!(found.picked, kallsyms);
        let delivered = found.delivered.unwrap();
        assert_eq!(delivered.build_id, id);
        assert!(matches!(delivered.fetched, Fetched::Cached(_)));
        let Ok(Loaded::File { resolver, running }) = found.loaded else {
            panic!("not a file")
        };
        assert_eq!(
            resolver.source(),
            &Source::Vmlinux(delivered.fetched.path().into())
        );
        assert!(resolver.kernel_match().is_match());
        assert_eq!(running.unwrap().len(), 2, "the kallsyms read for the check");
        let banner = resolver
            .resolve("banner", None, &[], Default::default())
            .unwrap();
        assert_eq!(banner.runtime_addr, Some(0xffff_ffff_9a00_01a0));

        // The symbol is there, or no server is named: the kallsyms stands.
        let there = load(KernelRequest {
            data_symbols: names("_stext"),
            ..wanted(cached_fixture(&dir, f))
        })
        .unwrap();
        assert!(matches!(there.loaded, Ok(Loaded::Kallsyms(..))) && there.delivered.is_none());
        let no_server = load(wanted(Fetcher::NoServer)).unwrap();
        assert!(matches!(no_server.loaded, Ok(Loaded::Kallsyms(..))));
        let no_cache = load(wanted(Fetcher::NoCache)).unwrap();
        assert!(matches!(
            no_cache.loaded,
            Err(Error::NoVmlinux {
                need: Need::DataSymbol { ref name, .. },
                problem: Unfetched::NoCache
            }) if name == "banner"
        ));
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// DWARF a pick has none of is had from debuginfod before anything is loaded; a vmlinux that cannot
    /// be had fails the call, and without a server the pick stands (its lookup names the ways out).
    #[test]
    fn dwarf_is_fetched_before_loading_or_the_call_fails() {
        let Some((f, id, dir, search)) = fixture_kernel("dwarf") else {
            return;
        };
        let dwarf = |fetcher| KernelRequest {
            dwarf: true,
            fetcher,
            ..request(search.clone())
        };
        let found = load(dwarf(cached_fixture(&dir, f))).unwrap();
        let vmlinux = Source::Vmlinux(found.delivered.as_ref().unwrap().fetched.path().into());
        assert_eq!(found.picked, vmlinux, "the fetched vmlinux is the pick");
        assert!(matches!(
            found.loaded,
            Ok(Loaded::File { running: Ok(_), .. })
        ));

        let none = load(dwarf(Fetcher::NoServer)).unwrap();
        assert_eq!(none.picked, Source::Kallsyms(dir.join("proc/kallsyms")));
        assert!(matches!(none.loaded, Ok(Loaded::Kallsyms(..))));
        let refused = load(dwarf(Fetcher::NoCache)).unwrap_err();
        assert!(matches!(
            refused,
            Error::NoVmlinux {
                need: Need::Dwarf { .. },
                problem: Unfetched::NoCache
            }
        ));
        // Offline with nothing cached: the build-id it would have asked for.
        let empty = Fetcher::Client {
            client: Debuginfod::new(vec!["http://127.0.0.1:9".into()], dir.join("empty")),
            offline: true,
        };
        let refused = load(dwarf(empty)).unwrap_err();
        assert!(matches!(
            refused,
            Error::NoVmlinux { problem: Unfetched::NotCached { ref build_id }, .. } if *build_id == id
        ));
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A lookup goes by the same choice as a load: DWARF fetched first (told with the choice, not again
    /// by the lookup), a kallsyms lacking a data symbol replaced by the running kernel's vmlinux opened
    /// beside it, a kallsyms that has it answering itself; a file proven not the running kernel is opened
    /// all the same (the answer says which kernel it is).
    #[test]
    fn a_lookup_goes_by_the_loads_choice() {
        let Some((f, _, dir, search)) = fixture_kernel("lookup") else {
            return;
        };
        // Each asks for DWARF or not, and for one data symbol, of a debuginfod cache holding the fixture.
        let asked = |dwarf, name| KernelRequest {
            dwarf,
            data_symbols: names(name),
            fetcher: cached_fixture(&dir, f),
            ..request(search.clone())
        };
        let kallsyms = Source::Kallsyms(dir.join("proc/kallsyms"));

        let mut dwarf = asked(true, "sym");
        let chosen = choose(&mut dwarf).unwrap();
        let vmlinux = Source::Vmlinux(chosen.delivered.as_ref().unwrap().fetched.path().into());
        assert_eq!(chosen.picked, vmlinux);
        let found = lookup(dwarf, chosen);
        assert!(found.delivered.is_none(), "told with the choice");
        assert_eq!(found.resolver.unwrap().source(), &vmlinux);

        let mut data = asked(false, "banner");
        let chosen = choose(&mut data).unwrap();
        assert_eq!((&chosen.picked, &chosen.delivered), (&kallsyms, &None));
        let found = lookup(data, chosen);
        assert!(found.delivered.is_some());
        let resolver = found.resolver.unwrap();
        assert_eq!(resolver.source(), &vmlinux);
        assert!(resolver.kernel_match().is_match());

        let mut there = asked(false, "_stext");
        let chosen = choose(&mut there).unwrap();
        let found = lookup(there, chosen);
        assert!(found.delivered.is_none());
        assert_eq!(found.resolver.unwrap().source(), &kallsyms);

        // Another kernel's vmlinux: a load refuses it, a lookup answers from it.
        let (other, mut mismatched) =
            machine("lookup-other", TEXT_ONLY, Some(&BuildId(vec![7; 20])));
        mismatched.vmlinux = Some(f.vmlinux.clone());
        assert!(load(request(mismatched.clone())).unwrap().loaded.is_err());
        let mut named = request(mismatched);
        let chosen = choose(&mut named).unwrap();
        let resolver = lookup(named, chosen).resolver.unwrap();
        assert!(resolver.kernel_match().is_mismatch());
        std::fs::remove_dir_all(other).unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A System.map is relocated and checked against the kallsyms read for it; a kallsyms path that names
    /// no kallsyms file fails the load once the file itself has been opened, an unreadable one costs only
    /// the call chains' names (then named from the file's own table, loaded with it); source lines the
    /// file cannot give fail the load.
    #[test]
    fn a_system_map_is_checked_against_the_kallsyms_read_for_it() {
        let (dir, mut search) = machine("sysmap", crate::testing::MODULES_KALLSYMS, None);
        let map = dir.join("System.map");
        std::fs::write(
            &map,
            "ffffffff81000000 T _text\nffffffff81000040 T do_thing\n",
        )
        .unwrap();
        search.system_map = Some(map);
        let found = load(request(search.clone())).unwrap();
        let Ok(Loaded::File { resolver, running }) = found.loaded else {
            panic!("not a file")
        };
        assert!(resolver.kernel_match().is_match());
        assert!(running.is_ok());
        // Module symbols come from the same table.
        let foo = resolver
            .resolve_in_module("foo", "foo_flags", None)
            .unwrap();
        assert_eq!(foo.runtime_addr, Some(0xffff_ffff_c000_1088));

        search.kallsyms = PathBuf::from("/dev/null");
        let wrong = load(request(search.clone())).unwrap();
        assert!(matches!(wrong.loaded, Err(ref e) if e.is_wrong_file()));
        search.kallsyms = dir.join("absent");
        let absent = load(request(search.clone())).unwrap();
        let Ok(Loaded::File { resolver, running }) = absent.loaded else {
            panic!("not a file")
        };
        assert!(running.is_err());
        assert!(
            resolver.table_loaded(),
            "chains come from the file's own table, loaded with it"
        );
        // Source lines asked of a file that has none fail the load.
        let lines = load(KernelRequest {
            lines: true,
            ..request(search)
        })
        .unwrap();
        assert!(lines.loaded.is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
