//! Relating a link-time symbol table (vmlinux, System.map) to the running kernel's kallsyms: the KASLR
//! offset between them ([`between`]) and, where no build-id can tell, whether they are one build
//! ([`verify`]).

use crate::buildid::KernelMatch;
use crate::kaslr::{Kaslr, TEXT_MARKERS};
use crate::symbol::SymbolKind;
use crate::table::SymbolTable;

/// Pairs up the image markers of a link-time table and a runtime (kallsyms) table.
pub fn between(link: &SymbolTable, runtime: &SymbolTable) -> Option<Kaslr> {
    TEXT_MARKERS.iter().find_map(|name| {
        Some(Kaslr {
            link_text: text_marker(link, name)?,
            runtime_text: text_marker(runtime, name)?,
        })
    })
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

    const MAP: &str = "0000000000000000 D fixed_percpu_data\nffffffff81000000 T _text\nffffffff81000100 T start_kernel\n\
                       ffffffff81000200 T schedule\nffffffff82000000 D jiffies\n";

    /// [`MAP`], and a kallsyms of a kernel booted 0x19000000 above it whose `schedule` is at `schedule`:
    /// both tables and the offset between them.
    fn booted(schedule: &str) -> (SymbolTable, SymbolTable, Kaslr) {
        let map = sysmap::from_text(MAP, Path::new("m")).unwrap();
        let text = format!(
            "ffffffff9a000000 T _text\nffffffff9a000100 T start_kernel\n{schedule} T schedule\n"
        );
        let ks = kallsyms::from_text(&text, Path::new("k")).unwrap();
        let k = between(&map, &ks).unwrap();
        (map, ks, k)
    }

    #[test]
    fn relocated_table_keeps_link_addresses() {
        let (map, ks, k) = booted("ffffffff9a000200");
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
        let (map, ks, k) = booted("ffffffff9a000240");
        assert!(verify(&map, &ks, k, 8).is_mismatch());
    }
}
