//! The summary line's account of hits not printed (full rings, a closed or stalled output,
//! `--quiet`), on made-up summaries.

use super::*;

fn line(summary: &Summary) -> String {
    let mut out = Vec::new();
    summary_line(&mut out, summary).unwrap();
    String::from_utf8(out).unwrap()
}

/// A run counted in the kernel's totals: `hits` on cpu 0, `unprinted` of them not printed.
fn counted_in_totals(hits: u64, unprinted: u64, stop: Option<StopReason>) -> Summary {
    let mut s = Summary {
        from_totals: true,
        stop,
        ..Summary::default()
    };
    s.hits_by_cpu.insert(0, hits);
    s.unprinted_by_cpu.insert(0, unprinted);
    s
}

/// Records a full ring dropped: without totals they are lost; from the kernel's totals they are only
/// not printed, and `lost` is what no total holds.
#[test]
fn the_summary_line_says_what_the_totals_hold() {
    let mut s = Summary::default();
    s.hits_by_cpu.insert(0, 10);
    s.lost_by_cpu.insert(0, 90);
    let plain = line(&s);
    assert!(
        plain.starts_with("ksymwatch: 10 hits (cpu0 10), 90 lost,"),
        "{plain}"
    );
    assert!(plain.contains("WARNING: 90 events lost (cpu0 90); use a larger --buffer-pages"));
    let mut s = counted_in_totals(100, 90, None);
    let totals = line(&s);
    assert!(
        totals.starts_with(
            "ksymwatch: 100 hits (cpu0 100), 0 lost, 0.000s, 90 not printed (ring full), counted in \
             the kernel's totals\n"
        ),
        "{totals}"
    );
    assert!(!totals.contains("WARNING"), "{totals}");
    assert!(totals.contains("90 hits not printed (cpu0 90)"), "{totals}");
    s.lost_by_cpu.insert(1, 3);
    assert!(line(&s).contains("WARNING: 3 hits lost (cpu1 3): in no total"));
}

/// `--quiet` (and `--folded` on stdout) prints no hit by design: a run whose rings filled says nothing
/// of hits "not printed" nor of a larger --buffer-pages, on stderr or in the report; the counts stay the
/// kernel's totals.
#[test]
fn a_quiet_run_does_not_blame_full_rings_for_what_it_never_prints() {
    let (mut out, mut err, mut notes) = (Vec::new(), Vec::new(), Vec::new());
    let mut s = counted_in_totals(100, 90, None);
    s.tally = Some(summary::Tally::default());
    Quiet::new(ftrace::Ftrace::new(&mut out, &mut err), &mut notes)
        .finish(&s)
        .unwrap();
    let (out, err) = (
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    );
    assert_eq!(err, "ksymwatch: 100 hits (cpu0 100), 0 lost, 0.000s\n");
    assert!(!out.contains("not printed"), "{out}");
    assert!(notes.is_empty());
    // Where hits are printed, the same run says why 90 were not.
    assert!(line(&s).contains("90 hits not printed (cpu0 90): their rings were full"));
}

/// A run whose reader went away (`| head -1`) leaves the hits after it in the rings: not printed
/// because the output was closed, not because a ring was full, and no larger ring would print them.
#[test]
fn hits_left_when_the_output_closed_are_not_blamed_on_full_rings() {
    let s = counted_in_totals(13, 9, Some(StopReason::BrokenPipe));
    let text = line(&s);
    assert!(
        text.starts_with(
            "ksymwatch: 13 hits (cpu0 13), 0 lost, 0.000s, 9 not printed (output closed), counted in \
             the kernel's totals, stopped: output closed\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "ksymwatch: 9 hits not printed (cpu0 9): the output was closed before they could be \
             printed; the counts, the summary and --folded include them, from the kernel's totals\n"
        ),
        "{text}"
    );
    assert!(!text.contains("ring"), "{text}");
    let mut report = Vec::new();
    let tally = summary::Tally::default();
    summary::write_text(&mut report, &s, &tally, 0).unwrap();
    let report = String::from_utf8(report).unwrap();
    assert!(
        report.starts_with(
            "# summary: 13 hits, 0 lost, 0 filtered, 0.000s, 9 not printed (output closed): every \
             count below is the kernel's, of every hit, stopped: output closed\n"
        ),
        "{report}"
    );
}

/// A stop signal that ended an output whose reader read nothing: the signal is the reason, and the
/// hits not printed are put down to the reader, not to a full ring or a closed output.
#[test]
fn hits_a_stalled_reader_never_read_are_put_down_to_it() {
    let mut s = counted_in_totals(13, 9, Some(StopReason::Signal(libc::SIGTERM as u32)));
    s.output_not_read = true;
    let text = line(&s);
    assert!(
        text.starts_with(
            "ksymwatch: 13 hits (cpu0 13), 0 lost, 0.000s, 9 not printed (output not read), counted \
             in the kernel's totals, stopped: signal SIGTERM\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "9 hits not printed (cpu0 9): the output's reader read nothing when the run was to stop"
        ),
        "{text}"
    );
    assert!(!text.contains("ring") && !text.contains("closed"), "{text}");
}
