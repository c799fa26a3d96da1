//! The `hit` record written by hand: the one record written at flood rates, so it is built without serde
//! or `core::fmt`, byte for byte as serde_json would write [`super::Record::Hit`] (the tests compare both).

use crate::report::cgroup::CgroupName;
use crate::report::numbers::{push_dec, push_hex};
use crate::report::{Hit, ResolvedFrame};

/// Appends `s` as a JSON string, escaped byte for byte as serde_json escapes it (`"`, `\\` and the
/// control characters; everything else, non-ASCII included, as is).
pub(crate) fn push_string(out: &mut String, s: &str) {
    out.push('"');
    let mut plain = 0;
    for (i, b) in s.bytes().enumerate() {
        let escaped = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[plain..i]);
        plain = i + 1;
        if escaped.is_empty() {
            out.push_str("\\u00");
            out.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
            out.push(char::from(b"0123456789abcdef"[usize::from(b & 0xf)]));
        } else {
            out.push_str(escaped);
        }
    }
    out.push_str(&s[plain..]);
    out.push('"');
}

fn push_opt_string(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => push_string(out, s),
        None => out.push_str("null"),
    }
}

/// A [`Hex`] as JSON.
fn push_hex_string(out: &mut String, v: u64) {
    out.push_str("\"0x");
    push_hex(out, v);
    out.push('"');
}

/// `key` and `v` as a [`Hex`], or `null` when unknown.
fn push_hex_or_null(out: &mut String, key: &str, v: Option<u64>) {
    out.push_str(key);
    match v {
        Some(v) => push_hex_string(out, v),
        None => out.push_str("null"),
    }
}

/// Why `f` has no name, where it is a user frame that no mapping named.
pub(super) fn unnamed(f: &ResolvedFrame) -> Option<&'static str> {
    f.unnamed
        .filter(|_| !f.kernel && f.sym.is_none() && f.binary.is_none())
}

/// A [`Frame`] as serde writes it.
fn push_frame(out: &mut String, f: &ResolvedFrame) {
    out.push_str("{\"addr\":");
    push_hex_string(out, f.addr);
    out.push_str(if f.kernel {
        ",\"kernel\":true,\"sym\":"
    } else {
        ",\"kernel\":false,\"sym\":"
    });
    push_opt_string(out, f.sym.as_deref());
    out.push_str(",\"off\":");
    push_dec(out, f.off);
    out.push_str(",\"size\":");
    match f.size {
        Some(n) => push_dec(out, n),
        None => out.push_str("null"),
    }
    out.push_str(",\"module\":");
    push_opt_string(out, f.module.as_deref());
    out.push_str(",\"binary\":");
    push_opt_string(out, f.binary.as_deref());
    if let Some(line) = &f.line {
        out.push_str(",\"line\":");
        push_string(out, &line.location);
        if !line.inlined.is_empty() {
            out.push_str(",\"inlined\":");
            push_array(out, &line.inlined, |out, s| push_string(out, s));
        }
    }
    if let Some(why) = unnamed(f) {
        out.push_str(",\"unnamed\":");
        push_string(out, why);
    }
    out.push('}');
}

/// `"ip":{...},"chain":[...]` of a hit.
fn push_ip_chain(out: &mut String, hit: &Hit<'_>) {
    out.push_str("\"ip\":");
    push_frame(out, hit.ip);
    out.push_str(",\"chain\":");
    push_array(out, hit.chain, push_frame);
}

/// `[a,b,...]`, each item written by `item`.
pub(crate) fn push_array<T>(
    out: &mut String,
    items: impl IntoIterator<Item = T>,
    mut item: impl FnMut(&mut String, T),
) {
    out.push('[');
    for (i, x) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        item(out, x);
    }
    out.push(']');
}

/// A hit's `cgroup_id`, `cgroup` and, where the path holds one, `container_id` and `container_runtime`.
fn push_cgroup(out: &mut String, c: &CgroupName) {
    out.push_str(",\"cgroup_id\":");
    push_dec(out, c.id);
    out.push_str(",\"cgroup\":");
    push_opt_string(out, c.path.as_deref());
    if let Some(container) = &c.container {
        out.push_str(",\"container_id\":");
        push_string(out, &container.id);
        out.push_str(",\"container_runtime\":");
        push_string(out, container.runtime.name());
    }
}

/// A hit record ([`Record::Hit`]) without its newline, the bytes serde_json gives for it, written without
/// serde or `core::fmt`: a hit is the one record written at flood rates. A chain seen before (`rendered`)
/// is copied as it was spelled the first time.
pub fn push_hit(out: &mut String, hit: &Hit<'_>) {
    let s = hit.sample;
    out.push_str("{\"type\":\"hit\",\"time_ns\":");
    push_dec(out, s.time);
    out.push_str(",\"cpu\":");
    push_dec(out, u64::from(s.cpu));
    out.push_str(",\"pid\":");
    push_dec(out, u64::from(s.pid));
    out.push_str(",\"tid\":");
    push_dec(out, u64::from(s.tid));
    out.push_str(",\"comm\":");
    push_string(out, hit.comm);
    out.push_str(",\"target\":");
    push_string(out, &hit.watch.label);
    out.push_str(",\"target_index\":");
    push_dec(out, hit.watch_index as u64);
    if let Some(cpu) = hit.watch.copy_at(s.addr) {
        out.push_str(",\"copy\":");
        push_dec(out, u64::from(cpu));
    }
    out.push_str(",\"addr\":");
    push_hex_string(out, s.addr);
    out.push_str(",\"len\":");
    push_dec(out, u64::from(hit.watch.len));
    out.push_str(",\"access\":");
    push_string(out, hit.watch.access.letters());
    out.push_str(if s.in_kernel() {
        ",\"in_kernel\":true,"
    } else {
        ",\"in_kernel\":false,"
    });
    match hit.rendered {
        Some(r) => out.push_str(r.json.get_or_init(|| {
            let mut text = String::new();
            push_ip_chain(&mut text, hit);
            text
        })),
        None => push_ip_chain(out, hit),
    }
    if let Some(shown) = hit.value.shown() {
        push_hex_or_null(out, ",\"value\":", shown.value);
        if let Some(old) = shown.old {
            push_hex_or_null(out, ",\"old\":", old);
        }
        if let Some(from) = shown.from {
            out.push_str(",\"value_from\":\"");
            out.push_str(from.source());
            out.push('"');
            if let Some(memory) = from.raced() {
                out.push_str(",\"raced\":");
                push_hex_string(out, memory);
            }
            if from.start_unknown() {
                out.push_str(",\"insn_start\":\"unknown\"");
            }
        }
    }
    if let Some(c) = hit.cgroup {
        push_cgroup(out, c);
    }
    out.push('}');
}
