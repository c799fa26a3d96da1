//! Processes that start after the watch is armed and exit right after their hit. Such a process is gone
//! from /proc before the tracer names its hit: the tracer reads its rings on a 10 ms tick and holds each
//! record at least a millisecond for the merge across CPUs, while the writer exits microseconds after its
//! one store and is reaped by this test before the next run starts. Its frames can only be named from the
//! kernel's own reports of its mappings (PERF_RECORD_MMAP2), made as exec and the dynamic loader mapped its
//! files. Hits are matched by the writer's pid and by user-space ip (exec's own clearing of the helper's
//! `.bss` hits the watch from the kernel first).

use crate::util;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// One hit of the `--json` stream, as far as this module reads it.
struct Hit {
    pid: u64,
    kernel: bool,
    sym: Option<String>,
    off: u64,
    size: Option<u64>,
    binary: Option<String>,
    chain_binaries: Vec<String>,
}

fn hits(out: &str) -> Vec<Hit> {
    util::ndjson(out)
        .into_iter()
        .filter(|v| v["type"] == "hit")
        .map(|v| Hit {
            pid: v["pid"].as_u64().expect("pid"),
            kernel: v["ip"]["kernel"].as_bool().expect("ip.kernel"),
            sym: v["ip"]["sym"].as_str().map(str::to_string),
            off: v["ip"]["off"].as_u64().unwrap_or(0),
            size: v["ip"]["size"].as_u64(),
            binary: v["ip"]["binary"].as_str().map(str::to_string),
            chain_binaries: v["chain"]
                .as_array()
                .expect("chain")
                .iter()
                .filter_map(|f| f["binary"].as_str().map(str::to_string))
                .collect(),
        })
        .collect()
}

live_test!(
    a_writer_gone_before_its_hit_is_named_still_gets_named_frames,
    {
        let cpus = util::online_cpus();
        // Non-PIE: every run has its global at the same address, so one system-wide watch armed before any
        // of them starts sees them all.
        let writer = util::helper_with("writer", &["-no-pie"]);
        let banner = Command::new(&writer)
            .args(["now", "0", "0"])
            .output()
            .expect("run writer");
        let banner = String::from_utf8_lossy(&banner.stdout);
        let field = |b: &str, k: &str| -> String {
            b.split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .unwrap_or_else(|| panic!("no {k} in {b:?}"))
                .to_string()
        };
        let target = format!("{}/8", field(&banner, "addr="));
        let file = writer.file_name().expect("helper file").to_string_lossy();
        let t = util::Tracer::start_json(&["write", &target, "--json"]);
        const RUNS: usize = 20;
        let mut pids = Vec::with_capacity(RUNS);
        for i in 0..RUNS {
            let cpu = cpus[i % cpus.len()].to_string();
            let run = Command::new(&writer)
                .args(["now", "1", &cpu])
                .output()
                .expect("run writer");
            assert!(run.status.success());
            let pid: u64 = field(&String::from_utf8_lossy(&run.stdout), "pid=")
                .parse()
                .expect("pid");
            assert!(
                !Path::new(&format!("/proc/{pid}")).exists(),
                "the writer is reaped before the next one starts"
            );
            pids.push(pid);
        }
        let (code, out, err) = t.interrupt(Duration::from_secs(30));
        assert_eq!(code, 0, "{err}");
        let hits = hits(&out);
        for pid in pids {
            let stores: Vec<&Hit> = hits.iter().filter(|h| h.pid == pid && !h.kernel).collect();
            assert_eq!(
                stores.len(),
                1,
                "pid {pid}: one store from user space\n{err}"
            );
            let h = stores[0];
            assert_eq!(
                (h.sym.as_deref(), h.binary.as_deref()),
                (Some("main"), Some(&*file)),
                "pid {pid}: named from its ELF symbols, not a bare address"
            );
            assert!(h.off > 0 && h.size.is_some_and(|s| h.off < s), "pid {pid}");
            // Its caller is in libc, mapped by the dynamic loader after exec: reported by the kernel too.
            assert!(
                h.chain_binaries.iter().any(|b| b.starts_with("libc")),
                "pid {pid}: {:?}",
                h.chain_binaries
            );
        }
    }
);
