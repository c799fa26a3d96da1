//! The TARGET grammar must reject, never panic on, anything a user can type.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(t) = ksymwatch::model::target::parse(s) {
            let _ = t.symbol_splits();
        }
    }
});
