//! OTLP/JSON attributes: `KeyValue`s and the `AnyValue` mapping (strings, decimal-string integers, bools,
//! doubles, arrays, kvlists), and a `--json` record's fields turned into attributes.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::{Map, Value as JsonValue};

use crate::report::json::{push_array, push_string};
use crate::report::numbers::{push_dec, push_hex};

/// Appends `{"key":..,"value":..}` attributes, commas between.
pub(super) struct Attrs<'a> {
    out: &'a mut String,
    first: bool,
}

impl<'a> Attrs<'a> {
    pub(super) fn new(out: &'a mut String) -> Self {
        Attrs { out, first: true }
    }

    /// Continues a list that already has an attribute.
    pub(super) fn after(out: &'a mut String) -> Self {
        Attrs { out, first: false }
    }

    fn key(&mut self, key: &str) {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        self.out.push_str("{\"key\":");
        push_string(self.out, key);
        self.out.push_str(",\"value\":");
    }

    pub(super) fn str(&mut self, key: &str, v: &str) {
        self.key(key);
        push_string_value(self.out, v);
        self.out.push('}');
    }

    pub(super) fn hex(&mut self, key: &str, v: u64) {
        self.key(key);
        self.out.push_str("{\"stringValue\":\"0x");
        push_hex(self.out, v);
        self.out.push_str("\"}}");
    }

    /// An unsigned value as `intValue` (an int64); beyond its range, the decimal digits as a string.
    pub(super) fn int(&mut self, key: &str, v: u64) {
        self.key(key);
        push_int_value(self.out, v);
        self.out.push('}');
    }

    pub(super) fn bool(&mut self, key: &str, v: bool) {
        self.key(key);
        self.out.push_str(if v {
            "{\"boolValue\":true}}"
        } else {
            "{\"boolValue\":false}}"
        });
    }

    pub(super) fn strings<'s>(&mut self, key: &str, items: impl IntoIterator<Item = Cow<'s, str>>) {
        self.key(key);
        self.out.push_str("{\"arrayValue\":{\"values\":");
        push_array(self.out, items, |out, s| push_string_value(out, &s));
        self.out.push_str("}}}");
    }

    pub(super) fn any(&mut self, key: &str, v: &JsonValue) {
        self.key(key);
        push_any(self.out, v);
        self.out.push('}');
    }
}

pub(super) fn push_string_value(out: &mut String, s: &str) {
    out.push_str("{\"stringValue\":");
    push_string(out, s);
    out.push('}');
}

fn push_int_value(out: &mut String, v: u64) {
    out.push_str(if v <= i64::MAX as u64 {
        "{\"intValue\":\""
    } else {
        "{\"stringValue\":\""
    });
    push_dec(out, v);
    out.push_str("\"}");
}

/// A `--json` value as an OTLP `AnyValue`: objects are key-value lists (their `null` fields left out),
/// arrays arrays, integers `intValue` strings, `null` the empty `AnyValue`.
pub(super) fn push_any(out: &mut String, v: &JsonValue) {
    match v {
        JsonValue::Null => out.push_str("{}"),
        JsonValue::Bool(b) => out.push_str(if *b {
            "{\"boolValue\":true}"
        } else {
            "{\"boolValue\":false}"
        }),
        JsonValue::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => push_int_value(out, u),
            (None, Some(i)) => {
                out.push_str("{\"intValue\":\"");
                out.push_str(itoa::Buffer::new().format(i));
                out.push_str("\"}");
            }
            // serde_json's numbers are finite: a JSON number is a valid proto3 double.
            (None, None) => {
                out.push_str("{\"doubleValue\":");
                out.push_str(&n.to_string());
                out.push('}');
            }
        },
        JsonValue::String(s) => push_string_value(out, s),
        JsonValue::Array(items) => {
            out.push_str("{\"arrayValue\":{\"values\":");
            push_array(out, items, push_any);
            out.push_str("}}");
        }
        JsonValue::Object(m) => {
            out.push_str("{\"kvlistValue\":{\"values\":[");
            let mut a = Attrs::new(out);
            for (k, x) in m.iter().filter(|(_, x)| !x.is_null()) {
                a.any(k, x);
            }
            out.push_str("]}}");
        }
    }
}

/// The attribute a `--json` record field becomes: a semantic-convention name where one means the same.
fn attribute_key(field: &str) -> Cow<'static, str> {
    match field {
        "cpu" => Cow::Borrowed("cpu.logical_number"),
        "pid" => Cow::Borrowed("process.pid"),
        f => Cow::Owned(format!("ksymwatch.{f}")),
    }
}

/// A `--json` record as a JSON object (every record serializes to one).
pub(super) fn fields(r: &impl Serialize) -> Map<String, JsonValue> {
    match serde_json::to_value(r) {
        Ok(JsonValue::Object(m)) => m,
        _ => Map::new(),
    }
}

/// The `--json` fields of a record as attributes, `null`s and `skip` left out.
pub(super) fn push_fields(a: &mut Attrs<'_>, m: &Map<String, JsonValue>, skip: &[&str]) {
    for (k, v) in m {
        if !v.is_null() && !skip.contains(&k.as_str()) {
            a.any(&attribute_key(k), v);
        }
    }
}
