//! Tracepoints as the kernel's BTF describes them, with no tracefs: every tracepoint a BPF program can
//! attach to by name (a raw tracepoint) has a `btf_trace_NAME` typedef, a pointer to the prototype its
//! programs are called with (`void *__data`, then the tracepoint's `TP_PROTO` arguments, unnamed);
//! `__traceiter_NAME` (Linux 5.10 and later) is a function of the same prototype whose parameters carry
//! the arguments' names; `trace_event_raw_NAME`, when the event is its own class, is the layout of the
//! record ftrace writes (whose fields may be computed, and need not be arguments).
//!
//! The tracepoint's group (`sched` in `sched:sched_switch`) is in none of these: it is tracefs's
//! directory name, and only tracefs can check it.

use super::reader::kind;
use super::{Btf, Ty};
use crate::member::graph::size;
use crate::member::name::type_name;
use crate::member::FieldError;

/// The prefix of the typedef every raw tracepoint has.
const TYPEDEF_PREFIX: &str = "btf_trace_";
/// The prefix of the function whose parameters name the arguments.
const ITER_PREFIX: &str = "__traceiter_";
/// The prefix of the event record's struct.
const RECORD_PREFIX: &str = "trace_event_raw_";
/// The most close names [`Btf::suggest_tracepoints`] gives.
const MAX_SUGGESTIONS: usize = 3;

/// One argument of a raw tracepoint, or one field of its event's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TpValue {
    /// `None`: BTF keeps no name for it (an argument of a kernel without `__traceiter_NAME`).
    pub name: Option<String>,
    /// The C type, as the crate spells types (`struct task_struct *`, `const int`).
    pub type_name: String,
    /// Through typedefs and qualifiers, a pointer.
    pub pointer: bool,
    /// Bytes (`None`: BTF gives it none).
    pub size: Option<u64>,
    /// What a pointer points to, through typedefs and qualifiers (`struct task_struct`; `void`).
    pub pointee: Option<String>,
}

impl TpValue {
    /// `struct task_struct *child`, or the type alone when there is no name.
    pub fn declaration(&self) -> String {
        match &self.name {
            Some(n) if self.type_name.ends_with('*') => format!("{}{n}", self.type_name),
            Some(n) => format!("{} {n}", self.type_name),
            None => self.type_name.clone(),
        }
    }

    /// Whether it can hold an object's address: a pointer, or a 64-bit integer (`unsigned long`).
    pub fn holds_address(&self) -> bool {
        self.pointer || (self.size == Some(8) && self.pointee.is_none())
    }
}

/// A tracepoint the kernel's BTF knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracepointInfo {
    pub name: String,
    /// The raw tracepoint's arguments, `TP_PROTO` order: argument N is the Nth u64 of a raw tracepoint
    /// program's context.
    pub args: Vec<TpValue>,
    /// The event record's fields (`trace_event_raw_NAME`) without the common header; `None` when BTF has no
    /// record of the tracepoint's name (an event defined from a class of another name).
    pub record: Option<Vec<TpValue>>,
}

impl TracepointInfo {
    /// The argument named `name`: its index and description.
    pub fn arg(&self, name: &str) -> Option<(usize, &TpValue)> {
        self.args
            .iter()
            .enumerate()
            .find(|(_, a)| a.name.as_deref() == Some(name))
    }

    /// The record's field named `name` (a `__data_loc` string or array is found by its plain name).
    pub fn field(&self, name: &str) -> Option<&TpValue> {
        self.record.as_ref()?.iter().find(|f| {
            let n = f.name.as_deref().unwrap_or_default();
            n == name
                || n.strip_prefix("__data_loc_") == Some(name)
                || n.strip_prefix("__rel_loc_") == Some(name)
        })
    }
}

