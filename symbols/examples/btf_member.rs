//! Resolves `(TYPE).path` or `VARIABLE.path` against a BTF file and prints offset, size and type, with
//! the time taken to open the file, look the member up, and look it up again (index built; the mean of many).
//!
//! `cargo run --release -p ksymwatch-symbols --example btf_member -- [--var] task_struct se.vruntime [BTF]`

use std::path::Path;
use std::time::Instant;

use ksymwatch_symbols::testing::member_path;
use ksymwatch_symbols::{Btf, CastType};

/// How many later lookups are timed together.
const REPEAT: u32 = 10_000;

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let var = args.first().is_some_and(|a| a == "--var");
    if var {
        args.remove(0);
    }
    let (Some(name), path) = (args.first(), args.get(1).map_or("", String::as_str)) else {
        eprintln!("usage: btf_member [--var] TYPE|VARIABLE [PATH] [BTF]");
        std::process::exit(2);
    };
    let file = args.get(2).map_or(Btf::VMLINUX, String::as_str);
    let t0 = Instant::now();
    let btf = match Btf::open(Path::new(file)) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let t1 = Instant::now();
    let path = member_path(path);
    let lookup = || {
        if var {
            btf.variable_member(name, &path)
        } else {
            btf.member(
                &CastType {
                    kind: None,
                    name: name.clone(),
                },
                &path,
            )
        }
    };
    let result = lookup();
    let t2 = Instant::now();
    // Again, now that the name index is built: what every later lookup costs, averaged over many, since
    // one takes microseconds.
    for _ in 0..REPEAT {
        let _ = std::hint::black_box(lookup());
    }
    let t3 = Instant::now();
    match result {
        Ok(m) => println!("offset {} size {:?} type {}", m.offset, m.size, m.type_name),
        Err(e) => println!("{e}"),
    }
    eprintln!(
        "open {:.1} ms, first lookup {:.1} ms, next lookup {:.2} us (mean of {REPEAT})",
        (t1 - t0).as_secs_f64() * 1e3,
        (t2 - t1).as_secs_f64() * 1e3,
        (t3 - t2).as_secs_f64() * 1e6 / f64::from(REPEAT)
    );
}
