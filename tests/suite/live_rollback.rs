//! Proof that arming is a transaction (the 2009 hw-breakpoint thread): with a CPU's debug registers taken by
//! a helper, `ksymwatch write` on all CPUs exits 3 naming that CPU, prints no hit, and leaves every slot it
//! took on the other CPUs free again (checked by re-opening the full count there).

use crate::util::{self, Holder};

/// Every debug register of every online CPU is free: a holder gets all four on each.
fn assert_all_slots_free(context: &str) {
    for cpu in util::online_cpus() {
        let h = Holder::start(cpu, 4);
        assert_eq!(
            h.held, 4,
            "{context}: cpu {cpu} still has a slot taken after the failed arm"
        );
    }
}

fn assert_refused(args: &[&str], cpu: u32, context: &str) -> String {
    let (code, out, err) = util::run(args);
    assert_eq!(code, 3, "{context}: {err}");
    // How many registers the CPU had and how many the watch needed, counted the kernel's way.
    assert!(
        err.contains(&format!("cpu {cpu} has ")) && err.contains(" needed;"),
        "{context}: {err}"
    );
    assert!(err.contains("nothing was armed"), "{context}: {err}");
    assert!(
        out.is_empty(),
        "{context}: no header, no hit on stdout: {out}"
    );
    err
}

live_test!(a_full_cpu_fails_the_whole_arm_and_rolls_back, {
    let cpus = util::online_cpus();
    let last = *cpus.last().unwrap();
    for &busy in &[cpus[0], last] {
        {
            let h = Holder::start(busy, 4);
            assert_eq!(
                h.held, 4,
                "the helper could not take cpu {busy}'s registers: is something else holding them?"
            );
            let err = assert_refused(
                &["write", "0x10000"],
                busy,
                &format!("all CPUs, cpu {busy} full"),
            );
            assert!(
                err.contains(&format!("cpu {busy} has 0 free debug registers, 1 needed")),
                "{err}"
            );
            let list = util::online_cpus()
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",");
            let _ = assert_refused(
                &["write", "0x10000", "--cpus", &list],
                busy,
                &format!("--cpus {list}, cpu {busy} full"),
            );
            let _ = assert_refused(&["rw", "0x10000"], busy, &format!("rw, cpu {busy} full"));
        }
        assert_all_slots_free(&format!("after cpu {busy} was full"));
    }
});

// With two targets the events open CPU by CPU, target by target: (cpu0,a) (cpu0,b) (cpu1,a) (cpu1,b). Leaving
// one register free on a CPU makes the failure land in the middle of the transaction (after an event on
// that very CPU succeeded); the last CPU with one free makes it the very last open.
live_test!(failure_in_the_middle_or_at_the_last_event_rolls_back_too, {
    let cpus = util::online_cpus();
    for &busy in &[cpus[0], *cpus.last().unwrap()] {
        {
            let h = Holder::start(busy, 3);
            assert_eq!(h.held, 3);
            let err = assert_refused(
                &["write", "0x10000", "0x10008"],
                busy,
                &format!("two targets, cpu {busy} has one slot"),
            );
            assert!(
                err.contains(&format!("cpu {busy} has 1 free debug register, 2 needed")),
                "{err}"
            );
        }
        assert_all_slots_free(&format!("after two targets failed on cpu {busy}"));
    }
});

// A full CPU that is neither the first nor the last to be armed: the failure lands between CPUs.
live_test!(failure_on_a_middle_cpu_rolls_back_too, {
    let cpus = util::online_cpus();
    if cpus.len() < 3 {
        util::skip(format_args!(
            "a failure on a middle CPU needs 3 or more online CPUs; this machine has {}",
            cpus.len()
        ));
        return;
    }
    let middle = cpus[cpus.len() / 2];
    {
        let _h = Holder::start(middle, 4);
        let _ = assert_refused(&["write", "0x10000"], middle, "middle CPU full");
    }
    assert_all_slots_free("after the middle CPU was full");
});

live_test!(a_cpu_not_in_the_list_does_not_matter, {
    let cpus = util::online_cpus();
    if cpus.len() < 2 {
        util::skip("needs two online CPUs");
        return;
    }
    let _h = Holder::start(cpus[1], 4);
    let (code, out, err) = util::run(&[
        "write",
        "0x10000",
        "--cpus",
        &cpus[0].to_string(),
        "--duration",
        "100ms",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("# armed 1 breakpoint on cpus {} ", cpus[0])),
        "{out}"
    );
});
