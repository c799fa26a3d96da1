//! `--if` text comes from the user: the parser must answer every input with a tree or a column error, and a
//! tree must spell itself back into text that parses to the same tree.
#![no_main]
use ksymwatch::model::condition::{self, Condition};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match condition::parse(text) {
        Ok(tree) => {
            let again = condition::parse(&tree.to_string()).expect("a tree's spelling parses");
            assert_eq!(again.to_string(), tree.to_string());
            for len in [1u8, 2, 4, 8] {
                let _ = tree.check_width(len);
            }
            let _: &Condition = &again;
        }
        Err(e) => assert!(e.column >= 1 && e.column <= text.chars().count() + 1, "{e}"),
    }
});
