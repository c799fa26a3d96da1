//! Turning a sample's raw addresses into named frames, once per hit, for every printer. Kernel frames come
//! from the symbol table and, with `--lines`, their source lines; user frames from the writer's own
//! mappings; all three through the `ksymwatch-symbols` crate's API. Printers only format the
//! [`ResolvedFrame`]s made here; none looks an address up itself, so all of them agree on every name.

use std::collections::HashMap;
use std::sync::Arc;

use ksymwatch_symbols::{annotate, LineSource, SymbolTable, UserSymbols};
use rustc_hash::FxHashMap;

use crate::perf::record::{Context, Sample};
use crate::report::{ResolvedFrame, SourceLine};

/// The one place addresses become names.
pub struct Symbolizer<'a> {
    kernel: &'a SymbolTable,
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
}

/// Distinct user (process, address) pairs remembered before that cache starts over.
const USER_CACHE_MAX: usize = 1 << 16;

/// Distinct kernel addresses remembered before the cache starts over.
const KERNEL_CACHE_MAX: usize = 1 << 16;

impl<'a> Symbolizer<'a> {
    /// Kernel frames only; user frames stay addresses.
    pub fn new(kernel: &'a SymbolTable) -> Symbolizer<'a> {
        Symbolizer {
            kernel,
            user: None,
            lines: None,
            line_cache: HashMap::new(),
            kernel_cache: FxHashMap::default(),
            user_cache: FxHashMap::default(),
            user_cached: 0,
        }
    }

    /// Also names user frames from each writer's mappings.
    pub fn with_user(kernel: &'a SymbolTable, user: UserSymbols) -> Symbolizer<'a> {
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
    pub fn resolve(&mut self, sample: &Sample, chain: &mut Vec<ResolvedFrame>) -> ResolvedFrame {
        chain.clear();
        for f in &sample.frames {
            chain.push(self.frame(sample.pid, f.addr, f.context == Context::Kernel));
        }
        self.frame(sample.pid, sample.ip, sample.in_kernel())
    }

    pub fn frame(&mut self, pid: u32, addr: u64, kernel: bool) -> ResolvedFrame {
        if kernel {
            if let Some(f) = self.kernel_cache.get(&addr) {
                return f.clone();
            }
            let mut fr = ResolvedFrame::unknown(addr, kernel);
            if let Some(s) = self.kernel.symbolize(addr) {
                fr.sym = Some(s.symbol.name.as_str().into());
                fr.off = s.offset;
                fr.size = s.symbol.size;
                fr.module = s.symbol.module.as_deref().map(Arc::from);
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
            }
        }
        fr
    }

    /// What symbol loading left out (user binaries with oversized tables), for the summary's warnings.
    pub fn take_notes(&mut self) -> Vec<String> {
        self.user
            .as_mut()
            .map(UserSymbols::take_notes)
            .unwrap_or_default()
    }

    /// `pid` ran exec (its name changed): its addresses now belong to another program.
    pub fn forget_process(&mut self, pid: u32) {
        if let Some(p) = self.user_cache.remove(&pid) {
            self.user_cached -= p.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ksymwatch_symbols::kallsyms;
    use std::path::Path;

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
        use crate::config::watch::{Access, Watch};
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
            &[encode::KERNEL, 0xffffffff81000077, 0xffffffff81000010],
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
        })
        .unwrap();
        let text = String::from_utf8(p.into_inner().0).unwrap();
        let want = concat!(
            " => read_zero+0x77/0x100 (fs/read_write.c:30)\n",
            " => rw_verify_area (fs/read_write.c:450) [inlined]\n",
            " => read_zero+0x10/0x100 (fs/read_write.c:12)\n",
        );
        assert!(text.ends_with(want), "{text}");
    }
}
