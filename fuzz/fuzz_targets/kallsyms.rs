//! kallsyms/System.map text from a file the user names: parse, build the table, look up and symbolize.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(table) = ksymwatch_symbols::kallsyms::from_text(s, Path::new("fuzz")) {
            for sym in table.symbols().iter().take(8) {
                let _ = table.lookup(&sym.name, None);
                let _ = table.symbolize(sym.addr.wrapping_add(3));
            }
            let _ = table.lookup("jiffies", None);
        }
    }
});
