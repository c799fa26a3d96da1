//! Property tests for every parser that takes input from a user, a file or the kernel: none may panic on
//! any input, and what the encoders write must decode to the same values. CI runs the default number of
//! cases; `scripts/fuzz.sh` runs many more.

use ksymwatch::cpulist;
use ksymwatch::model::target;
use ksymwatch::perf::record;
use ksymwatch::trace::hotplug;
use ksymwatch::x86_store;
use ksymwatch_symbols::kallsyms;
use proptest::prelude::*;
use std::path::Path;

proptest! {
    #[test]
    fn target_parser_never_panics(s in ".{0,64}") {
        let _ = target::parse(&s);
    }

    #[test]
    fn target_parser_never_panics_on_grammar_soup(s in "[a-z_0-9x.+/@:\\[\\]]{0,40}") {
        let _ = target::parse(&s);
    }

    #[test]
    fn target_errors_never_quote_an_empty_token(s in "[a-z_0-9x.+/@:\\[\\]-]{0,40}") {
        if let Err(e) = target::parse(&s) {
            let text = e.to_string();
            prop_assert!(!text.contains("``"), "{}", text);
        }
    }

    #[test]
    fn target_parser_never_panics_on_cast_soup(s in "\\(?[a-z_ *()]{0,16}\\)?[a-z_0-9x.+/@:\\[\\]()*]{0,30}") {
        if let Err(e) = target::parse(&s) {
            let text = e.to_string();
            prop_assert!(!text.contains("``"), "{}", text);
        }
    }

    #[test]
    fn a_cast_round_trips(
        kind in prop::sample::select(vec!["", "struct ", "union ", "enum "]),
        ty in "[a-z_][a-z0-9_]{0,20}",
        star in prop::sample::select(vec!["", " *", "*"]),
        addr in 1u64..,
        path in prop::collection::vec(("[a-z_][a-z0-9_]{0,8}", proptest::option::of(0u64..1000)), 0..4),
        off in proptest::option::of(any::<u32>()),
    ) {
        let mut text = format!("({kind}{ty}{star})0x{addr:x}");
        for (field, index) in &path {
            text.push_str(&format!(".{field}"));
            if let Some(i) = index {
                text.push_str(&format!("[{i}]"));
            }
        }
        if let Some(o) = off {
            text.push_str(&format!("+{o}"));
        }
        let t = target::parse(&text).unwrap();
        let cast = t.cast.expect("a cast");
        prop_assert_eq!(cast.name, ty);
        prop_assert_eq!(cast.kind.is_some(), !kind.is_empty());
        prop_assert_eq!(t.base, target::Base::Address(addr));
        let steps = path.iter().map(|(_, i)| 1 + usize::from(i.is_some())).sum::<usize>();
        prop_assert_eq!(t.path.len(), steps);
        // A typed address keeps +OFF for after its path.
        prop_assert_eq!(t.offset, off.map_or(0, u64::from));
    }

    #[test]
    fn symbol_plus_offset_len_round_trips(
        name in "[a-z_][a-z0-9_]{0,20}",
        off in any::<u32>(),
        hex in any::<bool>(),
        len in prop::sample::select(vec![1u8, 2, 4, 8]),
    ) {
        let off_text = if hex { format!("0x{off:x}") } else { off.to_string() };
        let t = target::parse(&format!("{name}+{off_text}/{len}")).unwrap();
        prop_assert_eq!(t.base, target::Base::Symbol { object: None, name: name.clone(), index: None });
        prop_assert_eq!(t.offset, u64::from(off));
        prop_assert_eq!(t.len, Some(len));
    }

    #[test]
    fn object_prefix_round_trips(
        object in "(/[a-z0-9_.:-]{1,12}){0,3}[a-z][a-z0-9_.+-]{0,15}",
        name in "[a-z_][a-z0-9_]{0,20}",
        index in proptest::option::of(0usize..64),
        off in any::<u32>(),
        len in proptest::option::of(prop::sample::select(vec![1u8, 2, 4, 8])),
    ) {
        let mut text = format!("{object}:{name}");
        if let Some(i) = index {
            text.push_str(&format!("@{i}"));
        }
        text.push_str(&format!("+{off}"));
        if let Some(l) = len {
            text.push_str(&format!("/{l}"));
        }
        let t = target::parse(&text).unwrap();
        prop_assert_eq!(&t.base, &target::Base::Symbol { object: Some(object.clone()), name, index });
        prop_assert_eq!((t.offset, t.len), (u64::from(off), len));
        prop_assert_eq!(t.kernel_module(), Some(object.as_str()));
    }

    #[test]
    fn kallsyms_parser_never_panics(s in "(?s).{0,300}") {
        let _ = kallsyms::parse(&s, Path::new("fuzz"));
    }

    #[test]
    fn kallsyms_lines_round_trip(
        syms in prop::collection::vec((any::<u64>(), "[TtDdBbRrWw]", "[A-Za-z_][A-Za-z0-9_.]{0,30}"), 1..50)
    ) {
        let text: String = syms.iter().map(|(a, t, n)| format!("{a:016x} {t} {n}\n")).collect();
        let parsed = kallsyms::parse(&text, Path::new("fuzz")).unwrap();
        prop_assert_eq!(parsed.len(), syms.len());
        for (p, (a, t, n)) in parsed.iter().zip(&syms) {
            prop_assert_eq!(p.addr, *a);
            prop_assert_eq!(p.type_char.to_string(), t.clone());
            prop_assert_eq!(&p.name, n);
        }
    }

    #[test]
    fn record_decoder_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256), st in any::<u64>()) {
        let _ = record::decode(&bytes, st);
        let _ = record::decode(&bytes, record::SAMPLE_TYPE);
    }

    #[test]
    fn record_decoder_survives_hostile_headers(
        kind in prop::sample::select(vec![record::RECORD_SAMPLE, record::RECORD_LOST, record::RECORD_COMM, record::RECORD_FORK, record::RECORD_EXIT, 77]),
        size in any::<u16>(),
        body in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut b = kind.to_ne_bytes().to_vec();
        b.extend_from_slice(&0u16.to_ne_bytes());
        b.extend_from_slice(&size.to_ne_bytes());
        b.extend_from_slice(&body);
        let _ = record::decode(&b, record::SAMPLE_TYPE);
    }

    #[test]
    fn samples_round_trip(
        ip in any::<u64>(), pid in any::<u32>(), tid in any::<u32>(), time in any::<u64>(),
        addr in any::<u64>(), cpu in any::<u32>(),
        kernel in prop::collection::vec(0xffff_8000_0000_0000u64..0xffff_ffff_0000_0000, 0..8),
        user in prop::collection::vec(0x1000u64..0x7fff_ffff_ffff, 0..8),
    ) {
        let mut chain = vec![record::encode::KERNEL];
        chain.extend(&kernel);
        chain.push(record::encode::USER);
        chain.extend(&user);
        let bytes = record::encode::sample(ip, pid, tid, time, addr, cpu, &chain);
        let record::Record::Sample(s) = record::decode(&bytes, record::SAMPLE_TYPE).unwrap() else {
            panic!("not a sample");
        };
        prop_assert_eq!((s.ip, s.pid, s.tid, s.time, s.addr, s.cpu), (ip, pid, tid, time, addr, cpu));
        prop_assert_eq!(s.frames.len(), kernel.len() + user.len());
        prop_assert!(s.frames[..kernel.len()].iter().all(|f| f.context == record::Context::Kernel));
        prop_assert!(s.frames[kernel.len()..].iter().all(|f| f.context == record::Context::User));
    }

    #[test]
    fn uevent_parser_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = hotplug::parse_uevent(&bytes);
    }

    #[test]
    fn cpu_lists_round_trip(cpus in prop::collection::btree_set(0u32..512, 0..64)) {
        prop_assert_eq!(cpulist::parse(&cpulist::format(&cpus)), Some(cpus));
    }

    #[test]
    fn cpu_list_parser_never_panics(s in "[0-9,\\- ]{0,30}") {
        let _ = cpulist::parse(&s);
    }

    #[test]
    fn store_decoder_never_panics(
        bytes in prop::array::uniform16(any::<u8>()),
        regs in prop::collection::vec(any::<u64>(), 21),
        addr in any::<u64>(),
        len in prop::sample::select(vec![1u8, 2, 4, 8]),
        n in 0usize..20,
    ) {
        let regs: [u64; 21] = regs.try_into().expect("21 registers");
        let _ = x86_store::stored(&bytes, n, &regs, addr, len);
        let _ = x86_store::last_insn_len(&bytes, regs[16]);
    }

    /// `mov %REG,(%BASE)` at 64 bits, any pair of general registers (base encodings that need a SIB or
    /// mean rip-relative left out), whatever memory held at the trap: the register's value, exactly.
    #[test]
    fn a_64_bit_mov_stores_its_register_whatever_memory_says(
        reg in 0u8..16,
        base in prop::sample::select(vec![0u8, 1, 2, 3, 6, 7, 8, 9, 10, 11, 14, 15]),
        value in any::<u64>(),
        addr in (0x1000u64..0x7fff_0000_0000).prop_map(|a| a & !7),
        memory in any::<u64>(),
    ) {
        prop_assume!(reg != base && reg != 4);
        // pt_regs word of each register number (rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi, r8..r15).
        const SLOT: [usize; 16] = [10, 11, 12, 5, 19, 4, 13, 14, 9, 8, 7, 6, 3, 2, 1, 0];
        let mut regs = [0u64; 21];
        regs[16] = 0x40_1000;
        regs[SLOT[usize::from(base)]] = addr;
        regs[SLOT[usize::from(reg)]] = value;
        let rex = 0x48 | if reg >= 8 { 4 } else { 0 } | if base >= 8 { 1 } else { 0 };
        let modrm = ((reg & 7) << 3) | (base & 7);
        // Garbage before the store: its start is known (the walk from the function's start gives it), so
        // the bytes before it do not matter.
        let mut bytes = [memory as u8; 16];
        bytes[13..].copy_from_slice(&[rex, 0x89, modrm]);
        prop_assert_eq!(
            x86_store::stored(&bytes, 3, &regs, addr, 8),
            x86_store::Stored::Whole(value)
        );
    }
}
