//! Turning a sample's raw addresses into named frames, once per hit, for every printer. Kernel frames come
//! from the symbol table and, with `--lines`, their source lines; user frames from the writer's own
//! mappings; all three through the `ksymwatch-symbols` crate's API. Printers only format the
//! [`ResolvedFrame`]s made here; none looks an address up itself, so all of them agree on every name.
//!
//! A flood repeats a handful of call chains, so whole chains are cached too ([`Symbolizer::named`]), by
//! their raw addresses (and, when user frames are involved, the writer's address space): a hit on a known
//! chain costs one hash lookup, and its [`Rendered`] spellings are reused by the printers.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use ksymwatch_symbols::{annotate, LineSource, Origin, UserSymbols};
use rustc_hash::FxHashMap;

use crate::config::symbols::KernelTable;
use crate::perf::record::{Context, Frame, Sample};
use crate::report::{Rendered, ResolvedFrame, SourceLine};

/// The one place addresses become names.
pub struct Symbolizer<'a> {
    kernel: KernelTable<'a>,
    /// Where `kernel` came from: a cached kallsyms table lacks code the kernel created since.
    origin: Origin,
    /// Distinct kernel addresses no symbol covered.
    kernel_misses: u64,
    user: Option<UserSymbols>,
    lines: Option<&'a dyn LineSource>,
    /// DWARF line lookups are far slower than a symbol search and hot paths repeat the same few addresses.
    line_cache: HashMap<u64, Option<Arc<SourceLine>>>,
    /// Kernel frames already named, by address: a flood repeats a few chains, and a cached frame is cloned
    /// by bumping reference counts instead of searching the table and copying names. Cleared when full, so a
    /// day-long run that walks the whole kernel stays bounded.
    kernel_cache: FxHashMap<u64, ResolvedFrame>,
    /// The same for user frames, per process (a process's addresses mean nothing in another one).
    user_cache: FxHashMap<u32, FxHashMap<u64, ResolvedFrame>>,
    user_cached: usize,
    /// Whole chains by raw key (see [`Symbolizer::named`]); cleared when full. Shared with the flight
    /// recorder's kept hits ([`Symbolizer::shared`]), which keep a chain alive after a clear.
    chains: Chains,
    /// By CPU: the chain last named there (see [`Symbolizer::named`]); as many as the kernel has CPUs.
    last: Vec<Option<Last>>,
    /// The key of the sample being named (reused).
    key: Vec<u64>,
    /// Its kernel-context bits while it is made (reused).
    bits: Vec<u64>,
    /// Address-space ids of processes whose chains are cached: a pid that runs exec or exits is
    /// forgotten, and the same pid later gets a fresh id, so no chain of the old program is reused.
    spaces: FxHashMap<u32, u64>,
    next_space: u64,
    /// A chain that cannot be cached (a user frame outside every known mapping), named for one hit.
    uncached: NamedChain,
    /// Where the instruction ending at each `--value` store site starts, by the function that holds it.
    starts: InsnStarts,
}

/// A sample's frames, named: what a printer needs besides the raw sample.
#[derive(Debug, Default)]
pub struct NamedChain {
    /// The writer's instruction pointer.
    pub ip: ResolvedFrame,
    /// Innermost first.
    pub frames: Vec<ResolvedFrame>,
    rendered: Rendered,
    /// It is in the cache: later hits on it may reuse `rendered`.
    cached: bool,
}

impl NamedChain {
    /// The printers' spellings, shared by every hit on this chain; `None` for a chain named for one hit.
    pub fn rendered(&self) -> Option<&Rendered> {
        self.cached.then_some(&self.rendered)
    }
}

/// A CPU's last named chain and the raw fields it was named for.
struct Last {
    pid: u32,
    ip: u64,
    frames: Vec<Frame>,
    chain: Rc<NamedChain>,
}

impl Last {
    /// `sample` is the same chain of the same process: what the chain cache's key holds (the kernel
    /// contexts are in the frames, the address space follows from the pid while it is not forgotten).
    fn is(&self, sample: &Sample) -> bool {
        self.pid == sample.pid && self.ip == sample.ip && self.frames == sample.frames
    }
}

/// The chain cache: each chain under its raw key's 64-bit hash, with the key itself to confirm a match.
/// A hit hashes its key once as it builds it and finds its chain with one probe of a `u64` map; two keys
/// with one hash (never seen, but possible) take turns in the slot, each named again when it comes back.
#[derive(Default)]
struct Chains {
    by_hash: FxHashMap<u64, (Box<[u64]>, Rc<NamedChain>)>,
}

