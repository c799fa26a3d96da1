//! `--folded` and `--flamegraph`: hits aggregated into collapsed stacks, `comm;outer;...;inner count`, the
//! input of FlameGraph's `flamegraph.pl` and of inferno, written at exit. With more than one target each
//! stack starts with the target's name, so every target gets its own flame. `--flamegraph` renders the same
//! lines to SVG with inferno.

use std::collections::{BTreeSet, HashMap};
use std::io::{self, Write};

use super::{Header, Hit, Output, StreamEvent, Summary};

/// Where the stacks go at exit.
pub enum Sink {
    /// Collapsed-stack text lines.
    Lines(Box<dyn Write>),
    /// An SVG flame graph with this title.
    Svg(Box<dyn Write>, String),
}

pub struct Folded {
    counts: HashMap<String, u64>,
    /// Target labels, known once the header went by; more than one puts the target at each stack's root.
    targets: Vec<String>,
    sink: Sink,
}

/// A frame or comm as one folded field. `;` separates frames and becomes `:`; the stacks go to a
/// terminal (`--folded` on stdout) or into an SVG, whose XML allows no control characters, so a name is
/// escaped as the text stream escapes it (a newline `\n`, ESC `\x1b`).
fn field(s: &str) -> String {
    super::escape::escaped(s).replace(';', ":")
}

impl Folded {
    pub fn new(sink: Sink) -> Folded {
        Folded {
            counts: HashMap::new(),
            targets: Vec::new(),
            sink,
        }
    }

    /// The collapsed stack of one hit, root first.
    pub fn stack(&self, hit: &Hit<'_>) -> String {
        let mut s = String::new();
        if self.targets.len() > 1 {
            s.push_str(&field(&hit.watch.label));
            s.push(';');
        }
        s.push_str(&field(hit.comm));
        let frames = if hit.chain.is_empty() {
            std::slice::from_ref(hit.ip)
        } else {
            hit.chain
        };
        for f in frames.iter().rev() {
            s.push(';');
            s.push_str(&field(&f.flame_name()));
        }
        s
    }

    /// `stack count` lines, sorted by stack (the order flamegraph.pl expects and a diff likes).
    pub fn lines(&self) -> Vec<String> {
        let mut v: Vec<(&String, &u64)> = self.counts.iter().collect();
        v.sort();
        v.into_iter().map(|(s, n)| format!("{s} {n}")).collect()
    }
}

