//! "Did you mean" suggestions: which known names (kernel symbols, BTF type names, struct fields) are
//! close to a name that matched nothing, best first.
//!
//! A candidate is close, from best to worst, when it is
//! 1. the same name but for case (`HZ` for `hz`),
//! 2. a few typos away: insertions, deletions, substitutions and swaps of neighbours (`tsak` → `task`)
//!    each count one, case ignored; one typo in a name of three to five bytes, two up to eleven, three
//!    ([`MAX_TYPOS`]) beyond (none below three bytes, where every short name would be one typo away),
//! 3. a longer name that starts with it (`list` → `list_head`),
//! 4. a shorter name it starts with (`tcp_sendmsg_locked_x` → `tcp_sendmsg_locked`; typed too much),
//!    or a two-byte one followed by `_` (`se_vruntime` → `se`, a member path typed with `_` for `.`),
//! 5. a longer name that contains it (`vruntime` → `min_vruntime`),
//! 6. a shorter name that it contains (`my_nvcsw` → `nvcsw`),
//! 7. only when nothing above matched: a name with the same first word (`sched_foo` → `sched_info`,
//!    `sched_class`: at least the family it belongs to).
//!
//! The prefix and substring tiers also ignore case and need three bytes or more of both names (but for
//! that `se_` case), so `x` is not "in" every name nor every name "in" `x`. Within a tier a smaller difference in length ranks first,
//! then the name, so the order is the same on every run. The name itself is never suggested.
//!
//! Speed matters: a failed kallsyms lookup scores all ~122k names of the running kernel before the tool
//! can say so. Scoring allocates nothing for a lowercase candidate. Typos are counted only for candidates
//! within [`MAX_TYPOS`] of the query's length, only along the diagonal band of the table those typos can
//! reach (`len × (2 × MAX_TYPOS + 1)` cells, not `len²`), and the count stops as soon as every path
//! exceeds the bound. Substring searches are linear: the query's searcher is built once for all
//! candidates, and a candidate is looked for in the query only if its first and last two bytes occur
//! there (a table lookup), which rules out nearly all. A query longer than [`MAX_QUERY`] gets no
//! suggestions: no kernel name is that long.
//!
//! Names are compared as bytes, folding ASCII case only: kernel symbols and C identifiers are ASCII.

use memchr::memmem;

/// The most typos a suggestion may be away from the query, however long it is.
pub const MAX_TYPOS: usize = 3;

/// Queries longer than this (the kernel's `KSYM_NAME_LEN`) get no suggestions.
pub const MAX_QUERY: usize = 512;

/// Width of the band of the edit-distance table that [`MAX_TYPOS`] typos can reach.
const BAND: usize = 2 * MAX_TYPOS + 1;

/// How close a candidate is; smaller is better. Ordered by tier, then cost within the tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Score {
    tier: Tier,
    /// Typos for [`Tier::Typos`], the difference in length for the others.
    cost: usize,
}

/// The kinds of closeness, best first (the module docs list them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Tier {
    Case,
    Typos,
    Extends,
    Truncates,
    Contains,
    Within,
    Kin,
}

/// A name that matched nothing, prepared once to be scored against many candidates.
pub struct Query {
    /// The name as typed.
    raw: Vec<u8>,
    /// ASCII-lowercased, to compare ignoring case.
    lower: Vec<u8>,
    /// Typos allowed for this length.
    typos: usize,
    /// Finds the lowercased name in a candidate: built once, reused for every candidate.
    finder: memmem::Finder<'static>,
    /// Which pairs of adjacent (lowercased) bytes occur in the query, a bit each.
    pairs: Box<[u64; 1024]>,
    /// The query's first word and its `_` (`sched_` of `sched_foo`), if it has one of three bytes or more
    /// after any leading underscores.
    word: Option<Vec<u8>>,
}

