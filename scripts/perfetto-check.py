#!/usr/bin/env python3
"""Reads a `ksymwatch --perfetto` trace with Perfetto's own message definitions (the `perfetto` PyPI
package's perfetto_trace_pb2, on the `protobuf` runtime), independently of ksymwatch's Rust encoder: it
resolves the interned names and strings per sequence as a trace reader must, checks the trace's structure,
and prints what it holds.

    scripts/perfetto-check.py FILE          a summary: tracks, hits per thread and CPU, marks, chains
    scripts/perfetto-check.py --hits FILE   one JSON object per hit (on its thread track), for tests

Exit status: 0 read and consistent, 1 a structural problem (said on stderr), 77 the `perfetto` package is
missing (`pip install perfetto protobuf`).
"""

import collections
import json
import sys

try:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
except ImportError as e:
    print(f"perfetto-check: cannot import Perfetto's protos ({e}); pip install perfetto protobuf", file=sys.stderr)
    sys.exit(77)

CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
CLOCK_NAMES = {pb.BUILTIN_CLOCK_MONOTONIC: "MONOTONIC", pb.BUILTIN_CLOCK_BOOTTIME: "BOOTTIME"}


class Bad(Exception):
    pass


class Sequence:
    """One packet sequence's interned tables, reset by SEQ_INCREMENTAL_STATE_CLEARED."""

    def __init__(self):
        self.valid = False
        self.names, self.arg_names, self.strings = {}, {}, {}

    def clear(self):
        self.valid = True
        self.names, self.arg_names, self.strings = {}, {}, {}

    def add(self, interned):
        for table, entries, value in (
            (self.names, interned.event_names, lambda e: e.name),
            (self.arg_names, interned.debug_annotation_names, lambda e: e.name),
            (self.strings, interned.debug_annotation_string_values, lambda e: e.str.decode()),
        ):
            for e in entries:
                table[e.iid] = value(e)


def arg_value(seq, a):
    kind = a.WhichOneof("value")
    if kind == "string_value_iid":
        if a.string_value_iid not in seq.strings:
            raise Bad(f"string iid {a.string_value_iid} used before it was interned")
        return seq.strings[a.string_value_iid]
    if kind == "pointer_value":
        return hex(a.pointer_value)
    return getattr(a, kind)


def read(path):
    """The trace's tracks, events (names and args resolved), clock snapshots and interning totals."""
    trace = pb.Trace()
    with open(path, "rb") as f:
        data = f.read()
    trace.ParseFromString(data)
    seqs = collections.defaultdict(Sequence)
    tracks, events, clocks = {}, [], []
    interned = collections.Counter()
    for p in trace.packet:
        seq = seqs[p.trusted_packet_sequence_id]
        if p.sequence_flags & CLEARED:
            seq.clear()
        if p.HasField("interned_data"):
            seq.add(p.interned_data)
            for field in ("event_names", "debug_annotation_names", "debug_annotation_string_values"):
                interned[field] += len(getattr(p.interned_data, field))
        kind = p.WhichOneof("data")
        if kind == "clock_snapshot":
            clocks.append({CLOCK_NAMES.get(c.clock_id, c.clock_id): c.timestamp for c in p.clock_snapshot.clocks})
        elif kind == "track_descriptor":
            tracks[p.track_descriptor.uuid] = p.track_descriptor
        elif kind == "track_event":
            if not (p.sequence_flags & NEEDS) or not seq.valid:
                raise Bad(f"a track event at {p.timestamp} without incremental state")
            if p.timestamp_clock_id != pb.BUILTIN_CLOCK_MONOTONIC:
                raise Bad(f"a track event at {p.timestamp} on clock {p.timestamp_clock_id}, not MONOTONIC")
            e = p.track_event
            if e.track_uuid not in tracks:
                raise Bad(f"an event at {p.timestamp} on undescribed track {e.track_uuid:#x}")
            events.append({
                "ts": p.timestamp,
                "track": e.track_uuid,
                "type": pb.TrackEvent.Type.Name(e.type),
                "name": seq.names.get(e.name_iid, "") if e.HasField("name_iid") else e.name,
                "counter": e.counter_value if e.HasField("counter_value") else None,
                "args": {seq.arg_names[a.name_iid]: arg_value(seq, a) for a in e.debug_annotations},
            })
    return {"bytes": len(data), "packets": len(trace.packet), "tracks": tracks, "events": events,
            "clocks": clocks, "interned": interned}


