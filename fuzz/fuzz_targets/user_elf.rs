//! A user-space binary a watched process maps: load its function symbols and name a few addresses.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (bin, _) = ksymwatch_symbols::Binary::parse(data);
    if let Some(bin) = bin {
        assert!(bin.len() <= data.len() / 16);
        for off in [0u64, 0x40, 0x1000, u64::MAX] {
            if let Some(v) = bin.vaddr(off) {
                let _ = bin.symbolize(v);
            }
        }
        let _ = bin.symbolize(0x40_0100);
    }
});