impl Query {
    /// `name` prepared for scoring.
    pub fn new(name: &str) -> Query {
        let lower = name.to_ascii_lowercase().into_bytes();
        let mut pairs = Box::new([0u64; 1024]);
        for w in lower.windows(2) {
            let i = pair_index(w[0], w[1]);
            pairs[i / 64] |= 1 << (i % 64);
        }
        Query {
            raw: name.as_bytes().to_vec(),
            finder: memmem::Finder::new(&lower).into_owned(),
            word: first_word(&lower),
            lower,
            typos: typos_allowed(name.len()),
            pairs,
        }
    }

    /// How close `candidate` is to the query, or `None` if it is not worth suggesting (or is the query).
    pub fn score(&self, candidate: &[u8]) -> Option<Score> {
        let (q, c) = (self.lower.as_slice(), candidate);
        if q.len() > MAX_QUERY || c.is_empty() || c == self.raw {
            return None;
        }
        let gap = c.len().abs_diff(q.len());
        let score = |tier, cost| Some(Score { tier, cost });
        // With no typos allowed (a name under three bytes) this still finds a difference only in case.
        match bounded_distance(q, c, self.typos) {
            Some(0) => return score(Tier::Case, 0),
            Some(d) => return score(Tier::Typos, d),
            None => {}
        }
        if q.len() < 3 || c.len() < 2 {
            return None;
        }
        if gap == 0 {
            return self.kin(c, gap);
        }
        if c.len() > q.len() {
            if c[..q.len()].eq_ignore_ascii_case(q) {
                score(Tier::Extends, gap)
            } else if self.is_in(c) {
                score(Tier::Contains, gap)
            } else {
                self.kin(c, gap)
            }
        } else if q[..c.len()].eq_ignore_ascii_case(c) && (c.len() >= 3 || q[c.len()] == b'_') {
            score(Tier::Truncates, gap)
        } else if c.len() >= 3 && self.holds(c) {
            score(Tier::Within, gap)
        } else {
            self.kin(c, gap)
        }
    }

    /// [`Tier::Kin`]: `c` starts with the query's first word.
    fn kin(&self, c: &[u8], gap: usize) -> Option<Score> {
        let word = self.word.as_deref()?;
        (c.len() > word.len() && c[..word.len()].eq_ignore_ascii_case(word)).then_some(Score {
            tier: Tier::Kin,
            cost: gap,
        })
    }

    /// Whether the query is in `c`, ignoring case.
    fn is_in(&self, c: &[u8]) -> bool {
        match lowered(c) {
            Some(c) => self.finder.find(&c).is_some(),
            None => self.finder.find(c).is_some(),
        }
    }

    /// Whether `c` (three bytes or more) is in the query, ignoring case. Most candidates' first or last two
    /// bytes are next to each other nowhere in the query, which a table lookup tells without a search.
    fn holds(&self, c: &[u8]) -> bool {
        let n = c.len();
        if !self.has_pair(c[0], c[1]) || !self.has_pair(c[n - 2], c[n - 1]) {
            return false;
        }
        match lowered(c) {
            Some(c) => memmem::find(&self.lower, &c).is_some(),
            None => memmem::find(&self.lower, c).is_some(),
        }
    }

    /// Whether the query has the two bytes `a`, `b` next to each other, ignoring case.
    fn has_pair(&self, a: u8, b: u8) -> bool {
        let i = pair_index(a, b);
        self.pairs[i / 64] & (1 << (i % 64)) != 0
    }
}

/// How many typos a name of `len` bytes may have and still be suggested: one in a few letters, more in a
/// long name, but few enough that a name of ten or so is not close to every other of its shape (with
/// three, `task_strcut` would also suggest `tss_struct` and `desc_struct`).
fn typos_allowed(len: usize) -> usize {
    match len {
        0..=2 => 0,
        3..=5 => 1,
        6..=11 => 2,
        _ => MAX_TYPOS,
    }
}