impl Chains {
    /// The chain of `key` (hashed `hash`), if it is the one cached under that hash.
    fn get(&self, hash: u64, key: &[u64]) -> Option<&Rc<NamedChain>> {
        self.by_hash
            .get(&hash)
            .filter(|(k, _)| **k == *key)
            .map(|(_, c)| c)
    }

    fn insert(&mut self, hash: u64, key: &[u64], chain: Rc<NamedChain>) {
        self.by_hash.insert(hash, (key.into(), chain));
    }

    fn len(&self) -> usize {
        self.by_hash.len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }

    fn clear(&mut self) {
        self.by_hash.clear();
    }

    /// Drops the chains of address space `space` (a key's second word).
    fn forget_space(&mut self, space: u64) {
        self.by_hash.retain(|_, (k, _)| k[1] != space);
    }
}

/// One step of the key's hash (FxHash's): a rotate, an xor and a multiply a word.
fn mix(h: u64, word: u64) -> u64 {
    (h.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95)
}

/// Store sites remembered before that cache starts over.
const INSN_STARTS_MAX: usize = 1 << 16;

/// The length of the instruction that ends at each `--value` store site, by (process, ip), as the
/// store-value walk found it (`None`: no start could be found): a flood repeats a few sites. It lives with
/// the symbols because it is dropped with a process's frames when the process execs or exits.
#[derive(Debug, Default)]
pub struct InsnStarts {
    known: FxHashMap<(u32, u64), Option<u8>>,
}

impl InsnStarts {
    /// Process `pid` ran exec or is gone: its addresses mean another program's code, or none.
    pub fn forget(&mut self, pid: u32) {
        self.known.retain(|&(p, _), _| p != pid);
    }

    /// What was found for the site ending at `ip` in `pid`, if it was walked.
    pub fn get(&self, pid: u32, ip: u64) -> Option<Option<u8>> {
        self.known.get(&(pid, ip)).copied()
    }

    /// Remembers what the walk found for a site; a full cache starts over.
    pub fn remember(&mut self, pid: u32, ip: u64, len: Option<u8>) {
        if self.known.len() >= INSN_STARTS_MAX {
            self.known.clear();
        }
        self.known.insert((pid, ip), len);
    }
}

/// Distinct chains remembered before that cache starts over: a flood has a few; each entry holds its
/// frames and one printer's spelling (~2 KB), so the bound is ~2 MB.
const CHAINS_MAX: usize = 1024;

/// Distinct user (process, address) pairs remembered before that cache starts over.
const USER_CACHE_MAX: usize = 1 << 16;

/// Distinct kernel addresses remembered before the cache starts over.
const KERNEL_CACHE_MAX: usize = 1 << 16;

