#!/usr/bin/env python3
"""Prints the metric values of Nsight Compute reports (.ncu-rep) on a machine without ncu.

The development machine has no Nsight Compute, and the GPU machine is lent for minutes: the
profiles a device call brings back (tools/gpu-check.sh's ncu phase, committed under
bench/results/) are read here. With ncu at hand, `ncu --import FILE --page details` is the
better reader; this one exists for where it is not.

    tools/ncu-metrics.py REPORT [REPORT...] [--match SUBSTRING[,SUBSTRING...]]

One row per metric, one column per report (the first profiled launch of each). --match keeps
the metrics whose names contain one of the substrings.

The file layout was read off reports written by Nsight Compute 2025.3 (CUDA 13.0) and is not
documented by NVIDIA, so this reader checks what it relies on and stops with one line where a
report differs: a 4-byte magic "NVR\\0", then messages each preceded by its length (4 bytes,
little-endian), each a protocol-buffer message. A result's header message carries the table of
metric names (field 4, repeated strings); the result message that follows carries the values
(field 13, repeated: field 1 the name's index in that table, field 2 the value, whose one
field is a double (wire type 1), an integer (wire type 0) or a string (wire type 2)). Field 5 of
the result message is the kernel's name.
"""
import argparse
import struct
import sys


class Unreadable(Exception):
    pass


def varint(buf, i):
    value = shift = 0
    while True:
        if i >= len(buf):
            raise Unreadable("a varint runs past the end of its message")
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def fields(buf):
    """The (number, wire type, value) triples of one protocol-buffer message."""
    out, i = [], 0
    while i < len(buf):
        key, i = varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 1:
            value = struct.unpack_from("<d", buf, i)[0]
            i += 8
        elif wire == 2:
            size, i = varint(buf, i)
            if i + size > len(buf):
                raise Unreadable("a field runs past the end of its message")
            value = bytes(buf[i:i + size])
            i += size
        elif wire == 5:
            value = struct.unpack_from("<f", buf, i)[0]
            i += 4
        else:
            raise Unreadable(f"wire type {wire} (field {number}) is not one this reader knows")
        out.append((number, wire, value))
    return out


def messages(data):
    if data[:4] != b"NVR\0":
        raise Unreadable("no NVR magic at the start: not an Nsight Compute report")
    i = 4
    while i < len(data):
        if i + 4 > len(data):
            raise Unreadable("a message length is cut off")
        size = struct.unpack_from("<I", data, i)[0]
        i += 4
        if i + size > len(data):
            raise Unreadable("a message runs past the end of the file")
        yield data[i:i + size]
        i += size


def first_result(path):
    """The kernel name and {metric: value} of the first profiled launch in the report."""
    with open(path, "rb") as f:
        data = f.read()
    names = None
    for msg in messages(data):
        try:
            top = fields(msg)
        except Unreadable:
            continue
        table = [v for n, w, v in top if n == 4 and w == 2]
        if names is None:
            if len(table) == 1:
                try:
                    strings = fields(table[0])
                except Unreadable:
                    strings = []
                if len(strings) > 10 and all(n == 1 and w == 2 for n, w, _ in strings):
                    names = [v.decode("utf-8", "replace") for _, _, v in strings]
            continue
        values = {}
        for n, w, v in top:
            if n != 13 or w != 2:
                continue
            index, value = None, None
            for n2, w2, v2 in fields(v):
                if n2 == 1 and w2 == 0:
                    index = v2
                elif n2 == 2 and w2 == 2:
                    for _, w3, v3 in fields(v2):
                        value = v3.decode("utf-8", "replace") if w3 == 2 else v3
            if index is None or index >= len(names):
                raise Unreadable("a value names no metric of the table")
            values[names[index]] = value
        if values:
            kernel = next((v.decode("utf-8", "replace") for n, w, v in top if n == 5 and w == 2), "?")
            return kernel, values
    raise Unreadable("no metric table followed by values was found")


def text(value):
    if isinstance(value, float):
        # Counts and durations are stored as doubles: whole ones print whole.
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.6g}"
    return str(value)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--match", default="", help="comma-separated substrings of metric names")
    args = ap.parse_args()
    results = []
    for path in args.reports:
        try:
            results.append(first_result(path))
        except (OSError, Unreadable, struct.error) as e:
            print(f"ncu-metrics: {path}: {e}", file=sys.stderr)
            return 2
    wanted = [m for m in args.match.split(",") if m]
    names = sorted({k for _, values in results for k in values})
    if wanted:
        names = [k for k in names if any(m in k for m in wanted)]
    print("\t".join(["metric"] + [kernel for kernel, _ in results]))
    for k in names:
        print("\t".join([k] + [text(values.get(k, "")) for _, values in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