impl Output for Folded {
    fn header(&mut self, header: &Header<'_>) -> io::Result<()> {
        self.targets = header.watches.iter().map(|w| w.label.clone()).collect();
        Ok(())
    }
    fn armed(&mut self, _: usize, _: &BTreeSet<u32>, _: u64) -> io::Result<()> {
        Ok(())
    }
    fn hit(&mut self, hit: &Hit<'_>) -> io::Result<()> {
        let stack = self.stack(hit);
        *self.counts.entry(stack).or_default() += 1;
        Ok(())
    }
    fn recount(&mut self) {
        self.counts.clear();
    }
    fn counted(&mut self, hit: &Hit<'_>, count: u64) {
        let stack = self.stack(hit);
        *self.counts.entry(stack).or_default() += count;
    }
    fn event(&mut self, _: &StreamEvent, _: u64) -> io::Result<()> {
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn finish(&mut self, _: &Summary) -> io::Result<()> {
        let lines = self.lines();
        match &mut self.sink {
            Sink::Lines(w) => {
                for l in &lines {
                    writeln!(w, "{l}")?;
                }
                w.flush()
            }
            Sink::Svg(w, title) => {
                if lines.is_empty() {
                    // inferno refuses an empty profile; an SVG that says so beats a missing file.
                    return writeln!(
                        w,
                        r#"<svg xmlns="http://www.w3.org/2000/svg" width="600" height="40"><text x="10" y="25">{}: no hits</text></svg>"#,
                        xml_escape(title)
                    )
                    .and_then(|_| w.flush());
                }
                let mut opt = inferno::flamegraph::Options::default();
                opt.title = title.clone();
                opt.count_name = "hits".to_string();
                inferno::flamegraph::from_lines(
                    &mut opt,
                    lines.iter().map(String::as_str),
                    &mut *w,
                )?;
                w.flush()
            }
        }
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::watch::{Access, Watch};
    use crate::perf::record::{encode, Sample};
    use crate::report::testutil::{self, each_hit, table};
    use std::cell::RefCell;
    use std::rc::Rc;

    /// A writer the test can read back after the printer took ownership of it.
    #[derive(Clone, Default)]
    struct Shared(Rc<RefCell<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn sample(chain: &[u64]) -> Sample {
        testutil::decoded(&encode::sample(chain[1], 9, 9, 1, 0x1000, 0, chain))
    }

    fn run(sink: Sink, watches: &[Watch], hits: &[(Sample, &str, usize)]) {
        let mut f = Folded::new(sink);
        let cpus = BTreeSet::from([0]);
        f.header(&testutil::system_wide_header(watches, &cpus, "fixture"))
            .unwrap();
        each_hit(&table(), watches, hits, |hit| f.hit(hit).unwrap());
        f.finish(&Summary::default()).unwrap();
    }

    fn watch(label: &str) -> Watch {
        testutil::watch(label, 0x1000, Access::Write)
    }

    #[test]
    fn stacks_are_root_first_and_counted() {
        let out = Shared::default();
        let chain = testutil::READ_CHAIN;
        let hits = vec![
            (sample(&chain), "dd", 0),
            (sample(&chain), "dd", 0),
            (sample(&chain[..3]), "a;b", 0),
        ];
        run(Sink::Lines(Box::new(out.clone())), &[watch("x")], &hits);
        let text = String::from_utf8(out.0.borrow().clone()).unwrap();
        assert_eq!(
            text,
            "a:b;vfs_read;read_zero 1\ndd;[unknown];vfs_read;read_zero 2\n"
        );
    }

    /// A thread names itself: a name with control characters is escaped as in the text stream, so
    /// `--folded` on a terminal is not driven by it and the SVG stays well-formed XML (a raw `\x01`
    /// made inferno write a file no browser would open); a `;` still cannot split a frame.
    #[test]
    fn control_characters_in_names_are_escaped() {
        let out = Shared::default();
        let chain = testutil::READ_CHAIN;
        let name = "\u{1b}]0;x\u{7}\r\n\u{1}\u{9b}";
        let hits = vec![(sample(&chain[..3]), name, 0)];
        run(Sink::Lines(Box::new(out.clone())), &[watch("x")], &hits);
        let text = String::from_utf8(out.0.borrow().clone()).unwrap();
        assert_eq!(
            text,
            "\\x1b]0:x\\x07\\r\\n\\x01\\u{9b};vfs_read;read_zero 1\n"
        );
        let rendered = Shared::default();
        run(
            Sink::Svg(Box::new(rendered.clone()), "t".into()),
            &[watch("x")],
            &hits,
        );
        let svg = String::from_utf8(rendered.0.borrow().clone()).unwrap();
        assert!(svg.contains("x1b]0:x"), "{svg}");
        let control = |c: char| c.is_control() && !matches!(c, '\n' | '\t' | '\r');
        assert!(!svg.contains(control), "XML allows no control characters");
    }

    /// From the kernel's totals the counts start over, a key's hits added at once.
    #[test]
    fn a_recount_replaces_the_streams_counts() {
        let table = crate::report::testutil::table();
        let watches = [watch("x")];
        let chain = [encode::KERNEL, 0xffffffff81000010, 0xffffffff81000110];
        let hits = vec![(sample(&chain), "dd", 0)];
        let mut f = Folded::new(Sink::Lines(Box::new(Vec::new())));
        crate::report::testutil::each_hit(&table, &watches, &hits, |hit| {
            f.hit(hit).unwrap();
        });
        assert_eq!(f.lines(), ["dd;vfs_read;read_zero 1"]);
        f.recount();
        assert!(f.lines().is_empty());
        crate::report::testutil::each_hit(&table, &watches, &hits, |hit| f.counted(hit, 40));
        crate::report::testutil::each_hit(&table, &watches, &hits, |hit| f.counted(hit, 2));
        assert_eq!(f.lines(), ["dd;vfs_read;read_zero 42"]);
    }

    #[test]
    fn several_targets_root_at_the_target_and_render_with_inferno() {
        let folded = Shared::default();
        let watches = [watch("jiffies"), watch("pid_max")];
        let chain = [encode::KERNEL, 0xffffffff81000010, 0xffffffff81000110];
        let hits = vec![(sample(&chain), "dd", 0), (sample(&chain), "dd", 1)];
        run(Sink::Lines(Box::new(folded.clone())), &watches, &hits);
        let text = String::from_utf8(folded.0.borrow().clone()).unwrap();
        assert_eq!(
            text,
            "jiffies;dd;vfs_read;read_zero 1\npid_max;dd;vfs_read;read_zero 1\n"
        );
        // inferno's own reader accepts what --folded wrote.
        let mut svg = Vec::new();
        inferno::flamegraph::from_lines(
            &mut inferno::flamegraph::Options::default(),
            text.lines(),
            &mut svg,
        )
        .unwrap();
        assert!(String::from_utf8_lossy(&svg).contains("read_zero"));
        let rendered = Shared::default();
        run(
            Sink::Svg(Box::new(rendered.clone()), "ksymwatch".into()),
            &watches,
            &hits,
        );
        let svg = String::from_utf8(rendered.0.borrow().clone()).unwrap();
        assert!(svg.contains("<svg") && svg.contains("pid_max"), "{svg}");
        let empty = Shared::default();
        run(
            Sink::Svg(Box::new(empty.clone()), "t".into()),
            &watches,
            &[],
        );
        assert!(String::from_utf8(empty.0.borrow().clone())
            .unwrap()
            .contains("no hits"));
    }
}
