//! CPU lists in the kernel's own format (`0-3,6`), as `--cpus` takes them and sysfs prints them.

use std::collections::BTreeSet;
use std::path::Path;

pub const ONLINE: &str = "/sys/devices/system/cpu/online";
pub const POSSIBLE: &str = "/sys/devices/system/cpu/possible";

/// Parses `0-3,6`; `None` on anything else (empty ranges, reversed ranges, junk).
pub fn parse(text: &str) -> Option<BTreeSet<u32>> {
    let text = text.trim();
    let mut set = BTreeSet::new();
    if text.is_empty() {
        return Some(set);
    }
    for part in text.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let n = part.trim().parse::<u32>().ok()?;
                (n, n)
            }
        };
        if lo > hi || hi - lo > 65536 {
            return None;
        }
        set.extend(lo..=hi);
    }
    Some(set)
}

/// `0-3,6` back from a set, collapsing runs.
pub fn format(cpus: &BTreeSet<u32>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut iter = cpus.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    out.join(",")
}

/// Reads a sysfs CPU list file.
pub fn read(path: &Path) -> std::io::Result<BTreeSet<u32>> {
    let text = std::fs::read_to_string(path)?;
    parse(&text).ok_or_else(|| {
        std::io::Error::other(format!("{} is not a CPU list: {text:?}", path.display()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let s = parse("0-3,6").unwrap();
        assert_eq!(s.iter().copied().collect::<Vec<_>>(), vec![0, 1, 2, 3, 6]);
        assert_eq!(format(&s), "0-3,6");
        assert_eq!(format(&parse("1").unwrap()), "1");
        assert_eq!(parse("0-1\n").unwrap().len(), 2);
    }

    #[test]
    fn rejects_junk() {
        for bad in ["a", "3-1", "1,,2", "-1", "0-", "1-2-3"] {
            assert!(parse(bad).is_none(), "{bad}");
        }
    }
}
