#!/usr/bin/env python3
"""Checks a `ksymwatch --format otlp-json` stream against the OTLP protobuf definitions.

    otlp_check.py FILE      every line must be one ExportLogsServiceRequest
    otlp_check.py --probe   exit 0 when the opentelemetry-proto package can be imported, 3 (and why) if not

Each line is parsed with protobuf's json_format into opentelemetry-proto's ExportLogsServiceRequest
(unknown fields refused), and its raw JSON is held to OTLP/JSON's own rules, which json_format alone
accepts more loosely: lowerCamelCase field names, 64-bit integers (times, intValue) as decimal strings,
severityNumber as an integer, doubleValue as a number, trace and span ids as hex. The resource and scope
must be ksymwatch's. On success it prints one JSON object: {"lines": N, "records": [...]}, each record
flattened from the parsed message as {"time", "observed", "severity", "severity_text", "body", "event",
"attrs": {key: value}} (int64s as Python ints, arrays as lists, key-value lists as objects), for the
calling test to check what it wrote. Any violation: the line number and what is wrong on stderr, exit 1.
"""

import json
import re
import sys

try:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
except ImportError as e:  # the caller reports a skip, not a failure
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":
        print(f"opentelemetry-proto is not installed ({e}); pip install opentelemetry-proto")
        sys.exit(3)
    raise

CAMEL = re.compile(r"^[a-z][a-zA-Z0-9]*$")
DECIMAL = re.compile(r"^-?[0-9]+$")
HEX = re.compile(r"^([0-9a-f]{2})*$")
STRING_INTS = {"timeUnixNano", "observedTimeUnixNano", "intValue"}


class Bad(Exception):
    pass


def check_raw(node, path="$"):
    """OTLP/JSON's rules on the raw JSON, which json_format.Parse does not enforce."""
    if isinstance(node, list):
        for i, x in enumerate(node):
            check_raw(x, f"{path}[{i}]")
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        where = f"{path}.{key}"
        if not CAMEL.match(key):
            raise Bad(f"{where}: field name is not lowerCamelCase")
        if key in STRING_INTS and not (isinstance(value, str) and DECIMAL.match(value)):
            raise Bad(f"{where}: a 64-bit integer must be a decimal string, got {value!r}")
        if key == "severityNumber" and (not isinstance(value, int) or isinstance(value, bool)):
            raise Bad(f"{where}: an enum must be its integer, got {value!r}")
        if key == "doubleValue" and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            raise Bad(f"{where}: a double must be a JSON number, got {value!r}")
        if key in ("traceId", "spanId") and not (isinstance(value, str) and HEX.match(value)):
            raise Bad(f"{where}: ids are hex, not base64: {value!r}")
        check_raw(value, where)


def any_value(v):
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind)


def attributes(kvs):
    out = {}
    for kv in kvs:
        if kv.key in out:
            raise Bad(f"attribute {kv.key} twice")
        out[kv.key] = any_value(kv.value)
    return out


def check_line(text):
    raw = json.loads(text)
    check_raw(raw)
    req = json_format.Parse(text, ExportLogsServiceRequest())
    if len(req.resource_logs) != 1 or len(req.resource_logs[0].scope_logs) != 1:
        raise Bad("expected one resourceLogs with one scopeLogs")
    rl = req.resource_logs[0]
    res = attributes(rl.resource.attributes)
    for key, want in (("service.name", "ksymwatch"), ("os.type", "linux")):
        if res.get(key) != want:
            raise Bad(f"resource {key} is {res.get(key)!r}, not {want!r}")
    for key in ("host.name", "os.version", "service.version", "process.pid"):
        if key not in res:
            raise Bad(f"resource has no {key}")
    sl = rl.scope_logs[0]
    if sl.scope.name != "ksymwatch" or not sl.scope.version:
        raise Bad(f"scope is {sl.scope.name!r} {sl.scope.version!r}")
    if not sl.log_records:
        raise Bad("a request without records")
    records = []
    for r in sl.log_records:
        if r.time_unix_nano == 0 or r.observed_time_unix_nano == 0:
            raise Bad("a record without its times")
        if r.severity_number == 0 or not r.severity_text:
            raise Bad("a record without its severity")
        if r.body.WhichOneof("value") != "string_value" or not r.body.string_value:
            raise Bad("a record without a string body")
        attrs = attributes(r.attributes)
        event = r.event_name or None
        if event is not None and attrs.get("event.name") != event:
            raise Bad(f"eventName {event} but event.name {attrs.get('event.name')!r}")
        records.append(
            {
                "time": r.time_unix_nano,
                "observed": r.observed_time_unix_nano,
                "severity": r.severity_number,
                "severity_text": r.severity_text,
                "body": r.body.string_value,
                "event": event,
                "attrs": attrs,
            }
        )
    return records


def main():
    if sys.argv[1:] == ["--probe"]:
        return 0
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    records = []
    lines = 0
    with open(sys.argv[1], encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            if not text.strip():
                continue
            lines += 1
            try:
                records.extend(check_line(text))
            except (Bad, json_format.ParseError, ValueError) as e:
                print(f"line {n}: {e}: {text[:300]}", file=sys.stderr)
                return 1
    json.dump({"lines": lines, "records": records}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