impl Btf {
    /// The raw tracepoint `name` (`sched_process_fork`) this blob defines (a module's split BTF: the
    /// module's own; its types may be the base's), or `None` when it has no `btf_trace_NAME`. An error only
    /// for corrupt BTF. One scan of the records finds the three types,
    /// rather than the name index: the index costs several times a scan to build, and a tracepoint is
    /// looked up once or twice per run.
    pub fn tracepoint(&self, name: &str) -> Result<Option<TracepointInfo>, FieldError> {
        let [typedef, iter, record] = self.scan_for([
            (kind::TYPEDEF, &format!("{TYPEDEF_PREFIX}{name}")),
            (kind::FUNC, &format!("{ITER_PREFIX}{name}")),
            (kind::STRUCT, &format!("{RECORD_PREFIX}{name}")),
        ]);
        let Some(t) = typedef else {
            return Ok(None);
        };
        let proto = self.strip_ty(self.get(t.target())?)?;
        let proto = match proto.kind() {
            kind::PTR => self.strip_ty(self.get(proto.target())?)?,
            _ => proto,
        };
        if proto.kind() != kind::FUNC_PROTO {
            return Ok(None);
        }
        // The first parameter is the probe's `void *__data`, not an argument.
        let types: Vec<u32> = params(proto).skip(1).map(|(_, ty)| ty).collect();
        let names = iter.and_then(|f| self.argument_names(f, types.len()));
        let args = types
            .iter()
            .enumerate()
            .map(|(i, &ty)| self.value(names.as_ref().map(|n| n[i].clone()), ty))
            .collect::<Result<Vec<_>, _>>()?;
        let record = record.map(|r| self.record_fields(r)).transpose()?;
        Ok(Some(TracepointInfo {
            name: name.to_string(),
            args,
            record,
        }))
    }

    /// Up to three raw tracepoint names close to `name`, best first.
    pub fn suggest_tracepoints(&self, name: &str) -> Vec<String> {
        let names: Vec<&str> = self
            .chain()
            .flat_map(|btf| {
                (0..btf.raw.records.len())
                    .map_while(|i| btf.raw.record(i))
                    .filter(|rec| rec.kind == kind::TYPEDEF)
                    .filter_map(|rec| btf.string(rec.name_off).strip_prefix(TYPEDEF_PREFIX))
            })
            .collect();
        crate::suggest::best(name, names.iter().copied(), MAX_SUGGESTIONS)
            .into_iter()
            .map(str::to_string)
            .collect()
    }

    /// The first type of each `(kind, name)` among this blob's own (a module's tracepoints are in its split
    /// BTF, and the base's are the base's to give: a lookup through each module does not scan vmlinux again).
    fn scan_for<const N: usize>(&self, wanted: [(u32, &String); N]) -> [Option<Ty<'_>>; N] {
        let mut found = [None; N];
        for i in 0..self.raw.records.len() {
            let Some(rec) = self.raw.record(i) else { break };
            for (slot, (k, name)) in found.iter_mut().zip(&wanted) {
                if slot.is_none() && rec.kind == *k && self.string(rec.name_off) == name.as_str() {
                    *slot = Some(Ty {
                        btf: self,
                        id: self.first_id + i as u32,
                        rec,
                    });
                }
            }
        }
        found
    }

    /// The names of `__traceiter_NAME`'s parameters after `__data`, when it has `count` of them, all named.
    fn argument_names(&self, func: Ty<'_>, count: usize) -> Option<Vec<String>> {
        let proto = self.get(func.target()).ok()?;
        if proto.kind() != kind::FUNC_PROTO {
            return None;
        }
        let names: Vec<String> = params(proto).skip(1).map(|(n, _)| n.to_string()).collect();
        let named = names.len() == count && names.iter().all(|n| !n.is_empty());
        named.then_some(names)
    }

    /// The fields of an event record's struct, without the common header (`ent`) and the trailing
    /// dynamic area (`__data`).
    fn record_fields(&self, record: Ty<'_>) -> Result<Vec<TpValue>, FieldError> {
        (0..record.rec.vlen as usize)
            .map(|j| record.member(j))
            .filter(|(n, _, _)| !matches!(*n, "ent" | "__data" | ""))
            .map(|(n, ty, _)| self.value(Some(n.to_string()), ty))
            .collect()
    }

    fn value(&self, name: Option<String>, ty: u32) -> Result<TpValue, FieldError> {
        let stripped = self.strip_ty(self.get(ty)?)?;
        let pointer = stripped.kind() == kind::PTR;
        let pointee = if pointer {
            let to = self.strip_ty(self.get(stripped.target())?)?;
            Some(type_name(self, to.id)?)
        } else {
            None
        };
        Ok(TpValue {
            name,
            type_name: type_name(self, ty)?,
            pointer,
            size: size(self, ty)?,
            pointee,
        })
    }
}

/// A FUNC_PROTO's parameters: `(name, type)`.
fn params<'a>(proto: Ty<'a>) -> impl Iterator<Item = (&'a str, u32)> + 'a {
    (0..proto.rec.vlen as usize)
        .map(move |j| (proto.btf.string(proto.word(2 * j)), proto.word(2 * j + 1)))
}