impl<'a> Symbolizer<'a> {
    /// Kernel frames only; user frames stay addresses.
    pub fn new(kernel: impl Into<KernelTable<'a>>) -> Symbolizer<'a> {
        Symbolizer {
            kernel: kernel.into(),
            origin: Origin::Parsed,
            kernel_misses: 0,
            user: None,
            lines: None,
            line_cache: HashMap::new(),
            kernel_cache: FxHashMap::default(),
            user_cache: FxHashMap::default(),
            user_cached: 0,
            chains: Chains::default(),
            last: Vec::new(),
            key: Vec::new(),
            bits: Vec::new(),
            spaces: FxHashMap::default(),
            next_space: 0,
            uncached: NamedChain::default(),
            starts: InsnStarts::default(),
        }
    }

    /// Also names user frames from each writer's mappings.
    pub fn with_user(kernel: impl Into<KernelTable<'a>>, user: UserSymbols) -> Symbolizer<'a> {
        Symbolizer {
            user: Some(user),
            ..Symbolizer::new(kernel)
        }
    }

    /// Also gives kernel frames their file:line (`--lines`).
    pub fn with_lines(mut self, lines: Option<&'a dyn LineSource>) -> Symbolizer<'a> {
        self.lines = lines;
        self
    }

    /// Says the kernel table came from the kallsyms cache.
    pub fn with_origin(mut self, origin: Origin) -> Symbolizer<'a> {
        self.origin = origin;
        self
    }

    fn line(&mut self, addr: u64) -> Option<Arc<SourceLine>> {
        let source = self.lines?;
        self.line_cache
            .entry(addr)
            .or_insert_with(|| {
                let a = annotate(source, addr);
                (!a.location.is_empty()).then(|| {
                    Arc::new(SourceLine {
                        location: a.location,
                        inlined: a.inlined,
                    })
                })
            })
            .clone()
    }

    /// Names the writer's ip and every frame of its chain, into `chain` (cleared first).
    ///
    /// The first frame is the trap's own ip and is named as it is. Every later one is a return address:
    /// the instruction after a call, which for a call that ends its function is the first byte of the next
    /// one; it is named by the byte before it (the call), with its offset spelled from that function's
    /// start, as perf does (`caller+0x20/0x20`, not `next_function+0x0`). A zero user frame is the end of a
    /// frame-pointer walk (the outermost frame's saved pointer), not a frame: it is dropped.
    pub fn resolve(&mut self, sample: &Sample, chain: &mut Vec<ResolvedFrame>) -> ResolvedFrame {
        chain.clear();
        for (i, f) in sample.frames.iter().enumerate() {
            let kernel = f.context == Context::Kernel;
            if f.addr == 0 && !kernel {
                continue;
            }
            let frame = if i == 0 || f.addr == 0 {
                self.frame(sample.pid, f.addr, kernel)
            } else {
                self.return_frame(sample.pid, f.addr, kernel)
            };
            chain.push(frame);
        }
        self.frame(sample.pid, sample.ip, sample.in_kernel())
    }

    /// The frame of return address `addr`: named by its call (`addr - 1`), keeping `addr` itself.
    fn return_frame(&mut self, pid: u32, addr: u64, kernel: bool) -> ResolvedFrame {
        let mut f = self.frame(pid, addr - 1, kernel);
        f.addr = addr;
        if f.sym.is_some() {
            f.off += 1;
        }
        f
    }

    /// Names the writer's ip and chain, from the chain cache when this raw chain was named before. Only
    /// chains whose user frames all fell in a known mapping are cached: one that did not is asked again
    /// next time (its process's maps may since have been read).
    ///
    /// A CPU's hits mostly repeat the one before them there (a flood is a loop on each CPU): the chain
    /// last named on each CPU is kept with the raw fields it was named for (process, ip, frames), and a
    /// hit equal to them takes it with one compare, without making a key or probing the cache.
    pub fn named(&mut self, sample: &Sample) -> &NamedChain {
        let cpu = sample.cpu as usize;
        let again = matches!(self.last.get(cpu), Some(Some(l)) if l.is(sample));
        if !again {
            let chain = self.named_anew(sample);
            if self.last.len() <= cpu {
                self.last.resize_with(cpu + 1, || None);
            }
            match (chain, &mut self.last[cpu]) {
                // The slot's frame vector is reused: chains taking turns on a CPU allocate nothing.
                (Some(chain), Some(l)) => {
                    l.pid = sample.pid;
                    l.ip = sample.ip;
                    l.frames.clear();
                    l.frames.extend_from_slice(&sample.frames);
                    l.chain = chain;
                }
                (Some(chain), slot) => {
                    *slot = Some(Last {
                        pid: sample.pid,
                        ip: sample.ip,
                        frames: sample.frames.clone(),
                        chain,
                    })
                }
                (None, slot) => *slot = None,
            }
        }
        match self.last.get(cpu) {
            Some(Some(l)) => &l.chain,
            _ => &self.uncached,
        }
    }

    /// [`Symbolizer::named`] through the chain cache: the cached chain, or `None` for a chain named for
    /// this hit only (in `self.uncached`).
    fn named_anew(&mut self, sample: &Sample) -> Option<Rc<NamedChain>> {
        let mut hash = self.chain_key(sample);
        if let Some(c) = self.chains.get(hash, &self.key) {
            return Some(Rc::clone(c));
        }
        let mut c = std::mem::take(&mut self.uncached);
        c.ip = self.resolve(sample, &mut c.frames);
        let known = self.user.is_none()
            || std::iter::once(&c.ip)
                .chain(&c.frames)
                .all(|f| f.kernel || f.binary.is_some());
        if !known {
            c.cached = false;
            self.uncached = c;
            return None;
        }
        if self.chains.len() >= CHAINS_MAX {
            self.chains.clear();
            self.spaces.clear();
            // The key may hold an address-space id just dropped; it is made again for the new map.
            hash = self.chain_key(sample);
        }
        let cached = Rc::new(NamedChain {
            rendered: Rendered::new(&c.ip, &c.frames),
            ip: c.ip.clone(),
            frames: c.frames.clone(),
            cached: true,
        });
        self.uncached = c;
        self.chains.insert(hash, &self.key, Rc::clone(&cached));
        Some(cached)
    }

    /// As [`Symbolizer::named`], as a handle to keep: the cached chain itself (a reference count, its
    /// spellings shared with every hit on it), or a copy of a chain named for this hit only.
    pub fn shared(&mut self, sample: &Sample) -> Rc<NamedChain> {
        if self.named(sample).cached {
            if let Some(Some(l)) = self.last.get(sample.cpu as usize) {
                return Rc::clone(&l.chain);
            }
        }
        Rc::new(NamedChain {
            ip: self.uncached.ip.clone(),
            frames: self.uncached.frames.clone(),
            ..NamedChain::default()
        })
    }

    /// The hash of the key last made by [`Symbolizer::chain_key`].
    fn key_hash(&self) -> u64 {
        self.key.iter().fold(0, |h, &w| mix(h, w))
    }

    /// The cache key of `sample`'s chain, into `self.key`, and its hash: ip, address space (`u64::MAX`
    /// when every frame is the kernel's), whether it ran in the kernel, the frame count, the frames'
    /// addresses, then one bit per frame for kernel context.
    fn chain_key(&mut self, sample: &Sample) -> u64 {
        let in_kernel = sample.in_kernel();
        // One pass over the frames for their kernel bits, and whether any is the user's.
        let mut user = !in_kernel;
        let bits = &mut self.bits;
        bits.clear();
        for word in sample.frames.chunks(64) {
            let mut b = 0u64;
            for (i, f) in word.iter().enumerate() {
                let kernel = f.context == Context::Kernel;
                b |= u64::from(kernel) << i;
                user |= !kernel;
            }
            bits.push(b);
        }
        let space = if user {
            let next = &mut self.next_space;
            *self.spaces.entry(sample.pid).or_insert_with(|| {
                *next += 1;
                *next
            })
        } else {
            u64::MAX
        };
        let key = &mut self.key;
        key.clear();
        key.extend_from_slice(&[
            sample.ip,
            space,
            u64::from(in_kernel),
            sample.frames.len() as u64,
        ]);
        key.extend(sample.frames.iter().map(|f| f.addr));
        key.extend_from_slice(bits);
        self.key_hash()
    }

    pub fn frame(&mut self, pid: u32, addr: u64, kernel: bool) -> ResolvedFrame {
        if kernel {
            if let Some(f) = self.kernel_cache.get(&addr) {
                return f.clone();
            }
            let mut fr = ResolvedFrame::unknown(addr, kernel);
            if let Some(s) = self.kernel.symbolize(addr) {
                fr.sym = Some(s.symbol.name.into());
                fr.off = s.offset;
                fr.size = s.symbol.size;
                // The table's own shared name: a reference count, not a copy.
                fr.module = s.symbol.module.cloned();
            } else {
                self.kernel_misses += 1;
            }
            fr.line = self.line(addr);
            if self.kernel_cache.len() >= KERNEL_CACHE_MAX {
                self.kernel_cache.clear();
            }
            self.kernel_cache.insert(addr, fr.clone());
            return fr;
        }
        if let Some(f) = self.user_cache.get(&pid).and_then(|p| p.get(&addr)) {
            return f.clone();
        }
        let mut fr = ResolvedFrame::unknown(addr, kernel);
        if let Some(user) = &mut self.user {
            if let Some(u) = user.lookup(pid, addr) {
                fr.binary = Some(u.binary);
                if let Some((sym, off, size)) = u.sym {
                    fr.sym = Some(sym);
                    fr.off = off;
                    fr.size = size;
                }
                // Only what a mapping answered is kept: an address not found yet is asked again (the user
                // symbols retry a process's maps on a miss, at a bounded rate).
                if self.user_cached >= USER_CACHE_MAX {
                    self.user_cache.clear();
                    self.user_cached = 0;
                }
                self.user_cache
                    .entry(pid)
                    .or_default()
                    .insert(addr, fr.clone());
                self.user_cached += 1;
            } else {
                fr.unnamed = Some(user.why_unnamed(pid));
            }
        } else {
            fr.unnamed = Some("no user-space symbols are loaded for this watch");
        }
        fr
    }

    /// The `--value` store sites' instruction lengths, kept with this session's other per-process caches.
    pub fn insn_starts(&mut self) -> &mut InsnStarts {
        &mut self.starts
    }

    /// What symbol loading left out, for the summary's warnings: user binaries with oversized tables, and
    /// kernel frames a cached table could not name.
    pub fn take_notes(&mut self) -> Vec<String> {
        let mut notes = self
            .user
            .as_mut()
            .map(UserSymbols::take_notes)
            .unwrap_or_default();
        // A table read on first use knows its own origin.
        let origin = self.kernel.origin().unwrap_or(self.origin);
        if origin == Origin::Cached && self.kernel_misses > 0 {
            notes.push(format!(
                "{} kernel address(es) in call chains had no symbol in the cached kallsyms table; code the \
                 kernel created after the cache was written (BPF programs, trampolines) is not in it: run \
                 with --no-symbol-cache to read kallsyms afresh",
                self.kernel_misses
            ));
            self.kernel_misses = 0;
        }
        notes
    }

    /// The user-space symbols, for the session to hand them the kernel's task records (mappings, forks,
    /// execs, exits).
    pub fn user_mut(&mut self) -> Option<&mut UserSymbols> {
        self.user.as_mut()
    }

    /// `pid` ran exec, or exited and is done with: its addresses now belong to another program, or to
    /// none. Its frames and chains are dropped (so a long run over many short-lived processes keeps only
    /// the live ones').
    pub fn forget_process(&mut self, pid: u32) {
        self.starts.forget(pid);
        if let Some(p) = self.user_cache.remove(&pid) {
            self.user_cached -= p.len();
        }
        if let Some(space) = self.spaces.remove(&pid) {
            self.chains.forget_space(space);
        }
        for last in &mut self.last {
            if last.as_ref().is_some_and(|l| l.pid == pid) {
                *last = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ksymwatch_symbols::kallsyms;
    use std::path::Path;

    #[test]
    fn unnamed_kernel_frames_of_a_cached_table_point_at_no_symbol_cache() {
        let table = kallsyms::from_text(
            "ffffffff81000000 T read_zero\nffffffff81000100 T end\n",
            Path::new("fixture"),
        )
        .unwrap();
        let mut parsed = Symbolizer::new(&table);
        parsed.frame(1, 0xffffffffa0000000, true);
        assert!(parsed.take_notes().is_empty());
        let mut cached = Symbolizer::new(&table).with_origin(Origin::Cached);
        cached.frame(1, 0xffffffff81000010, true);
        assert!(cached.take_notes().is_empty(), "every frame was named");
        // Twice the same address: one miss (frames are cached by address).
        cached.frame(1, 0xffffffffa0000000, true);
        cached.frame(1, 0xffffffffa0000000, true);
        let notes = cached.take_notes();
        assert_eq!(notes.len(), 1);
        assert!(notes[0].starts_with("1 kernel address(es)"), "{notes:?}");
        assert!(notes[0].contains("--no-symbol-cache"), "{notes:?}");
    }

    /// A call that is the last instruction of its function returns to the first byte of the next one: the
    /// caller is named (offset from its own start, as perf prints it), never the next function; the trap
    /// ip is named as it is, and a zero user frame ends the chain.
    #[test]
    fn return_addresses_name_their_caller_and_a_zero_user_frame_is_dropped() {
        use crate::perf::record::encode;
        use crate::report::testutil;
        let table = kallsyms::from_text(
            "ffffffff81000000 T store_at_end\nffffffff81000020 T x86_64_start_reservations\n\
             ffffffff81000040 T __pfx_clear_bss\nffffffff81000050 T clear_bss\nffffffff81000100 T end\n",
            Path::new("fixture"),
        )
        .unwrap();
        // The trap ip is exactly a symbol's start (the store was the last instruction before it): it stays.
        let chain = [
            encode::KERNEL,
            0xffffffff81000020,
            0xffffffff81000040,
            encode::USER,
            0x401000,
            0,
        ];
        let sample = testutil::sample(chain[1], 7, 7, 1_000, 0x1000, 0, &chain);
        let mut s = Symbolizer::new(&table);
        let mut frames = Vec::new();
        let ip = s.resolve(&sample, &mut frames);
        assert_eq!(
            ip.display("x").to_string(),
            "x86_64_start_reservations+0x0/0x20"
        );
        let shown: Vec<String> = frames.iter().map(|f| f.display("wr").to_string()).collect();
        assert_eq!(
            shown,
            [
                "x86_64_start_reservations+0x0/0x20",
                "x86_64_start_reservations+0x20/0x20",
                "0x401000 [wr]",
            ],
            "the return address at __pfx_clear_bss names its caller; the 0x0 user frame is gone"
        );
        assert_eq!(
            frames[1].addr, 0xffffffff81000040,
            "the address itself is kept"
        );
    }

    #[test]
    fn kernel_frames_print_like_kallsyms_symbolize() {
        let table = kallsyms::from_text(
            "ffffffff81000000 T read_zero\nffffffff81000100 T end\nffffffffc0000000 t helper\t[mod]\nffffffffc0000100 t helper_end\t[mod]\n",
            Path::new("fixture"),
        )
        .unwrap();
        let mut s = Symbolizer::new(&table);
        let f = s.frame(1, 0xffffffff81000077, true);
        assert_eq!(f.display("x").to_string(), "read_zero+0x77/0x100");
        assert_eq!(f.flame_name(), "read_zero");
        let m = s.frame(1, 0xffffffffc0000001, true);
        assert_eq!(m.display("x").to_string(), "helper+0x1/0x100 [mod]");
        let unknown = s.frame(1, 0xffffffffdead0000, true);
        assert_eq!(unknown.display("x").to_string(), "0xffffffffdead0000");
        assert_eq!(unknown.flame_name(), "[unknown]");
        let user = s.frame(1, 0x401000, false);
        assert_eq!(user.display("writer").to_string(), "0x401000 [writer]");
    }

    /// A hit whose writer is a module's function: the module shows as `[module]` in the ftrace chain, a
    /// `"module"` field in NDJSON frames and `func [module]` in folded stacks; every frame of that module
    /// shares the table's one name (no string per hit).
    #[test]
    fn module_frames_carry_their_module_in_every_printer() {
        use crate::perf::record::encode;
        use crate::report::folded::{Folded, Sink};
        use crate::report::{ftrace::Ftrace, json::Json, testutil, Output};
        use std::io::Write;
        let table = kallsyms::from_text(
            "ffffffff81000000 T vfs_write\nffffffff81000100 T end\n\
             ffffffffc0100000 t nfs_file_write\t[nfs]\nffffffffc0100040 t nfs_end\t[nfs]\n",
            Path::new("f"),
        )
        .unwrap();
        let chain = [encode::KERNEL, 0xffffffffc0100010, 0xffffffff81000080];
        let hits = [
            (
                testutil::sample(chain[1], 7, 7, 1_000, 0x1000, 0, &chain),
                "dd",
                0,
            ),
            (
                testutil::sample(chain[1], 7, 7, 2_000, 0x1000, 0, &chain),
                "dd",
                0,
            ),
        ];
        let watches = [testutil::watch(
            "x",
            0x1000,
            crate::model::watch::Access::Write,
        )];
        let shared = table
            .lookup("nfs_end", None)
            .unwrap()
            .module
            .cloned()
            .unwrap();
        let mut ftrace = Ftrace::new(Vec::new(), Vec::new());
        let mut json = Json::new(Vec::new(), Vec::new());
        let folded_out = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        struct W(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);
        impl Write for W {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.borrow_mut().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut folded = Folded::new(Sink::Lines(Box::new(W(folded_out.clone()))));
        testutil::each_hit(&table, &watches, &hits, |hit| {
            let m = hit.ip.module.as_ref().expect("the ip is in a module");
            assert!(Arc::ptr_eq(m, &shared), "the table's name, shared");
            assert!(hit.chain[1].module.is_none());
            ftrace.hit(hit).unwrap();
            json.hit(hit).unwrap();
            folded.hit(hit).unwrap();
        });
        folded.finish(&crate::report::Summary::default()).unwrap();
        let text = String::from_utf8(ftrace.into_inner().0).unwrap();
        assert!(
            text.contains(" => nfs_file_write+0x10/0x40 [nfs]\n => vfs_write+0x80/0x100\n"),
            "{text}"
        );
        let ndjson = String::from_utf8(json.into_inner().0).unwrap();
        let first: serde_json::Value =
            serde_json::from_str(ndjson.lines().next().unwrap()).unwrap();
        assert_eq!(first["ip"]["module"], "nfs", "{first}");
        assert_eq!(first["chain"][0]["module"], "nfs");
        assert_eq!(first["chain"][0]["sym"], "nfs_file_write");
        assert!(first["chain"][1]["module"].is_null());
        let stacks = String::from_utf8(folded_out.borrow().clone()).unwrap();
        assert_eq!(stacks, "dd;vfs_write;nfs_file_write [nfs] 2\n");
    }

    fn chain_sample(pid: u32, chain: &[u64]) -> Sample {
        use crate::perf::record::{decode, encode, Record, SAMPLE_TYPE};
        let bytes = encode::sample(chain[1], pid, pid, 1, 0x1000, 0, chain);
        let Ok(Record::Sample(s)) = decode(&bytes, SAMPLE_TYPE) else {
            panic!("not a sample")
        };
        s
    }

    /// Chains are cached by raw addresses: a kernel chain once for every process, one with user frames
    /// once per process; forgetting a process drops its chains (and only its); a chain whose user frame
    /// no mapping knows is named for its hit only, and asked again next time.
    #[test]
    fn whole_chains_are_cached_per_address_space() {
        use crate::perf::record::encode::{KERNEL, USER};
        let table = kallsyms::from_text(
            "ffffffff81000000 T read_zero\nffffffff81000100 T end\n",
            Path::new("f"),
        )
        .unwrap();
        let kernel = [KERNEL, 0xffffffff81000077, 0xffffffff81000010];
        let user = [KERNEL, 0xffffffff81000077, USER, 0x401000];
        let mut s = Symbolizer::new(&table);
        for pid in [1, 2, 1] {
            let named = s.named(&chain_sample(pid, &kernel));
            assert_eq!(named.ip.sym.as_deref(), Some("read_zero"));
            assert_eq!(named.frames.len(), 2);
            assert!(named.rendered().is_some_and(|r| !r.needs_comm));
            s.named(&chain_sample(pid, &user));
        }
        assert_eq!(
            s.chains.len(),
            3,
            "1 kernel chain, 1 user chain for each of 2 pids"
        );
        assert!(
            s.named(&chain_sample(1, &user))
                .rendered()
                .is_some_and(|r| r.needs_comm),
            "an unnamed user frame prints the comm"
        );
        s.forget_process(1);
        assert_eq!(s.chains.len(), 2);
        s.named(&chain_sample(1, &user));
        assert_eq!(
            s.chains.len(),
            3,
            "pid 1's new program gets chains of its own"
        );

        // No process has this pid: its user frame is in no mapping.
        let mut s = Symbolizer::with_user(&table, UserSymbols::default());
        let named = s.named(&chain_sample(0x7fff_fff0, &user));
        assert_eq!(named.frames[1].binary, None);
        assert!(named.rendered().is_none());
        assert!(
            s.chains.is_empty(),
            "not cached: the maps are read again next time"
        );
    }

    /// A CPU's last chain is taken again only for the same process, ip and frames; a forgotten process
    /// gets its chains named anew; chains taking turns on one CPU allocate nothing once named.
    #[test]
    fn a_cpus_last_chain_is_reused_only_for_the_same_raw_chain() {
        use crate::perf::record::encode::{KERNEL, USER};
        let table = kallsyms::from_text(
            "ffffffff81000000 T read_zero\nffffffff81000100 T end\n",
            Path::new("f"),
        )
        .unwrap();
        let kernel = [KERNEL, 0xffffffff81000077, 0xffffffff81000010];
        let other = [KERNEL, 0xffffffff81000077, 0xffffffff81000020];
        let user = [KERNEL, 0xffffffff81000077, USER, 0x401000];
        let mut s = Symbolizer::new(&table);
        let a = s.shared(&chain_sample(1, &kernel));
        assert!(Rc::ptr_eq(&a, &s.shared(&chain_sample(1, &kernel))));
        let b = s.shared(&chain_sample(1, &other));
        assert!(!Rc::ptr_eq(&a, &b), "other frames: another chain");
        assert_eq!(b.frames[1].off, 0x20);
        assert!(
            Rc::ptr_eq(&a, &s.shared(&chain_sample(2, &kernel))),
            "an all-kernel chain is one for every process (from the cache)"
        );
        let u1 = s.shared(&chain_sample(1, &user));
        let u2 = s.shared(&chain_sample(2, &user));
        assert!(!Rc::ptr_eq(&u1, &u2), "user frames: one chain per process");
        assert!(Rc::ptr_eq(&u2, &s.shared(&chain_sample(2, &user))));
        s.forget_process(2);
        assert!(
            !Rc::ptr_eq(&u2, &s.shared(&chain_sample(2, &user))),
            "a forgotten process's chain is named anew"
        );
        let samples = [chain_sample(1, &kernel), chain_sample(1, &user)];
        for s2 in &samples {
            s.named(s2);
        }
        let before = crate::testalloc::allocations();
        for _ in 0..100 {
            for s2 in &samples {
                s.named(s2);
            }
        }
        assert_eq!(crate::testalloc::allocations() - before, 0);
    }

    /// Two keys under one hash: each is found only as itself, and the later one takes the slot.
    #[test]
    fn a_shared_hash_never_gives_another_keys_chain() {
        let mut c = Chains::default();
        let first = Rc::new(NamedChain::default());
        let second = Rc::new(NamedChain::default());
        c.insert(7, &[1, 2, 3], Rc::clone(&first));
        assert!(c.get(7, &[1, 2, 3]).is_some_and(|x| Rc::ptr_eq(x, &first)));
        assert!(c.get(7, &[1, 2, 4]).is_none());
        assert!(c.get(8, &[1, 2, 3]).is_none());
        c.insert(7, &[1, 2, 4], Rc::clone(&second));
        assert!(c.get(7, &[1, 2, 3]).is_none());
        assert!(c.get(7, &[1, 2, 4]).is_some_and(|x| Rc::ptr_eq(x, &second)));
        c.forget_space(2);
        assert!(c.is_empty(), "the key's second word is its address space");
    }

    /// A line table with one inlined call at 0x...10 (looked up at addr-1, as return addresses need).
    struct FakeLines;

    impl LineSource for FakeLines {
        fn lines(&self, addr: u64) -> Vec<ksymwatch_symbols::LineFrame> {
            let f = |function: &str, line, inlined| ksymwatch_symbols::LineFrame {
                function: Some(function.into()),
                file: Some("fs/read_write.c".into()),
                line: Some(line),
                inlined,
            };
            match addr {
                0xffffffff8100000f => {
                    vec![f("rw_verify_area", 450, true), f("read_zero", 12, false)]
                }
                0xffffffff81000076 => vec![f("read_zero", 30, false)],
                _ => vec![],
            }
        }
    }

    #[test]
    fn lines_annotate_kernel_frames_and_are_printed() {
        use crate::model::watch::{Access, Watch};
        use crate::perf::record::{decode, encode, Record, SAMPLE_TYPE};
        use crate::report::{ftrace::Ftrace, Hit, Output};
        let table = kallsyms::from_text(
            "ffffffff81000000 T read_zero\nffffffff81000100 T end\n",
            Path::new("f"),
        )
        .unwrap();
        let lines = FakeLines;
        let mut s = Symbolizer::new(&table).with_lines(Some(&lines));
        let f = s.frame(1, 0xffffffff81000010, true);
        let l = f.line.clone().unwrap();
        assert_eq!(l.location, "fs/read_write.c:12");
        assert_eq!(
            l.inlined,
            vec!["rw_verify_area (fs/read_write.c:450) [inlined]".to_string()]
        );
        assert!(
            s.frame(1, 0xffffffff81000050, true).line.is_none(),
            "no line info: no annotation"
        );
        assert!(
            s.frame(1, 0x401000, false).line.is_none(),
            "user frames are not looked up"
        );

        let bytes = encode::sample(
            0xffffffff81000077,
            5,
            5,
            1_000_000,
            0x1000,
            0,
            // The return address 0x11 is named by its call at 0x10, whose line the source knows.
            &[encode::KERNEL, 0xffffffff81000077, 0xffffffff81000011],
        );
        let Record::Sample(sample) = decode(&bytes, SAMPLE_TYPE).unwrap() else {
            panic!()
        };
        let mut chain = Vec::new();
        let ip = s.resolve(&sample, &mut chain);
        let watch = Watch {
            label: "x".into(),
            addr: 0x1000,
            len: 8,
            access: Access::Write,
            module: None,
            per_cpu: None,
        };
        let mut p = Ftrace::new(Vec::new(), Vec::new());
        p.hit(&Hit {
            sample: &sample,
            watch: &watch,
            watch_index: 0,
            comm: "w",
            ip: &ip,
            chain: &chain,
            value: crate::report::Value::NotRead,
            rendered: None,
        })
        .unwrap();
        let text = String::from_utf8(p.into_inner().0).unwrap();
        let want = concat!(
            " => read_zero+0x77/0x100 (fs/read_write.c:30)\n",
            " => rw_verify_area (fs/read_write.c:450) [inlined]\n",
            " => read_zero+0x11/0x100 (fs/read_write.c:12)\n",
        );
        assert!(text.ends_with(want), "{text}");
    }
}
