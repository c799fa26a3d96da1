//! Which kernel tracepoint a `--on tracepoint:GROUP:NAME:ARG` source or a `--dump-on tracepoint:GROUP:NAME`
//! trigger names, and where a source's object pointer is. The kernel's BTF answers without tracefs (see
//! `ksymwatch_symbols::Btf::tracepoint`): whether the raw tracepoint exists (programs attach to it by name),
//! its arguments, their names and types, and its record's fields. tracefs, when it is mounted, answers the
//! rest: whether GROUP is the tracepoint's group (BTF knows tracepoints by name only), and where a record
//! field that is not an argument sits (its format file) and the event's id to attach at. Nothing BTF can
//! answer needs tracefs.
//!
//! The decisions are pure functions of what BTF and tracefs said ([`find`], [`pointer()`]); the callers add
//! the flag the error is about.

use std::path::{Path, PathBuf};

use ksymwatch_symbols::{TpValue, TracepointInfo};

use crate::config::objects::TpArg;

/// Where tracefs lists its events (`GROUP/NAME` directories), when it is mounted: the first that exists.
pub const EVENTS_DIRS: [&str; 2] = [
    "/sys/kernel/tracing/events",
    "/sys/kernel/debug/tracing/events",
];

/// How to mount tracefs, for the one case that needs it.
const MOUNT: &str = "mount -t tracefs nodev /sys/kernel/tracing";

/// tracefs's events directory, when tracefs is mounted.
pub fn tracefs_events() -> Option<PathBuf> {
    EVENTS_DIRS.iter().map(PathBuf::from).find(|d| d.is_dir())
}

/// What the kernel's BTF said of a tracepoint name: `Ok` its description, `Err` the nearest names it has.
pub type BtfAnswer = Result<TracepointInfo, Vec<String>>;

/// A tracepoint that exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub group: String,
    pub name: String,
    /// Its arguments and record, when there is BTF to describe them.
    pub info: Option<TracepointInfo>,
    /// tracefs's events directory, when mounted (where a record field's format is).
    pub events: Option<PathBuf>,
    /// Why the group could not be checked (`None`: tracefs lists GROUP/NAME).
    pub group_unchecked: Option<String>,
}

impl Event {
    /// The note a header carries when the group was not checked: `group `sched` not checked: ...`.
    pub fn group_note(&self) -> Option<String> {
        self.group_unchecked
            .as_ref()
            .map(|why| format!("group `{}` not checked: {why}", self.group))
    }
}

/// The refusal of a `syscalls:*` event, or any other event tracefs lists with no raw tracepoint behind it.
fn no_raw(group: &str, name: &str) -> String {
    if group == "syscalls" {
        format!(
            "the kernel has no raw tracepoint `{name}` to attach a program to (syscalls:* events are \
             ftrace's, made from raw_syscalls:sys_enter and sys_exit); pick a tracepoint of another group"
        )
    } else {
        format!(
            "tracefs lists {group}:{name}, but the kernel has no raw tracepoint `{name}` to attach a \
             program to; pick another tracepoint"
        )
    }
}

/// The groups under `events` that have an event `name`, sorted.
fn groups_of(events: &Path, name: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(events) else {
        return Vec::new();
    };
    let mut groups: Vec<String> = dir
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join(name).is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    groups.sort();
    groups
}

