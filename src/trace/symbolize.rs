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
    /// The first frame of each context is that context's own ip and is named as it is: the trap's, or,
    /// under kernel frames, where user space entered the kernel (the user registers' ip: after a syscall
    /// instruction, or the very instruction an interrupt or exception stopped, which can be a function's
    /// first byte). Every later one is a return address: the instruction after a call, which for a call
    /// that ends its function is the first byte of the next one; it is named by the byte before it (the
    /// call), with its offset spelled from that function's start, as perf does (`caller+0x20/0x20`, not
    /// `next_function+0x0`). A zero user frame is the end of a frame-pointer walk (the outermost frame's
    /// saved pointer), not a frame: it is dropped.
    pub fn resolve(&mut self, sample: &Sample, chain: &mut Vec<ResolvedFrame>) -> ResolvedFrame {
        chain.clear();
        let mut context = None;
        for f in &sample.frames {
            let first = context.replace(f.context) != Some(f.context);
            let kernel = f.context == Context::Kernel;
            if f.addr == 0 && !kernel {
                continue;
            }
            let frame = if first || f.addr == 0 {
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
mod tests;
