//! Members through DWARF as gcc and g++ write them: bitfields in each DWARF version (DWARF 4 and earlier
//! place one with `DW_AT_bit_offset`, from the most significant bit of a `DW_AT_byte_size` storage unit
//! at `DW_AT_data_member_location`; DWARF 5 with `DW_AT_data_bit_offset` from the struct's start: both
//! must land on the same bytes), and a C++ class's members inherited from its bases. Without gcc or g++
//! the tests print SKIP.

use std::path::PathBuf;
use std::process::Command;

use ksymwatch_symbols::progress::NoProgress;
use ksymwatch_symbols::testing::require;
use ksymwatch_symbols::{dwarf, PathElem, VariableQuery, Vmlinux};

const SOURCE: &str = "struct flags { long pad; unsigned a : 3; unsigned b : 5; unsigned c : 12; };
struct flags fl;
int main(void) { return fl.b; }
";

/// A program built in a directory of its own, removed when this is dropped (a failed assertion too).
struct Built {
    dir: PathBuf,
    elf: PathBuf,
}

impl Drop for Built {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `source`, written as `file` in a directory of its own, built by `compiler` with `flags` into `out`
/// there; `None` when it cannot be.
fn compiled(compiler: &str, flags: &[&str], file: &str, source: &str, out: &str) -> Option<Built> {
    let dir = std::env::temp_dir().join(format!("ksymwatch-dwarf-{out}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let built = Built {
        elf: dir.join(out),
        dir,
    };
    std::fs::write(built.dir.join(file), source).ok()?;
    let ok = Command::new(compiler)
        .args(flags)
        .arg("-o")
        .arg(&built.elf)
        .arg(built.dir.join(file))
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(built)
}

/// `VAR.MEMBER`'s (byte offset, size, type) in `elf`'s DWARF, or the error's text.
fn member_of(
    elf: &std::path::Path,
    var: &str,
    name: &str,
) -> Result<(u64, Option<u64>, String), String> {
    let vm = Vmlinux::open(elf).unwrap();
    let q = VariableQuery {
        name: var,
        addr: None,
        accept_declaration: true,
    };
    let path = [PathElem::Field(name.to_string())];
    let m = dwarf::resolve_path(&vm, &q, &path, &NoProgress).map_err(|e| e.to_string())?;
    Ok((m.offset, m.size, m.type_name))
}

/// `fl.MEMBER`'s (byte offset, size, type).
fn member(elf: &std::path::Path, name: &str) -> (u64, Option<u64>, String) {
    member_of(elf, "fl", name).unwrap()
}

/// `fl.b` is bits 67..72: byte 8, one byte wide. DWARF 4 put every bitfield at the struct's start, so a
/// watch of `fl.b` was armed on `fl.pad`.
#[test]
fn bitfields_land_alike_in_dwarf_4_and_5() {
    if !require("gcc") {
        return;
    }
    let want = [
        ("a", (8, Some(1), "unsigned int : 3")),
        ("b", (8, Some(1), "unsigned int : 5")),
        ("c", (9, Some(2), "unsigned int : 12")),
    ];
    for version in [2, 3, 4, 5] {
        let dwarf = format!("-gdwarf-{version}");
        let out = format!("bits-dwarf{version}");
        let Some(built) = compiled("gcc", &["-g", &dwarf, "-O0"], "bits.c", SOURCE, &out) else {
            ksymwatch_symbols::testing::skip(format_args!(
                "gcc cannot build with -gdwarf-{version}"
            ));
            continue;
        };
        for (name, (offset, size, ty)) in want {
            assert_eq!(
                member(&built.elf, name),
                (offset, size, ty.to_string()),
                "fl.{name} in DWARF {version}"
            );
        }
    }
}

const CLASSES: &str = "struct Base { int x; long y; };
struct Mid : Base { int m; };
struct Derived : Mid { int z; static int s; };
struct V { int v; };
struct WithVirtual : virtual V { int w; };
struct Shadow : Base { char x; };
Derived d;
WithVirtual wv;
Shadow sh;
int main() { return d.z + wv.w + sh.x; }
";

/// A field a C++ class inherits is one of its members (`d.y`, from `Base` through `Mid`, as gdb prints
/// `&d.y`); it was `no field y` (the walk skipped `DW_TAG_inheritance`). A virtual base, whose place
/// is computed at run time, is left out without hiding the class's own members. A static data member is
/// not in the object: under DWARF 4 g++ writes it as a member without a location, which put `d.s` at
/// `d`'s start.
#[test]
fn inherited_members_are_found_through_the_bases() {
    if !require("g++") {
        return;
    }
    for version in [4, 5] {
        let dwarf = format!("-gdwarf-{version}");
        let out = format!("classes-dwarf{version}");
        let Some(built) = compiled("g++", &["-g", &dwarf, "-O0"], "classes.cpp", CLASSES, &out)
        else {
            ksymwatch_symbols::testing::skip(format_args!(
                "g++ cannot build classes.cpp with -gdwarf-{version}"
            ));
            continue;
        };
        classes_in(&built.elf, version);
    }
}

/// The members of `CLASSES`' objects in `elf`, built with DWARF `version`.
fn classes_in(elf: &std::path::Path, version: u32) {
    let int = |offset| Ok((offset, Some(4), "int".to_string()));
    let long = Ok((8, Some(8), "long int".to_string()));
    assert_eq!(member_of(elf, "d", "x"), int(0), "DWARF {version}");
    assert_eq!(member_of(elf, "d", "y"), long, "DWARF {version}");
    assert_eq!(member_of(elf, "d", "m"), int(16), "DWARF {version}");
    assert_eq!(member_of(elf, "d", "z"), int(20), "DWARF {version}");
    assert_eq!(member_of(elf, "wv", "w"), int(8), "DWARF {version}");
    // `sh.x` is Shadow's own `x`, which hides Base's.
    assert_eq!(
        member_of(elf, "sh", "x"),
        Ok((16, Some(1), "char".into())),
        "DWARF {version}"
    );
    assert_eq!(member_of(elf, "sh", "y"), long, "DWARF {version}");
    for (var, field) in [("wv", "v"), ("d", "s")] {
        let err = member_of(elf, var, field).unwrap_err();
        assert!(
            err.contains("no field"),
            "{var}.{field} in DWARF {version}: {err}"
        );
    }
}
