//! Which process a pid names: a pid alone does not say once its process has exited, since the kernel
//! gives the number to the next process that needs one. With the time the process started (`starttime`
//! in `/proc/PID/stat`, clock ticks after boot), a pid names one process: another given the same pid
//! later started later. Planning records each `-p` process's start ([`Started`]); the session reads it
//! again once the process's pidfd is open (`crate::trace::watched`), and a pid that started at another
//! time is another process.

use std::io;

/// A process as planned: its pid, and when it started (clock ticks after boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    pub pid: u32,
    pub ticks: u64,
}

/// When process `pid` started, from `/proc/PID/stat`: `ENOENT` (or `ESRCH`) when it is gone, `InvalidData`
/// when the file does not read as a stat line.
pub fn start_time(pid: u32) -> io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_start_time(&stat).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("/proc/{pid}/stat: no start time in it"),
        )
    })
}

/// The start time (field 22, `starttime`) of a `/proc/PID/stat` line. The name (field 2) is in
/// parentheses and may hold spaces and parentheses of its own: the fields after it are counted from the
/// last `)`.
pub fn parse_start_time(stat: &str) -> Option<u64> {
    let (_, after_name) = stat.rsplit_once(')')?;
    // Field 3 (the state) is the first after the name.
    after_name.split_whitespace().nth(22 - 3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stat line whose name is `comm`, started at `start`.
    fn stat(comm: &str, start: u64) -> String {
        format!(
            "4242 ({comm}) S 1 4242 4242 0 -1 4194560 120 0 0 0 3 1 0 0 20 0 1 0 {start} 2461696 234 \
             18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
        )
    }

    #[test]
    fn the_start_time_is_field_22() {
        assert_eq!(parse_start_time(&stat("app", 98765)), Some(98765));
    }

    /// A name may hold spaces and parentheses, a `)` followed by what looks like fields among them.
    #[test]
    fn the_fields_are_counted_from_the_names_last_parenthesis() {
        for comm in [
            "a b",
            "x) S 1 2 3",
            "(",
            ")",
            ") 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21",
        ] {
            assert_eq!(parse_start_time(&stat(comm, 7)), Some(7), "name {comm:?}");
        }
    }

    #[test]
    fn a_line_without_its_fields_has_no_start_time() {
        assert_eq!(parse_start_time(""), None);
        assert_eq!(parse_start_time("4242 (app S 1 2"), None);
        assert_eq!(parse_start_time("4242 (app) S 1 2 3"), None);
        assert_eq!(
            parse_start_time(&stat("app", 0).replace(" 0 2461696", " x 2461696")),
            None
        );
    }

    /// This process's own start time reads, and a pid that names no process is `ENOENT`.
    #[test]
    fn a_running_process_has_a_start_time_and_a_gone_one_none() {
        assert!(start_time(std::process::id()).is_ok());
        let gone = start_time(u32::MAX).expect_err("no such pid");
        assert_eq!(gone.kind(), io::ErrorKind::NotFound);
    }
}
