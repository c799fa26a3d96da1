//! A watch whose output's reader goes away in a flood: the hits released after the output failed are
//! counted and not printed, and on the hit path the kernel's totals put every hit into `--folded`. The
//! traps the kernel's program filtered (another process storing at the watched address) must not hide
//! the hits left unprinted: taken for printed, they kept the totals out, and `--folded` held 700 of 961.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::sync::mpsc;
use std::time::Duration;

use crate::util::{self, Writer};

/// Bytes of the stream its reader takes before it goes away: a few hundred hits of a 400,000-store flood.
const READ_BEFORE_CLOSING: usize = 300_000;

/// The number before `word` in the summary line of `err` (`ksymwatch: 961 hits (...`).
fn count_before(err: &str, word: &str) -> Option<u64> {
    let line = err.lines().find(|l| l.contains(" hits ("))?;
    let words: Vec<&str> = line.split([' ', ',']).filter(|w| !w.is_empty()).collect();
    let at = words.iter().position(|w| *w == word)?;
    words.get(at.checked_sub(1)?)?.parse().ok()
}

live_test!(hits_left_when_the_output_closes_are_in_the_folded_stacks, {
    let dir = util::temp_dir("ksw-exact-closed");
    let fifo = dir.join("stream");
    let folded = dir.join("stacks.folded");
    let _ = std::fs::remove_file(&fifo);
    let _ = std::fs::remove_file(&folded);
    util::mkfifo(&fifo);
    // Another process with its global at the same address (randomization off) stores all the while:
    // the program on each CPU's breakpoint filters its traps in the kernel.
    let mut other = Writer::start_fixed(&["write", "100000000", "1"]);
    let mut watched = Writer::start_fixed(&["write", "400000", "0"]);
    assert_eq!(other.addr, watched.addr, "both globals at one address");

    // The stream's reader: waiting in open when ksymwatch opens the FIFO, it says when the watch is
    // armed, reads a part of the flood, and goes away.
    let (armed_tx, armed_rx) = mpsc::channel();
    let path = fifo.clone();
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(File::open(&path).expect("the stream's FIFO"));
        let (mut read, mut line) = (0, String::new());
        while read < READ_BEFORE_CLOSING {
            line.clear();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
            if line.contains("\"type\":\"armed\"") {
                let _ = armed_tx.send(());
            }
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    let pid = watched.pid.to_string();
    let stream = fifo.display().to_string();
    let stacks = format!("--folded={}", folded.display());
    let args = [
        "write",
        "--json",
        "--no-status",
        "-o",
        &stream,
        &stacks,
        "-p",
        &pid,
        // A bound, should the output never close: the run then ends, the reader sees the end of the
        // stream and the test fails on the stop reason instead of hanging in the reader's join.
        "--duration",
        "60s",
        "target_var",
    ];
    let mut child = util::KillOnDrop(util::spawn(&args));
    armed_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the armed record");
    other.send("go");
    std::thread::sleep(Duration::from_millis(200));
    watched.send("go");
    reader.join().expect("the stream's reader");
    let status = util::wait_within(&mut child, Duration::from_secs(60));
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.contains("stopped: output closed"), "{err}");
    assert!(err.contains("by other processes at the address"), "{err}");
    assert!(err.contains("not printed (output closed)"), "{err}");
    let hits = count_before(&err, "hits").expect("the summary's hits");
    let text = std::fs::read_to_string(&folded).expect("the folded stacks");
    let stacked: u64 = text
        .lines()
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    assert_eq!(stacked, hits, "--folded against the summary's hits:\n{err}");
    assert!(err.contains("counted in the kernel's totals"), "{err}");
});