def hits(t):
    """The hits: instants on thread tracks, with the thread's pid, tid and name, and the chain as a list."""
    for e in t["events"]:
        track = t["tracks"][e["track"]]
        if e["type"] != "TYPE_INSTANT" or not track.HasField("thread"):
            continue
        chain = e["args"].get("chain", "")
        yield dict(e, pid=track.thread.pid, tid=track.thread.tid, thread=track.name,
                   chain=chain.split("\n") if chain else [])


def check_cpus(t, all_hits):
    """Every hit is on its CPU's track too, naming its writer."""
    on_cpus = collections.Counter()
    for e in t["events"]:
        if e["type"] == "TYPE_INSTANT" and "thread" in e["args"]:
            on_cpus[(e["ts"], e["args"]["thread"])] += 1
    on_threads = collections.Counter((h["ts"], h["thread"]) for h in all_hits)
    if on_cpus != on_threads:
        raise Bad(f"CPU tracks hold {sum(on_cpus.values())} hits, thread tracks {sum(on_threads.values())}")


def summary(path, t, all_hits):
    print(f"{path}: {t['packets']} packets, {t['bytes']} bytes, {len(all_hits)} hits")
    for c in t["clocks"]:
        print("clock snapshot: " + ", ".join(f"{k} {v / 1e9:.6f} s" for k, v in c.items()))
    i = t["interned"]
    print(f"interned: {i['event_names']} event names, {i['debug_annotation_names']} annotation names, "
          f"{i['debug_annotation_string_values']} strings")
    by_track = collections.defaultdict(list)
    for e in t["events"]:
        by_track[e["track"]].append(e)
    print("tracks:")
    for uuid, d in sorted(t["tracks"].items()):
        evs = by_track[uuid]
        if d.HasField("process"):
            what = f"process {d.process.pid} ({d.process.process_name})"
        elif d.HasField("thread"):
            what = f"thread {d.name} (pid {d.thread.pid} tid {d.thread.tid}): {len(evs)} hits"
        elif d.HasField("counter"):
            what = f"counter {d.name}: " + ", ".join(str(e["counter"]) for e in evs)
        else:
            names = collections.Counter(e["name"] for e in evs)
            what = f"{d.name}: " + ", ".join(f"{n} x{c}" if c > 1 else n for n, c in names.items())
        print(f"  {what}")
    chains = collections.Counter((h["name"], h["thread"], tuple(h["chain"])) for h in all_hits)
    print(f"chains ({len(chains)} distinct):")
    for (name, thread, chain), n in chains.most_common(10):
        print(f"  {n} x {name} by {thread}")
        for frame in chain:
            print(f"      {frame}")
    if all_hits:
        h = all_hits[-1]
        print("last hit's annotations: " + ", ".join(f"{k}={v!r}" for k, v in h["args"].items() if k != "chain"))


def main(argv):
    as_json = "--hits" in argv
    paths = [a for a in argv if a != "--hits"]
    if len(paths) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        t = read(paths[0])
        all_hits = list(hits(t))
        check_cpus(t, all_hits)
    except (Bad, OSError, KeyError) as e:
        print(f"perfetto-check: {paths[0]}: {e!r}", file=sys.stderr)
        return 1
    except Exception as e:  # a protobuf DecodeError: not a trace
        print(f"perfetto-check: {paths[0]}: not a Perfetto trace: {e}", file=sys.stderr)
        return 1
    if as_json:
        for h in all_hits:
            print(json.dumps({k: h[k] for k in ("ts", "pid", "tid", "thread", "name", "args", "chain")}))
    else:
        summary(paths[0], t, all_hits)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:  # `| head`: a normal end
        sys.exit(0)
