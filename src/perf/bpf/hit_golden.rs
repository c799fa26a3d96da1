//! The tool's hit and emitter programs pinned to their exact bytes: a hash of each program for a spread
//! of specs, as the generator built them before the writer-cost benchmark's hooks left the tool's build
//! (its variants add their code through [`super::hit::additions`]). A change of the generator that
//! changes a program changes its hash here: update the value in the same commit, saying why the program
//! changed.

use super::emit::{self, EmitMaps};
use super::hit::{generate, HitMaps, HitSpec};
use super::hit_tests::{self, MAPS as PROCESS, TOTALS};
use super::insn::Insn;
use super::interp::{EVENT_OFFSET, KERN_CTX_ID};
use super::repeats::Repeats;
use super::totals::TotalsMaps;
use crate::model::condition::{self, Condition};
use crate::model::filter::{Filter, Place};

/// The per-thread path's maps: no `procs` (the events choose the threads).
const THREADS: HitMaps = HitMaps {
    procs: None,
    ..PROCESS
};
/// A system-wide watch's, with its totals.
const SYSTEM: HitMaps = HitMaps {
    olds_by_tgid: None,
    reads: None,
    procs: None,
    ..PROCESS
};

/// FNV-1a over the program's encoded instructions, and its length.
fn fingerprint(prog: &[Insn]) -> (usize, u64) {
    let hash = prog
        .iter()
        .flat_map(|i| i.encode())
        .fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    (prog.len(), hash)
}

/// [`hit_tests::spec`], of `len` bytes.
fn spec<'a>(
    len: u8,
    filter: &'a Filter,
    condition: Option<&'a Condition>,
    value: bool,
) -> HitSpec<'a> {
    HitSpec {
        len,
        ..hit_tests::spec(filter, condition, value)
    }
}

const REPEATS: Repeats = Repeats {
    kern_ctx: KERN_CTX_ID,
    event: EVENT_OFFSET,
};

#[test]
fn the_hit_programs_are_the_bytes_they_were() {
    let none = Filter::default();
    let picky = Filter {
        tids: vec![7, 8],
        comms: vec!["writer".into(), "other".into()],
        exclude_idle: true,
        ..Filter::default()
    };
    let user = Filter {
        place: Place::User,
        ..Filter::default()
    };
    let kernel = Filter {
        place: Place::Kernel,
        comms: vec!["writer".into()],
        ..Filter::default()
    };
    let five = condition::parse("value == 5 && old != value").expect("parses");
    let masked = condition::parse("(value & 0x0f || (s)value < -2) && changed").expect("parses");
    let counting = HitMaps {
        cgroups: Some((10, 2)),
        totals: Some(TotalsMaps {
            limit: Some((24, 2)),
            ..TOTALS
        }),
        ..PROCESS
    };
    let untotalled = HitMaps {
        totals: None,
        ..PROCESS
    };
    let specs: Vec<(&str, HitSpec<'_>, &HitMaps)> = vec![
        ("system", spec(8, &none, None, false), &SYSTEM),
        (
            "system, helper's name",
            HitSpec {
                comm_offset: None,
                ..spec(8, &none, None, false)
            },
            &SYSTEM,
        ),
        (
            "system, no totals",
            spec(8, &none, None, false),
            &HitMaps::SYSTEM_FOR_TESTS,
        ),
        ("system --value", spec(8, &none, Some(&five), true), &SYSTEM),
        ("process", spec(8, &none, None, false), &PROCESS),
        ("process --value", spec(8, &none, None, true), &PROCESS),
        (
            "process --if, filters",
            spec(8, &picky, Some(&five), true),
            &PROCESS,
        ),
        ("process --user-only", spec(8, &user, None, false), &PROCESS),
        (
            "process --kernel-only --comm",
            spec(4, &kernel, Some(&masked), true),
            &PROCESS,
        ),
        ("1 byte --if", spec(1, &none, Some(&masked), true), &PROCESS),
        (
            "2 bytes --if",
            spec(2, &none, Some(&masked), true),
            &PROCESS,
        ),
        (
            "value without old or registers",
            HitSpec {
                old: false,
                regs: false,
                ..spec(8, &none, None, true)
            },
            &PROCESS,
        ),
        (
            "value, no by-tgid olds, no reads flag",
            spec(8, &none, None, true),
            &HitMaps {
                olds_by_tgid: None,
                reads: None,
                ..PROCESS
            },
        ),
        (
            "no totals --value",
            spec(8, &none, Some(&five), true),
            &untotalled,
        ),
        (
            "per-thread",
            HitSpec {
                repeats: Some(REPEATS),
                ..spec(8, &none, None, false)
            },
            &THREADS,
        ),
        (
            "per-thread --value --if",
            HitSpec {
                repeats: Some(REPEATS),
                ..spec(8, &picky, Some(&five), true)
            },
            &THREADS,
        ),
        (
            "--cgroup --count",
            HitSpec {
                cgroup_ids: true,
                ..spec(8, &none, None, true)
            },
            &counting,
        ),
    ];
    let got: Vec<(&str, usize, u64)> = specs
        .iter()
        .map(|(name, spec, maps)| {
            let (len, hash) = fingerprint(&generate(spec, maps).expect("assembles"));
            (*name, len, hash)
        })
        .collect();
    let before = [
        ("system", 2696, 5980712135079545246),
        ("system, helper's name", 2695, 10135873453489609856),
        ("system, no totals", 1537, 13433913483006062552),
        ("system --value", 2877, 15465997226140953406),
        ("process", 2717, 1879442117574391602),
        ("process --value", 2910, 1669710090222925081),
        ("process --if, filters", 2968, 10143145850960006694),
        ("process --user-only", 2732, 10189514109610982077),
        ("process --kernel-only --comm", 2961, 12813108470755729288),
        ("1 byte --if", 2942, 15059558755478931126),
        ("2 bytes --if", 2942, 12481046499613950893),
        ("value without old or registers", 2791, 13090524338935352425),
        (
            "value, no by-tgid olds, no reads flag",
            2871,
            10239600868314117089,
        ),
        ("no totals --value", 1733, 10418324615077413207),
        ("per-thread", 2760, 2364700220427985762),
        ("per-thread --value --if", 3011, 4587733738884971800),
        ("--cgroup --count", 2958, 9265236849047409781),
    ];
    assert_eq!(got, before);
}

#[test]
fn the_emitters_are_the_bytes_they_were() {
    let maps = EmitMaps {
        scratch: 7,
        lost: (5, 2),
        ring: 30,
    };
    let got: Vec<(u32, usize, u64)> = [1 << 12, 1 << 14, 1 << 20]
        .into_iter()
        .map(|wake| {
            let (len, hash) = fingerprint(&emit::generate(&maps, wake).expect("assembles"));
            (wake, len, hash)
        })
        .collect();
    let before = [
        (1 << 12, 44, 2997290901891722339),
        (1 << 14, 44, 18095778891279355123),
        (1 << 20, 44, 1752245642912505507),
    ];
    assert_eq!(got, before);
}
