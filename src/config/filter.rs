//! Which hits are reported: `--comm`, `--tid`, `--exclude-idle`, `--kernel-only`, `--user-only`. Applied
//! before anything is named or printed; a dropped hit is only counted (as filtered), never printed,
//! summarized nor counted toward `--count`.

use crate::perf::record::Sample;

/// Where the writer ran when it touched the target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Place {
    #[default]
    Anywhere,
    Kernel,
    User,
}

/// Every condition must hold; each list admits any of its members, and an empty list admits all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub comms: Vec<String>,
    pub tids: Vec<u32>,
    pub exclude_idle: bool,
    pub place: Place,
}

impl Filter {
    pub fn admits(&self, sample: &Sample, comm: &str) -> bool {
        if self.exclude_idle && sample.tid == 0 {
            return false;
        }
        if !self.tids.is_empty() && !self.tids.contains(&sample.tid) {
            return false;
        }
        if !self.comms.is_empty() && !self.comms.iter().any(|c| c == comm) {
            return false;
        }
        match self.place {
            Place::Anywhere => true,
            Place::Kernel => sample.in_kernel(),
            Place::User => !sample.in_kernel(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::record::{decode, encode, Record, SAMPLE_TYPE};

    fn sample(tid: u32, kernel: bool) -> Sample {
        let chain: Vec<u64> = if kernel {
            vec![encode::KERNEL, 0xffffffff81000000]
        } else {
            vec![encode::USER, 0x401000]
        };
        let ip = chain[1];
        let Record::Sample(s) =
            decode(&encode::sample(ip, tid, tid, 1, 2, 0, &chain), SAMPLE_TYPE).unwrap()
        else {
            panic!()
        };
        s
    }

    #[test]
    fn each_condition_narrows() {
        let all = Filter::default();
        assert!(all.admits(&sample(0, true), "<idle>"));
        let f = Filter {
            exclude_idle: true,
            ..Filter::default()
        };
        assert!(!f.admits(&sample(0, true), "<idle>"));
        assert!(f.admits(&sample(5, true), "x"));
        let f = Filter {
            tids: vec![5, 6],
            ..Filter::default()
        };
        assert!(f.admits(&sample(6, false), "x") && !f.admits(&sample(7, false), "x"));
        let f = Filter {
            comms: vec!["writer".into(), "bash".into()],
            ..Filter::default()
        };
        assert!(f.admits(&sample(7, false), "bash") && !f.admits(&sample(7, false), "writ"));
        let k = Filter {
            place: Place::Kernel,
            ..Filter::default()
        };
        let u = Filter {
            place: Place::User,
            ..Filter::default()
        };
        assert!(k.admits(&sample(7, true), "x") && !k.admits(&sample(7, false), "x"));
        assert!(u.admits(&sample(7, false), "x") && !u.admits(&sample(7, true), "x"));
        let both = Filter {
            comms: vec!["writer".into()],
            place: Place::User,
            ..Filter::default()
        };
        assert!(!both.admits(&sample(7, true), "writer"));
    }
}