/// `sched_` of `sched_foo`, `__do_sys_` of `__do_sys_foo`: up to the first `_` after three or more other
/// bytes, if that is not the end of the name.
fn first_word(q: &[u8]) -> Option<Vec<u8>> {
    let start = q.iter().take_while(|&&b| b == b'_').count();
    let end = start + 3 + q.get(start + 3..)?.iter().position(|&b| b == b'_')?;
    (end + 1 < q.len()).then(|| q[..=end].to_vec())
}

/// `c` lowercased, or `None` if it already is (nearly every kernel name: no copy).
fn lowered(c: &[u8]) -> Option<Vec<u8>> {
    c.iter()
        .any(u8::is_ascii_uppercase)
        .then(|| c.to_ascii_lowercase())
}

/// The bit of a pair of bytes, lowercased, in [`Query::pairs`].
fn pair_index(a: u8, b: u8) -> usize {
    usize::from(a.to_ascii_lowercase()) << 8 | usize::from(b.to_ascii_lowercase())
}

/// Up to `max` of `candidates` closest to `name`, best first, each name once. Candidates are names as
/// `str` or as bytes (a symbol table's column, not checked to be UTF-8 until it is suggested).
pub fn best<'a, T>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a T>,
    max: usize,
) -> Vec<&'a T>
where
    T: AsRef<[u8]> + Ord + ?Sized + 'a,
{
    if max == 0 || name.len() > MAX_QUERY {
        return Vec::new();
    }
    let query = Query::new(name);
    let mut scored: Vec<(Score, &T)> = candidates
        .into_iter()
        .filter_map(|c| Some((query.score(c.as_ref())?, c)))
        .collect();
    scored.sort_unstable();
    // A shared first word is a weak hint: only worth giving when there is no better one.
    if scored.first().is_some_and(|(s, _)| s.tier != Tier::Kin) {
        scored.retain(|(s, _)| s.tier != Tier::Kin);
    }
    // Same-named candidates (kallsyms repeats static names) sort together; one suggestion is enough.
    scored.dedup_by_key(|&mut (_, n)| n);
    scored.into_iter().take(max).map(|(_, n)| n).collect()
}

