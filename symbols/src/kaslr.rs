//! KASLR: moving link-time addresses (vmlinux, System.map) to where the running kernel put them.
//!
//! The kernel image moves as one block, so one offset — kallsyms `_text` minus the file's `_text` — relocates
//! every image symbol. Per-CPU symbols are offsets into each CPU's area (link address 0 up), not image
//! addresses, so anything below the image's `_text` stays as it is.

use crate::{KernelMatch, SymbolKind, SymbolTable};

/// The names that mark the start of the kernel image, tried in order; both sides must use the same one.
pub const TEXT_MARKERS: [&str; 2] = ["_text", "_stext"];

/// The pure arithmetic: how far the running kernel moved from its link address (may be negative).
pub fn offset(runtime_text: u64, link_text: u64) -> i64 {
    runtime_text.wrapping_sub(link_text) as i64
}

/// One kernel's relocation: its image start at link time and at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kaslr {
    pub link_text: u64,
    pub runtime_text: u64,
}

impl Kaslr {
    pub fn offset(&self) -> i64 {
        offset(self.runtime_text, self.link_text)
    }

    /// Link-time address to runtime address; addresses below the image (per-CPU offsets) do not move.
    pub fn to_runtime(&self, link: u64) -> u64 {
        if link >= self.link_text {
            link.wrapping_add(self.offset() as u64)
        } else {
            link
        }
    }

    /// The inverse of [`Kaslr::to_runtime`].
    pub fn to_link(&self, runtime: u64) -> u64 {
        if runtime >= self.runtime_text {
            runtime.wrapping_sub(self.offset() as u64)
        } else {
            runtime
        }
    }

    /// Pairs up the image markers of a link-time table and a runtime (kallsyms) table.
    pub fn between(link: &SymbolTable, runtime: &SymbolTable) -> Option<Kaslr> {
        TEXT_MARKERS.iter().find_map(|name| {
            Some(Kaslr {
                link_text: text_marker(link, name)?,
                runtime_text: text_marker(runtime, name)?,
            })
        })
    }
}

fn text_marker(table: &SymbolTable, name: &str) -> Option<u64> {
    table
        .by_name(name)
        .find(|s| s.module.is_none())
        .map(|s| s.addr)
}

/// Checks a link-time table against the running kernel's kallsyms when there is no build-id to compare:
/// samples global text symbols that are unique in both and checks each sits at `link + offset`. Functions
/// move between builds, so a few agreeing samples are good evidence and one disagreeing is proof.
pub fn verify(
    link: &SymbolTable,
    runtime: &SymbolTable,
    kaslr: Kaslr,
    samples: usize,
) -> KernelMatch {
    let candidates: Vec<_> = runtime
        .iter()
        .filter(|s| s.module.is_none() && s.kind() == SymbolKind::Text && s.is_global())
        .collect();
    if candidates.is_empty() {
        return KernelMatch::Unknown(
            "kallsyms lists no kernel text symbols to compare with".into(),
        );
    }
    let step = (candidates.len() / samples.max(1)).max(1);
    let mut checked = 0;
    for rt in candidates.iter().step_by(step) {
        let mut in_file = link.by_name(rt.name);
        let (Some(ls), None) = (in_file.next(), in_file.next()) else {
            continue;
        };
        if runtime.by_name(rt.name).nth(1).is_some() {
            continue;
        }
        let expected = kaslr.to_runtime(ls.addr);
        if expected != rt.addr {
            return KernelMatch::SymbolsDisagree {
                name: rt.name.to_string(),
                file_addr: expected,
                running_addr: rt.addr,
            };
        }
        checked += 1;
    }
    if checked == 0 {
        KernelMatch::Unknown("no text symbol is common to the file and kallsyms".into())
    } else {
        KernelMatch::SymbolsAgree { checked }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{kallsyms, sysmap};
    use std::path::Path;

    #[test]
    fn arithmetic_both_directions() {
        assert_eq!(offset(0xffffffff9a000000, 0xffffffff81000000), 0x19000000);
        assert_eq!(offset(0xffffffff81000000, 0xffffffff9a000000), -0x19000000);
        let k = Kaslr {
            link_text: 0xffffffff81000000,
            runtime_text: 0xffffffff9a000000,
        };
        assert_eq!(k.to_runtime(0xffffffff82a05000), 0xffffffff9ba05000);
        assert_eq!(k.to_link(0xffffffff9ba05000), 0xffffffff82a05000);
        // Per-CPU offsets are not image addresses.
        assert_eq!(k.to_runtime(0x1a000), 0x1a000);
        assert_eq!(k.to_link(0x1a000), 0x1a000);
        let none = Kaslr {
            link_text: 0xffffffff81000000,
            runtime_text: 0xffffffff81000000,
        };
        assert_eq!(none.to_runtime(0xffffffff82a05000), 0xffffffff82a05000);
    }

    const MAP: &str = "0000000000000000 D fixed_percpu_data\nffffffff81000000 T _text\nffffffff81000100 T start_kernel\n\
                       ffffffff81000200 T schedule\nffffffff82000000 D jiffies\n";

    #[test]
    fn relocated_table_keeps_link_addresses() {
        let map = sysmap::from_text(MAP, Path::new("m")).unwrap();
        let ks = kallsyms::from_text(
            "ffffffff9a000000 T _text\nffffffff9a000100 T start_kernel\nffffffff9a000200 T schedule\n",
            Path::new("k"),
        )
        .unwrap();
        let k = Kaslr::between(&map, &ks).unwrap();
        assert_eq!(k.offset(), 0x19000000);
        assert_eq!(
            verify(&map, &ks, k, 8),
            KernelMatch::SymbolsAgree { checked: 3 }
        );
        let mut t = map;
        t.relocate(k);
        let j = t.lookup("jiffies", None).unwrap();
        assert_eq!(j.addr, 0xffffffff9b000000);
        assert_eq!(t.link_addr(j), 0xffffffff82000000);
        assert_eq!(t.lookup("fixed_percpu_data", None).unwrap().addr, 0);
        assert_eq!(
            t.symbolize(0xffffffff9a000105).unwrap().to_string(),
            "start_kernel+0x5/0x100"
        );
    }

    #[test]
    fn verify_catches_another_build() {
        let map = sysmap::from_text(MAP, Path::new("m")).unwrap();
        let ks = kallsyms::from_text(
            "ffffffff9a000000 T _text\nffffffff9a000100 T start_kernel\nffffffff9a000240 T schedule\n",
            Path::new("k"),
        )
        .unwrap();
        let k = Kaslr::between(&map, &ks).unwrap();
        assert!(verify(&map, &ks, k, 8).is_mismatch());
    }
}