/// Checks that tracepoint `group:name` exists, from `btf` (`None`: no BTF to ask) and `events` (tracefs's
/// events directory, `None` when not mounted). The error is the text after the flag.
pub fn find(
    group: &str,
    name: &str,
    btf: Option<BtfAnswer>,
    events: Option<&Path>,
) -> Result<Event, String> {
    let listed = events.map(|e| e.join(group).join(name).is_dir());
    let info = match btf {
        Some(Ok(info)) => Some(info),
        Some(Err(near)) => {
            // Not a raw tracepoint: an ftrace-made event (syscalls:*), or no tracepoint at all.
            if listed == Some(true) || (group == "syscalls" && name.starts_with("sys_")) {
                return Err(no_raw(group, name));
            }
            let near = if near.is_empty() {
                "; `bpftool btf dump file /sys/kernel/btf/vmlinux | grep btf_trace_` lists them"
                    .into()
            } else {
                format!("; nearest: {}", near.join(", "))
            };
            return Err(format!(
                "no tracepoint {group}:{name}: the kernel's BTF has no raw tracepoint `{name}` \
                 (btf_trace_{name}){near}"
            ));
        }
        None => None,
    };
    let group_unchecked = match (events, listed) {
        (Some(_), Some(true)) => None,
        (Some(root), _) => {
            let groups = groups_of(root, name);
            if info.is_none() || !groups.is_empty() {
                return Err(format!(
                    "no tracepoint {group}:{name} in {}{}",
                    root.display(),
                    in_groups(name, &groups)
                ));
            }
            // A tracepoint declared without an event (DECLARE_TRACE) has no directory and no group.
            Some(
                "tracefs lists no event of that name (a tracepoint without an event has no group)"
                    .into(),
            )
        }
        (None, _) if info.is_none() => {
            // Neither BTF nor tracefs: the attach says whether the name exists.
            Some("neither BTF nor tracefs is there to check it".into())
        }
        (None, _) => Some("tracefs is not mounted, and BTF knows tracepoints by name only".into()),
    };
    Ok(Event {
        group: group.to_string(),
        name: name.to_string(),
        info,
        events: events.map(Path::to_path_buf),
        group_unchecked,
    })
}

/// `: `NAME` is in group G: tracepoint:G:NAME`, or a hint to look there.
fn in_groups(name: &str, groups: &[String]) -> String {
    match groups {
        [] => ": pick one listed there as GROUP/NAME".into(),
        [g] => format!(": `{name}` is in group {g}: tracepoint:{g}:{name}"),
        gs => format!(": `{name}` is in groups {}", gs.join(", ")),
    }
}

/// Where a `--on tracepoint:` source's object pointer is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PointerAt {
    /// The raw tracepoint's argument `index`; `how` says which, for the header (`argument 1, `struct
    /// task_struct *child``); `note`, when it points to a struct or union of another name than the
    /// target's cast.
    Arg {
        index: u8,
        how: String,
        note: Option<String>,
    },
    /// A field of the event's record, read where tracefs's format file says (`Event::events` is set).
    Record { field: String },
}

