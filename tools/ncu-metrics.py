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

    tools/ncu-metrics.py REPORT [REPORT...] --hotspots N [--nvdisasm PATH]

--hotspots N prints, for each report, the N instructions of the kernel where the PC sampler found
warps most often (the Source Counters section's samples, every stall reason and issuing
together): each with its share of all samples, its three largest reasons and its SASS. An
instanced metric keeps one value per instruction in field 3 of its value entry (repeated: field
1 holds the instruction's address, field 2 the value, each as the one field of a message); the
per-instruction values of each sampler metric add up to the metric's own value, which this
reader checks. The kernel's cubin is in the report as well (a message whose field 4 is an ELF
file and whose field 9 lists the functions, each with its name in field 1 and its address in
field 2), so an instruction's offset is its address less the function's, and nvdisasm
(--nvdisasm, else on PATH, in the CUDA install or fetched into build*/cuda-tools by
tools/setup.sh) gives its text; without nvdisasm the offsets are printed alone.
"""
import argparse
import collections
import glob
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile


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


def metric_names(top):
    """The table of metric names when the message (its fields `top`) is a result's header."""
    table = [v for n, w, v in top if n == 4 and w == 2]
    if len(table) != 1:
        return None
    try:
        strings = fields(table[0])
    except Unreadable:
        return None
    if len(strings) > 10 and all(n == 1 and w == 2 for n, w, _ in strings):
        return [v.decode("utf-8", "replace") for _, _, v in strings]
    return None


def one_value(message):
    """The value of a message holding one field (an address or a per-instruction value)."""
    inner = fields(message)
    return inner[0][2] if inner else 0


def read_report(path):
    """One pass over the report: the kernel name, {metric: value} and the instanced metrics keyed
    by instruction address, {metric: {address: value}}, of the first profiled launch, and every
    function of the cubins the report holds, {name: (cubin, address)}."""
    with open(path, "rb") as f:
        data = f.read()
    names, result, functions = None, None, {}
    for msg in messages(data):
        try:
            top = fields(msg)
        except Unreadable:
            continue
        elf = [v for n, w, v in top if n == 4 and w == 2 and v[:4] == b"\x7fELF"]
        if elf:
            for n, w, v in top:
                if n != 9 or w != 2:
                    continue
                for n2, w2, v2 in fields(v):
                    if n2 == 1 and w2 == 2:
                        entry = {n3: v3 for n3, _, v3 in fields(v2)}
                        if isinstance(entry.get(1), bytes) and isinstance(entry.get(2), int):
                            functions.setdefault(entry[1].decode("utf-8", "replace"), (elf[0], entry[2]))
            continue
        if names is None:
            names = metric_names(top)
            continue
        if result is not None:
            continue  # later launches; only cubins are still wanted
        values, per_pc = {}, {}
        for n, w, v in top:
            if n != 13 or w != 2:
                continue
            index, value, instances = None, None, {}
            for n2, w2, v2 in fields(v):
                if n2 == 1 and w2 == 0:
                    index = v2
                elif n2 == 2 and w2 == 2:
                    for _, w3, v3 in fields(v2):
                        value = v3.decode("utf-8", "replace") if w3 == 2 else v3
                elif n2 == 3 and w2 == 2:
                    parts = {n3: v3 for n3, _, v3 in fields(v2)}
                    address = one_value(parts[1]) if 1 in parts else None
                    if isinstance(address, int):
                        instances[address] = one_value(parts[2]) if 2 in parts else 0
            if index is None or index >= len(names):
                raise Unreadable("a value names no metric of the table")
            values[names[index]] = value
            if instances:
                per_pc[names[index]] = instances
        if values:
            kernel = next((v.decode("utf-8", "replace") for n, w, v in top if n == 5 and w == 2), "?")
            result = (kernel, values, per_pc)
    if result is None:
        raise Unreadable("no metric table followed by values was found")
    return result + (functions,)


def first_result(path):
    """The kernel name and {metric: value} of the first profiled launch in the report."""
    kernel, values, _, _ = read_report(path)
    return kernel, values


def find_nvdisasm(given):
    if given:
        return given
    found = shutil.which("nvdisasm")
    if found:
        return found
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for pattern in [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvdisasm"),
                    os.path.join(here, "build*", "cuda-tools", "**", "bin", "nvdisasm")]:
        for candidate in sorted(glob.glob(pattern, recursive=True)):
            if os.access(candidate, os.X_OK):
                return candidate
    return None


def disassemble(cubin, nvdisasm):
    """{offset: instruction text} of the cubin's code, or {} without nvdisasm."""
    if not nvdisasm:
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        run = subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True)
    if run.returncode != 0:
        raise Unreadable(f"nvdisasm could not read the report's cubin: {run.stderr.strip()[:200]}")
    code = {}
    for line in run.stdout.splitlines():
        found = re.match(r"\s*/\*([0-9a-f]+)\*/\s*(.*?)\s*;", line)
        if found:
            code[int(found.group(1), 16)] = found.group(2)
    return code


STALL = "smsp__pcsamp_warps_issue_stalled_"


def hotspots(path, count, nvdisasm):
    """The lines --hotspots prints for one report."""
    kernel, totals, per_pc, functions = read_report(path)
    reasons = sorted(k for k in per_pc if k.startswith(STALL) and not k.endswith("_not_issued"))
    if not reasons or "smsp__pcsamp_sample_count" not in per_pc:
        raise Unreadable("the report has no PC sampling data (the Source Counters section)")
    if kernel not in functions:
        raise Unreadable(f"the report holds no cubin with a function named {kernel}")
    cubin, function = functions[kernel]
    for name in reasons + ["smsp__pcsamp_sample_count"]:
        if name in totals and sum(per_pc[name].values()) != totals[name]:
            raise Unreadable(f"the per-instruction values of {name} do not add up to its total")
    samples = per_pc["smsp__pcsamp_sample_count"]
    total = sum(samples.values())
    code = disassemble(cubin, nvdisasm)
    lines = [f"{kernel}: {total} samples" + ("" if code else " (no nvdisasm: offsets only)")]
    for address, n in sorted(samples.items(), key=lambda kv: (-kv[1], kv[0]))[:count]:
        offset = address - function
        top = sorted(((per_pc[r].get(address, 0), r[len(STALL):]) for r in reasons), key=lambda x: (-x[0], x[1]))
        why = " ".join(f"{r} {v}" for v, r in top[:3] if v)
        lines.append(f"{offset:05x}\t{100.0 * n / total:.1f}%\t{why}\t{code.get(offset, '')}")
    return lines


def text(value):
    if isinstance(value, float):
        # Counts and durations are stored as doubles: whole ones print whole.
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.6g}"
    return str(value)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--match", default="", help="comma-separated substrings of metric names")
    ap.add_argument("--hotspots", type=int, default=0, metavar="N",
                    help="the N instructions with the most PC samples, with their stall reasons and SASS")
    ap.add_argument("--nvdisasm", default="", help="the nvdisasm to read the kernels' SASS with")
    args = ap.parse_args()
    if args.hotspots < 0:
        print(f"ncu-metrics: --hotspots {args.hotspots}: a number of instructions, at least 1", file=sys.stderr)
        return 2
    if args.hotspots:
        nvdisasm = find_nvdisasm(args.nvdisasm)
        out = []
        for path in args.reports:
            try:
                out += hotspots(path, args.hotspots, nvdisasm) + [""]
            except (OSError, Unreadable, struct.error) as e:
                print(f"ncu-metrics: {path}: {e}", file=sys.stderr)
                return 2
        print("\n".join(out[:-1]))
        return 0
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
