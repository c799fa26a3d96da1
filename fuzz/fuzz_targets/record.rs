//! Ring-buffer bytes come from the kernel, but a decoder bug must not take the tracer down.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ksymwatch::perf::record::decode(data, ksymwatch::perf::record::SAMPLE_TYPE);
    // The hit path's ring buffer holds the hit program's records.
    let _ = ksymwatch::perf::hit_record::HitView::parse(data);
    if data.len() >= 8 {
        let st = u64::from_ne_bytes([data[0], data[1], data[2], data[3], data[4], data[5], data[6], data[7]]);
        let _ = ksymwatch::perf::record::decode(&data[8..], st);
    }
});
