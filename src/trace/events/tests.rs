//! Unit tests of the event set: its audits.
use super::*;

/// A full ring's lost records count as hits only as far as the breakpoint's counter has hits that
/// never arrived: 64 threads' exits lost with 40 hits are 40 lost hits, not 104; throttled hits
/// (counted, neither arrived nor reported lost) stay out of the lost count; without a counter every
/// lost record counts.
#[test]
fn lost_records_count_as_hits_only_as_far_as_the_counter_says() {
    let audit = |kernel_hits, kernel_lost, samples, lost_records, filtered| Audit {
        cpu: 0,
        watch: 0,
        kernel_hits,
        kernel_lost,
        samples,
        lost_records,
        undecodable: 0,
        filtered,
        other_process: 0,
        beyond_count: 0,
        repeated: 0,
        unprinted_tail: 0,
    };
    let exits = audit(Some(1000), Some(104), 960, 90, 0);
    assert_eq!((exits.counted_lost(), exits.lost_hits()), (104, 40));
    let filtered = audit(Some(1000), Some(104), 900, 104, 60);
    assert_eq!(filtered.lost_hits(), 40);
    let throttled = audit(Some(1000), Some(10), 900, 10, 0);
    assert_eq!(throttled.lost_hits(), 10);
    assert_eq!(throttled.unaccounted(), Some(90));
    let no_counter = audit(None, None, 900, 10, 0);
    assert_eq!(no_counter.lost_hits(), 10);
    let none_lost = audit(Some(900), Some(0), 900, 0, 0);
    assert_eq!(none_lost.lost_hits(), 0);
    // `--count 1` on the hit path: the breakpoint went on counting until it was closed, the program
    // kept nothing after the first hit.
    let after_count = Audit {
        beyond_count: 4,
        ..audit(Some(5), Some(0), 1, 0, 0)
    };
    assert_eq!(
        (after_count.lost_hits(), after_count.unaccounted()),
        (0, Some(0))
    );
}