/// `arg0 `struct task_struct *parent`, arg1 ...`.
fn arg_list(args: &[TpValue]) -> String {
    if args.is_empty() {
        return "none".into();
    }
    args.iter()
        .enumerate()
        .map(|(i, a)| format!("arg{i} `{}`", a.declaration()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The arguments that can hold an object's address, by name (or argN when unnamed).
fn pointer_args(args: &[TpValue]) -> String {
    let names: Vec<String> = args
        .iter()
        .enumerate()
        .filter(|(_, a)| a.holds_address())
        .map(|(i, a)| a.name.clone().unwrap_or_else(|| format!("arg{i}")))
        .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// `, e.g. tracepoint:GROUP:NAME:ARG` for the first argument that can be the object, if any.
fn example(event: &Event) -> String {
    let first = event.info.as_ref().and_then(|i| {
        i.args
            .iter()
            .enumerate()
            .find(|(_, a)| a.pointer)
            .map(|(n, a)| a.name.clone().unwrap_or_else(|| format!("arg{n}")))
    });
    first.map_or(String::new(), |a| {
        format!(", e.g. tracepoint:{}:{}:{a}", event.group, event.name)
    })
}

/// The header's words for argument `index`.
fn arg_how(index: usize, a: &TpValue) -> String {
    format!("argument {index}, `{}`", a.declaration())
}

/// Where the object pointer `arg` names is in `event`, with a note when that argument's type is not
/// `cast` (the `$obj` target's type, as written): all a source asks of its tracepoint, in one answer. The
/// error is the text after `--on SOURCE: `.
pub fn pointer(event: &Event, arg: &TpArg, cast: &str) -> Result<PointerAt, String> {
    let mut at = place(event, arg)?;
    if let PointerAt::Arg { index, note, .. } = &mut at {
        *note = cast_note(event, *index, cast);
    }
    Ok(at)
}

/// [`pointer`]'s place, without the note.
fn place(event: &Event, arg: &TpArg) -> Result<PointerAt, String> {
    let name = &event.name;
    let Some(info) = &event.info else {
        // No BTF: an argument is read as given; a field needs tracefs's format.
        return match arg {
            TpArg::Index(i) => Ok(PointerAt::Arg {
                index: *i,
                how: format!("argument {i}, unchecked: no BTF"),
                note: None,
            }),
            TpArg::Field(f) if event.events.is_some() => Ok(PointerAt::Record { field: f.clone() }),
            TpArg::Field(_) => Err(
                "a field is found in the kernel's BTF or tracefs's format file, and there is neither; \
                 name the argument as argN (TP_PROTO order, from 0)"
                    .into(),
            ),
        };
    };
    let not_pointer = |what: String, a: &TpValue| {
        format!(
            "{what} is `{}`, not a pointer to an object; its pointer arguments: {}",
            a.declaration(),
            pointer_args(&info.args)
        )
    };
    let field = match arg {
        TpArg::Index(i) => {
            let index = usize::from(*i);
            let Some(a) = info.args.get(index) else {
                return Err(format!(
                    "`{name}` has {} argument{}: {}; argN counts them from 0",
                    info.args.len(),
                    if info.args.len() == 1 { "" } else { "s" },
                    arg_list(&info.args)
                ));
            };
            if !a.holds_address() {
                return Err(not_pointer(format!("argument {i} of `{name}`"), a));
            }
            return Ok(PointerAt::Arg {
                index: *i,
                how: arg_how(index, a),
                note: None,
            });
        }
        TpArg::Field(f) => f,
    };
    if let Some((index, a)) = info.arg(field) {
        if !a.holds_address() {
            return Err(not_pointer(
                format!("`{field}` (argument {index} of `{name}`)"),
                a,
            ));
        }
        return Ok(PointerAt::Arg {
            index: u8::try_from(index)
                .map_err(|_| format!("`{field}` is argument {index}, too far in"))?,
            how: arg_how(index, a),
            note: None,
        });
    }
    let tracefs = event.events.is_some();
    let named = info.args.iter().all(|a| a.name.is_some());
    let record = info
        .record
        .as_ref()
        .map(|fields| (fields, info.field(field)));
    match record {
        Some((_, Some(v))) if v.name.as_deref() != Some(field.as_str()) => Err(format!(
            "`{field}` is a string or array the event's record holds itself (`__data_loc`), not a \
             pointer to an object; its pointer arguments: {}",
            pointer_args(&info.args)
        )),
        Some((_, Some(v))) if !v.pointer => Err(not_pointer(
            format!("`{field}` (a field of `{name}`'s record)"),
            v,
        )),
        Some((_, Some(_))) if tracefs => Ok(PointerAt::Record {
            field: field.clone(),
        }),
        Some((_, Some(_))) => Err(format!(
            "`{field}` is a field of `{name}`'s tracefs record, not one of its arguments ({}): reading it \
             needs tracefs ({MOUNT}); or name an argument{}",
            arg_list(&info.args),
            example(event)
        )),
        Some((fields, None)) => {
            let pointers: Vec<&str> = fields
                .iter()
                .filter(|f| f.pointer)
                .filter_map(|f| f.name.as_deref())
                .collect();
            Err(format!(
                "`{name}` has no argument and no field `{field}`; its pointer arguments: {}; its record's \
                 pointer fields: {}",
                pointer_args(&info.args),
                if pointers.is_empty() {
                    "none".into()
                } else {
                    pointers.join(", ")
                }
            ))
        }
        // The event's record is of a class of another name: only its format file says.
        None if tracefs => Ok(PointerAt::Record {
            field: field.clone(),
        }),
        None if !named => Err(format!(
            "this kernel's BTF keeps no names for `{name}`'s arguments; name one as argN: {}",
            arg_list(&info.args)
        )),
        None => Err(format!(
            "`{field}` is not an argument of `{name}` ({}); a field of its tracefs record needs tracefs \
             ({MOUNT}), or name an argument{}",
            arg_list(&info.args),
            example(event)
        )),
    }
}

/// A note when argument `index` points to a struct or union of another name than `cast` (the `$obj`
/// target's type, as written): a likely mistake, though a type that begins with the other (`tcp_sock`
/// and `sock`) is a right one, so it is said, not refused.
fn cast_note(event: &Event, index: u8, cast: &str) -> Option<String> {
    let arg = event.info.as_ref()?.args.get(usize::from(index))?;
    let pointee = arg.pointee.as_deref()?;
    let bare = |t: &str| {
        t.trim()
            .trim_start_matches("struct ")
            .trim_start_matches("union ")
            .trim()
            .to_string()
    };
    let named = pointee.starts_with("struct ") || pointee.starts_with("union ");
    (named && bare(pointee) != bare(cast)).then(|| {
        format!(
            "argument {index} is `{}`, and the target casts $obj to {cast}: right only if a {cast} begins \
             with a {pointee}",
            arg.declaration()
        )
    })
}

/// Checks that the raw tracepoint of `event` passes the arguments named `expected` at those positions
/// (what a built-in source reads, e.g. kmalloc's `call_site`, `ptr`, `bytes_req`); unnamed arguments are
/// taken on trust. The error says what this kernel passes.
pub fn expect_args(event: &Event, expected: &[&str]) -> Result<(), String> {
    let Some(info) = &event.info else {
        return Ok(());
    };
    let matches = expected.iter().enumerate().all(|(i, want)| {
        info.args
            .get(i)
            .is_some_and(|a| a.name.as_deref().is_none_or(|n| n == *want))
    });
    if matches {
        return Ok(());
    }
    Err(format!(
        "this kernel's `{}` passes {}, and ksymwatch reads {} there",
        event.name,
        arg_list(&info.args),
        expected
            .iter()
            .enumerate()
            .map(|(i, n)| format!("arg{i} `{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ksymwatch_symbols::testing::assert_mentions;

    /// The `$obj` cast the pointer tests write (the type `sched_process_fork`'s argument 1 points to).
    const TASK: &str = "struct task_struct";

    /// `arg` of `event` is no object pointer: refused with a message holding every one of `parts`.
    #[track_caller]
    fn refuses_pointer(event: &Event, arg: TpArg, parts: &[&str]) {
        assert_mentions(&pointer(event, &arg, TASK).unwrap_err(), parts);
    }

    fn value(name: Option<&str>, type_name: &str, pointee: Option<&str>, size: u64) -> TpValue {
        TpValue {
            name: name.map(str::to_string),
            type_name: type_name.into(),
            pointer: pointee.is_some(),
            size: Some(size),
            pointee: pointee.map(str::to_string),
        }
    }

    fn task(name: &str) -> TpValue {
        value(
            Some(name),
            "struct task_struct *",
            Some("struct task_struct"),
            8,
        )
    }

    /// `sched_process_fork` as this kernel's BTF has it.
    fn fork() -> TracepointInfo {
        TracepointInfo {
            name: "sched_process_fork".into(),
            args: vec![task("parent"), task("child")],
            record: Some(vec![
                value(Some("__data_loc_parent_comm"), "u32", None, 4),
                value(Some("parent_pid"), "pid_t", None, 4),
                value(Some("child_pid"), "pid_t", None, 4),
            ]),
        }
    }

    /// `inet_sock_set_state`: its record's `skaddr` is no argument.
    fn sock_state() -> TracepointInfo {
        TracepointInfo {
            name: "inet_sock_set_state".into(),
            args: vec![
                value(Some("sk"), "const struct sock *", Some("struct sock"), 8),
                value(Some("oldstate"), "const int", None, 4),
                value(Some("newstate"), "const int", None, 4),
            ],
            record: Some(vec![
                value(Some("skaddr"), "const void *", Some("void"), 8),
                value(Some("oldstate"), "int", None, 4),
            ]),
        }
    }

    /// A tracefs events directory holding `group/name` for each pair.
    fn tracefs(tag: &str, events: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ksw-tp-{tag}-{}", std::process::id()));
        for (g, n) in events {
            std::fs::create_dir_all(dir.join(g).join(n)).unwrap();
        }
        dir
    }

    fn found(group: &str, info: TracepointInfo, events: Option<&Path>) -> Event {
        let name = info.name.clone();
        find(group, &name, Some(Ok(info)), events).unwrap()
    }

    #[test]
    fn btf_alone_finds_a_tracepoint_and_says_the_group_is_unchecked() {
        let e = found("sched", fork(), None);
        assert_eq!(e.info.as_ref().map(|i| i.args.len()), Some(2));
        let note = e.group_note().expect("a note");
        assert!(
            note.contains("group `sched` not checked") && note.contains("tracefs is not mounted"),
            "{note}"
        );
        let e = find(
            "sched",
            "sched_proces_fork",
            Some(Err(vec!["sched_process_fork".into()])),
            None,
        )
        .unwrap_err();
        assert!(
            e.contains("no tracepoint sched:sched_proces_fork")
                && e.contains("nearest: sched_process_fork"),
            "{e}"
        );
        let e = find("x", "y", Some(Err(vec![])), None).unwrap_err();
        assert!(e.contains("bpftool btf dump"), "{e}");
    }

    #[test]
    fn tracefs_checks_the_group_when_it_is_mounted() {
        let events = tracefs("group", &[("sched", "sched_process_fork")]);
        let e = found("sched", fork(), Some(&events));
        assert_eq!(e.group_note(), None);
        assert_eq!(e.events.as_deref(), Some(events.as_path()));
        let wrong = find(
            "kmem",
            "sched_process_fork",
            Some(Ok(fork())),
            Some(&events),
        )
        .unwrap_err();
        assert!(
            wrong.contains("no tracepoint kmem:sched_process_fork in")
                && wrong.contains("tracepoint:sched:sched_process_fork"),
            "{wrong}"
        );
        // A tracepoint with no event has no directory in any group: accepted, said unchecked.
        let mut bare = fork();
        bare.name = "pelt_cfs_tp".into();
        let e = found("sched", bare, Some(&events));
        assert!(e.group_note().unwrap().contains("no event"), "{e:?}");
        // Without BTF, tracefs alone decides.
        let e = find("sched", "sched_process_fork", None, Some(&events)).unwrap();
        assert_eq!((e.info, e.group_unchecked), (None, None));
        let e = find("sched", "gone", None, Some(&events)).unwrap_err();
        assert!(e.contains("no tracepoint sched:gone in"), "{e}");
        // Neither: the attach will tell.
        let e = find("sched", "gone", None, None).unwrap();
        assert!(e.group_note().unwrap().contains("neither BTF nor tracefs"));
    }

    #[test]
    fn syscall_events_are_not_raw_tracepoints_with_or_without_tracefs() {
        for events in [
            None,
            Some(tracefs("sys", &[("syscalls", "sys_enter_getppid")])),
        ] {
            let e = find(
                "syscalls",
                "sys_enter_getppid",
                Some(Err(vec![])),
                events.as_deref(),
            )
            .unwrap_err();
            assert!(
                e.contains("no raw tracepoint `sys_enter_getppid`") && e.contains("raw_syscalls"),
                "{e}"
            );
        }
        let events = tracefs("ftraceonly", &[("ftrace", "function")]);
        let e = find("ftrace", "function", Some(Err(vec![])), Some(&events)).unwrap_err();
        assert!(e.contains("tracefs lists ftrace:function"), "{e}");
    }

    #[test]
    fn an_arguments_name_is_read_as_that_raw_argument() {
        let e = found("sched", fork(), None);
        let at = pointer(&e, &TpArg::Field("child".into()), TASK).unwrap();
        assert_eq!(
            at,
            PointerAt::Arg {
                index: 1,
                how: "argument 1, `struct task_struct *child`".into(),
                note: None,
            }
        );
        assert_eq!(pointer(&e, &TpArg::Index(1), TASK).unwrap(), at);
        // With tracefs mounted too: the argument, not the record.
        let events = tracefs("argname", &[("sched", "sched_process_fork")]);
        let e = found("sched", fork(), Some(&events));
        assert_eq!(
            pointer(&e, &TpArg::Field("child".into()), TASK).unwrap(),
            at
        );
    }

    #[test]
    fn arguments_out_of_range_or_not_pointers_are_refused() {
        let e = found("sched", fork(), None);
        refuses_pointer(
            &e,
            TpArg::Index(2),
            &["has 2 arguments: arg0 `struct task_struct *parent`, arg1"],
        );
        let e = found("sock", sock_state(), None);
        refuses_pointer(
            &e,
            TpArg::Field("oldstate".into()),
            &[
                "`oldstate` (argument 1",
                "`const int oldstate`, not a pointer",
                "its pointer arguments: sk",
            ],
        );
        refuses_pointer(
            &e,
            TpArg::Index(2),
            &["argument 2 of `inet_sock_set_state`"],
        );
    }

    #[test]
    fn a_record_field_needs_tracefs_only_when_it_is_no_argument() {
        // Without tracefs.
        refuses_pointer(
            &found("sock", sock_state(), None),
            TpArg::Field("skaddr".into()),
            &[
                "`skaddr` is a field of `inet_sock_set_state`'s tracefs record",
                "arg0 `const struct sock *sk`",
                "mount -t tracefs",
                "e.g. tracepoint:sock:inet_sock_set_state:sk",
            ],
        );
        let events = tracefs("record", &[("sock", "inet_sock_set_state")]);
        let mounted = found("sock", sock_state(), Some(&events));
        assert_eq!(
            pointer(&mounted, &TpArg::Field("skaddr".into()), TASK).unwrap(),
            PointerAt::Record {
                field: "skaddr".into()
            }
        );
        // What BTF can answer is answered the same with tracefs or without.
        for e in [
            found("sched", fork(), None),
            found("sched", fork(), Some(&events)),
        ] {
            refuses_pointer(
                &e,
                TpArg::Field("child_pid".into()),
                &[
                    "`child_pid` (a field of `sched_process_fork`'s record) is `pid_t child_pid`, not a pointer",
                    "its pointer arguments: parent, child",
                ],
            );
            refuses_pointer(
                &e,
                TpArg::Field("parent_comm".into()),
                &[
                    "`parent_comm` is a string or array the event's record holds itself",
                    "its pointer arguments: parent, child",
                ],
            );
            refuses_pointer(
                &e,
                TpArg::Field("nope".into()),
                &[
                    "has no argument and no field `nope`",
                    "record's pointer fields: none",
                ],
            );
        }
    }

    #[test]
    fn events_of_another_class_and_kernels_without_argument_names() {
        let mut wakeup = TracepointInfo {
            name: "sched_wakeup".into(),
            args: vec![task("p")],
            record: None,
        };
        let e = found("sched", wakeup.clone(), None);
        refuses_pointer(
            &e,
            TpArg::Field("comm".into()),
            &[
                "`comm` is not an argument of `sched_wakeup` (arg0 `struct task_struct *p`)",
                "needs tracefs",
            ],
        );
        let events = tracefs("class", &[("sched", "sched_wakeup")]);
        let mounted = found("sched", wakeup.clone(), Some(&events));
        assert!(matches!(
            pointer(&mounted, &TpArg::Field("comm".into()), TASK),
            Ok(PointerAt::Record { .. })
        ));
        wakeup.args[0].name = None;
        let e = found("sched", wakeup, None);
        let p = pointer(&e, &TpArg::Field("p".into()), TASK).unwrap_err();
        assert!(
            p.contains("keeps no names") && p.contains("arg0 `struct task_struct *`"),
            "{p}"
        );
        assert!(matches!(
            pointer(&e, &TpArg::Index(0), TASK),
            Ok(PointerAt::Arg { index: 0, .. })
        ));
    }

    #[test]
    fn without_btf_an_argument_is_taken_as_given() {
        let e = find("sched", "sched_process_fork", None, None).unwrap();
        assert!(matches!(
            pointer(&e, &TpArg::Index(3), TASK),
            Ok(PointerAt::Arg { index: 3, .. })
        ));
        let f = pointer(&e, &TpArg::Field("child".into()), TASK).unwrap_err();
        assert!(f.contains("argN"), "{f}");
    }

    #[test]
    fn a_cast_of_another_type_than_the_argument_points_to_is_noted() {
        let e = found("sched", fork(), None);
        assert_eq!(cast_note(&e, 1, "struct task_struct"), None);
        assert_eq!(cast_note(&e, 1, "task_struct"), None);
        let note = cast_note(&e, 1, "struct pipe_inode_info").expect("a note");
        assert!(
            note.contains("argument 1 is `struct task_struct *child`")
                && note.contains("casts $obj to struct pipe_inode_info"),
            "{note}"
        );
        let void = TracepointInfo {
            name: "kmalloc".into(),
            args: vec![value(Some("ptr"), "const void *", Some("void"), 8)],
            record: None,
        };
        assert_eq!(cast_note(&found("kmem", void, None), 0, "struct x"), None);
        assert_eq!(cast_note(&e, 7, "struct x"), None);
        // `pointer` answers with the note.
        let at = pointer(&e, &TpArg::Index(1), "struct pipe_inode_info").unwrap();
        assert!(matches!(at, PointerAt::Arg { note: Some(n), .. } if n == note));
    }

    #[test]
    fn built_in_sources_check_the_arguments_they_read() {
        let kmalloc = TracepointInfo {
            name: "kmalloc".into(),
            args: vec![
                value(Some("call_site"), "long unsigned int", None, 8),
                value(Some("ptr"), "const void *", Some("void"), 8),
                value(Some("bytes_req"), "size_t", None, 8),
            ],
            record: None,
        };
        let e = found("kmem", kmalloc.clone(), None);
        assert_eq!(expect_args(&e, &["call_site", "ptr", "bytes_req"]), Ok(()));
        let moved = expect_args(&e, &["call_site", "ptr", "s"]).unwrap_err();
        assert!(
            moved.contains("this kernel's `kmalloc` passes arg0 `long unsigned int call_site`")
                && moved.contains("ksymwatch reads arg0 `call_site`, arg1 `ptr`, arg2 `s`"),
            "{moved}"
        );
        let mut unnamed = kmalloc;
        unnamed.args.iter_mut().for_each(|a| a.name = None);
        let e = found("kmem", unnamed, None);
        assert_eq!(expect_args(&e, &["call_site", "ptr", "bytes_req"]), Ok(()));
        assert!(expect_args(&e, &["a", "b", "c", "d"]).is_err(), "too few");
    }
}
