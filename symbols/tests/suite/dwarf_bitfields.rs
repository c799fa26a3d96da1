//! Bitfield members through DWARF as gcc writes each version of it: DWARF 4 and earlier place a bitfield
//! with `DW_AT_bit_offset` (from the most significant bit of a `DW_AT_byte_size` storage unit at
//! `DW_AT_data_member_location`), DWARF 5 with `DW_AT_data_bit_offset` from the struct's start. Both
//! must land on the same bytes. Without gcc the test prints SKIP.

use std::path::PathBuf;
use std::process::Command;

use ksymwatch_symbols::progress::NoProgress;
use ksymwatch_symbols::testing::require;
use ksymwatch_symbols::{dwarf, PathElem, VariableQuery, Vmlinux};

const SOURCE: &str = "struct flags { long pad; unsigned a : 3; unsigned b : 5; unsigned c : 12; };
struct flags fl;
int main(void) { return fl.b; }
";

/// The source built with `-gdwarf-N`; `None` when gcc cannot.
fn build(dir: &std::path::Path, version: u32) -> Option<PathBuf> {
    let out = dir.join(format!("bits-dwarf{version}"));
    let ok = Command::new("gcc")
        .args(["-g", &format!("-gdwarf-{version}"), "-O0", "-o"])
        .arg(&out)
        .arg(dir.join("bits.c"))
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(out)
}

/// `fl.MEMBER`'s (byte offset, size, type) in `elf`'s DWARF.
fn member(elf: &std::path::Path, name: &str) -> (u64, Option<u64>, String) {
    let vm = Vmlinux::open(elf).unwrap();
    let q = VariableQuery {
        name: "fl",
        addr: None,
        accept_declaration: true,
    };
    let path = [PathElem::Field(name.to_string())];
    let m = dwarf::resolve_path(&vm, &q, &path, &NoProgress).unwrap();
    (m.offset, m.size, m.type_name)
}

/// `fl.b` is bits 67..72: byte 8, one byte wide. DWARF 4 put every bitfield at the struct's start, so a
/// watch of `fl.b` was armed on `fl.pad`.
#[test]
fn bitfields_land_alike_in_dwarf_4_and_5() {
    if !require("gcc") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ksymwatch-dwarf-bits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("bits.c"), SOURCE).unwrap();
    let want = [
        ("a", (8, Some(1), "unsigned int : 3")),
        ("b", (8, Some(1), "unsigned int : 5")),
        ("c", (9, Some(2), "unsigned int : 12")),
    ];
    for version in [4, 5] {
        let Some(elf) = build(&dir, version) else {
            ksymwatch_symbols::testing::skip(format_args!(
                "gcc cannot build with -gdwarf-{version}"
            ));
            continue;
        };
        for (name, (offset, size, ty)) in want {
            assert_eq!(
                member(&elf, name),
                (offset, size, ty.to_string()),
                "fl.{name} in DWARF {version}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