/// Typos between `q` (already lowercase) and `c`, ignoring ASCII case, with a swap of neighbours counting
/// one; `None` once it must exceed `limit` (at most [`MAX_TYPOS`]).
///
/// Only the cells within `limit` of the diagonal of the usual table are computed: any path outside the
/// band already has more than `limit` insertions or deletions. Band slot `t` of row `i` is column
/// `i + t - limit`.
fn bounded_distance(q: &[u8], c: &[u8], limit: usize) -> Option<usize> {
    const FAR: usize = usize::MAX / 2;
    let limit = limit.min(MAX_TYPOS);
    if q.len().abs_diff(c.len()) > limit {
        return None;
    }
    // Rows i - 2, i - 1 and i of the table, as bands. Slot t + 1 holds band slot t; slot 0 and the
    // one past the band stay FAR, so a cell's neighbours need no bounds checks.
    let mut before = [FAR; BAND + 2];
    let mut prev = [FAR; BAND + 2];
    for t in limit..=(2 * limit).min(c.len() + limit) {
        prev[t + 1] = t - limit;
    }
    for i in 1..=q.len() {
        let mut cur = [FAR; BAND + 2];
        let mut row_min = FAR;
        // Columns 0..=c.len() only; i <= q.len() <= c.len() + limit keeps `hi` from underflowing.
        let (lo, hi) = (
            limit.saturating_sub(i),
            (2 * limit).min(c.len() + limit - i),
        );
        for t in lo..=hi {
            let j = i + t - limit;
            let d = if j == 0 {
                i
            } else {
                let (a, b) = (q[i - 1], c[j - 1].to_ascii_lowercase());
                let mut d = (prev[t + 1] + usize::from(a != b))
                    .min(prev[t + 2] + 1)
                    .min(cur[t] + 1);
                if i > 1 && j > 1 && a == c[j - 2].to_ascii_lowercase() && q[i - 2] == b {
                    d = d.min(before[t + 1] + 1);
                }
                d
            };
            cur[t + 1] = d;
            row_min = row_min.min(d);
        }
        if row_min > limit {
            return None;
        }
        before = prev;
        prev = cur;
    }
    let d = prev[c.len() + limit - q.len() + 1];
    (d <= limit).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(a: &str, b: &str, limit: usize) -> Option<usize> {
        bounded_distance(a.to_ascii_lowercase().as_bytes(), b.as_bytes(), limit)
    }

    /// The plain quadratic table, with swaps, to check the band against.
    fn reference(a: &[u8], b: &[u8]) -> usize {
        let mut t = vec![vec![0usize; b.len() + 1]; a.len() + 1];
        for (i, row) in t.iter_mut().enumerate() {
            row[0] = i;
        }
        t[0] = (0..=b.len()).collect();
        for i in 1..=a.len() {
            for j in 1..=b.len() {
                let mut d = (t[i - 1][j - 1] + usize::from(a[i - 1] != b[j - 1]))
                    .min(t[i - 1][j] + 1)
                    .min(t[i][j - 1] + 1);
                if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                    d = d.min(t[i - 2][j - 2] + 1);
                }
                t[i][j] = d;
            }
        }
        t[a.len()][b.len()]
    }

    #[test]
    fn typos_and_swaps_count_one_each_and_case_none() {
        assert_eq!(dist("jiffies", "jiffies", 2), Some(0));
        assert_eq!(dist("jiffes", "jiffies", 2), Some(1));
        assert_eq!(dist("jiffiess", "jiffies", 2), Some(1));
        assert_eq!(dist("jiffyes", "jiffies", 2), Some(1));
        assert_eq!(dist("tsak", "task", 1), Some(1));
        assert_eq!(dist("vfs_wirte", "vfs_write", 3), Some(1));
        assert_eq!(dist("JIFFIES", "jiffies", 2), Some(0));
        assert_eq!(dist("Jiffes", "JIFFIES", 2), Some(1));
        assert_eq!(dist("abc", "xyz", 2), None);
        assert_eq!(dist("abc", "abcdef", 2), None, "the length gap alone is 3");
        assert_eq!(dist("", "ab", 2), Some(2));
        assert_eq!(dist("ab", "", 1), None);
    }

    #[test]
    fn the_band_agrees_with_the_full_table() {
        let words = [
            "",
            "a",
            "ab",
            "ba",
            "abc",
            "acb",
            "task",
            "tsak",
            "tasks",
            "jiffies",
            "jiffes",
            "ffiesji",
            "vfs_write",
            "vfs_wirte",
            "vfs_writev",
            "abcdef",
            "badcfe",
            "aaaa",
            "aaab",
        ];
        for a in words {
            for b in words {
                let full = reference(a.as_bytes(), b.as_bytes());
                for limit in 0..=MAX_TYPOS {
                    let want = (full <= limit).then_some(full);
                    assert_eq!(dist(a, b, limit), want, "{a:?} {b:?} within {limit}");
                }
            }
        }
    }

    #[test]
    fn tiers_rank_case_then_typos_then_prefixes_then_substrings() {
        let names = [
            "min_vruntime",
            "vruntime_x",
            "vruntim",
            "vrunTime",
            "vruntimes",
            "vrumtime",
            "runtime",
            "VRUNTIME",
            "vruntime",
        ];
        assert_eq!(
            best("vruntime", names, 10),
            [
                "VRUNTIME",
                "vrunTime",
                "runtime",
                "vrumtime",
                "vruntim",
                "vruntimes",
                "vruntime_x",
                "min_vruntime"
            ]
        );
        // Typed too much: the longest name it starts with first, then names within it.
        assert_eq!(
            best(
                "tcp_sendmsg_locked_typo",
                ["tcp", "sendmsg", "tcp_sendmsg", "tcp_sendmsg_locked", "zz"],
                5
            ),
            ["tcp_sendmsg_locked", "tcp_sendmsg", "tcp", "sendmsg"]
        );
        // A swap is one typo, and better than a prefix match.
        assert_eq!(
            best("tsak", ["tasks", "task", "tsak_struct"], 3),
            ["task", "tsak_struct"]
        );
        assert_eq!(
            best("list", ["l", "li", "it", "list_head"], 3),
            ["list_head"]
        );
        assert_eq!(best("my_nvcsw", ["nvcsw", "nivcsw"], 3), ["nvcsw"]);
        // A member path typed with `_` for `.` names the struct member; a lone letter is no hint.
        assert_eq!(
            best("se_vruntime", ["se", "s", "vruntime"], 3),
            ["se", "vruntime"]
        );
        assert_eq!(best("s_vruntime", ["s"], 3), Vec::<&str>::new());
    }

    #[test]
    fn short_names_get_case_matches_only_and_nothing_is_itself() {
        let names = ["x", "X", "xy", "_x", "ax", "HZ", "hz"];
        assert_eq!(best("x", names, 5), ["X"]);
        assert_eq!(best("hz", names, 5), ["HZ"]);
        assert!(best("zzzzzz", names, 5).is_empty());
        assert!(best("jiffies", ["jiffies"], 5).is_empty());
        assert!(best("jiffes", ["jiffies"], 0).is_empty());
    }

    #[test]
    fn longer_names_allow_more_typos_but_not_any_name_of_their_shape() {
        let names = ["task_struct", "tss_struct", "desc_struct"];
        assert_eq!(best("task_strcut", names, 3), ["task_struct"]);
        // Case is free: two real typos from `task_struct` to `tss_struct`.
        assert_eq!(best("Task_Struct", names, 3), ["task_struct", "tss_struct"]);
        assert_eq!(
            best("jiffes", ["jiffy", "jiffies", "jiffies_64"], 3),
            ["jiffies", "jiffy"]
        );
        assert_eq!(best("tsk", ["task", "tsak"], 3), ["task", "tsak"]);
        assert_eq!(
            best("tcp_sendmgs_lokced", ["tcp_sendmsg_locked"], 3),
            ["tcp_sendmsg_locked"],
            "two swaps"
        );
        assert_eq!(
            best("tcp_sendmgs_lokced_", ["tcp_sendmsg_locked"], 3),
            ["tcp_sendmsg_locked"],
            "three typos in a long name"
        );
    }

    #[test]
    fn a_shared_first_word_is_suggested_only_when_nothing_closer_is() {
        let fields = ["sched_info", "sched_class", "se", "schedule"];
        assert_eq!(best("sched_foo", fields, 8), ["sched_info", "sched_class"]);
        assert_eq!(best("sched_inf", fields, 8), ["sched_info"]);
        assert_eq!(best("sched_foo", ["sched_info", "sched"], 8), ["sched"]);
        assert_eq!(
            first_word(b"__do_sys_foo").as_deref(),
            Some(&b"__do_sys_"[..])
        );
        assert_eq!(first_word(b"sched_"), None);
        assert_eq!(first_word(b"se_foo"), None);
        assert_eq!(first_word(b"jiffies"), None);
    }

    #[test]
    fn duplicates_are_suggested_once_and_ties_are_alphabetical() {
        let names = ["foo_dup", "foo_dup", "foo_dux", "foo_dua"];
        assert_eq!(best("foo_du", names, 5), ["foo_dua", "foo_dup", "foo_dux"]);
        assert_eq!(best("foo_du", names, 2), ["foo_dua", "foo_dup"]);
    }

    #[test]
    fn long_names_are_bounded() {
        let long = "a".repeat(MAX_QUERY + 1);
        assert!(best(&long, [long.as_str(), "aaa"], 5).is_empty());
        // A long candidate of about the query's length still costs only the band.
        let q = "x".repeat(400);
        let c = format!("{}y", "x".repeat(400));
        assert_eq!(best(&q, [c.as_str()], 1), [c.as_str()]);
        assert_eq!(dist(&q, &"y".repeat(400), MAX_TYPOS), None);
    }
}
