#!/usr/bin/env python3
"""Kernel benchmark (not a test; needs a GPU and PyTorch): one attention on one GPU by cpgen's
forward (or, with --direction bwd, backward) kernel against PyTorch SDPA's cuDNN and flash
backends, on the same tensors, in the same process and the same run.

cpgen runs through its C ABI (libcpgen.so via ctypes) as a loopback ring of one rank, which is one
launch of the forward step kernel on the whole sequence (first and last step at once): the kernel
that selection picks for the shape (a tuning database with --db, else the pretuned caches and the
default). With --ranks N (N > 1) cpgen instead runs the whole loopback ring of N virtual ranks on
the one GPU (cpgen_ring_forward_all over the shards of --scheme, gathered before timing), so the
table compares the ring, with all its steps, merges and K/V exchanges, against SDPA on the full
sequence: the same useful work. Every configuration:

  1. draws fresh normal(0, 1) inputs in [batch, heads, seq, head_dim] layout;
  2. poisons each output with NaN, runs each implementation once and checks it against a float64
     reference on a sample of query rows of the first and the last batch (--check-rows spread
     evenly, and for a forward the first and last row of every 64-position block; the largest
     relative error of one head's row, every element written; cpgen's LSE too, absolute error):
     above 2e-2 (bf16 and fp16) or
     NaN the row's check says FAILED, the table says CHECK FAILED and gives no ratio;
  3. times them with CUDA events, interleaved: warm-up runs of each, then --iters rounds, each
     launching cpgen, cuDNN and flash once in turn, all enqueued back to back (the host does not
     wait between them); each one's median, with its fastest and slowest in the JSON row. A drift
     of the clocks during the run (on the first H200, up to 11% between a kernel's fastest and
     median run of 10 back to back) then falls on all three alike, not on whichever ran last.

--direction bwd times the backward instead: cpgen's backward ring (cpgen_ring_backward, or
_backward_all over the shards) after one untimed forward for the out and lse it reads, against
torch.autograd.grad of each SDPA backend's output (the backend's own backward), with the same
fresh normal(0, 1) upstream gradient for all. dq at the sampled query rows and dk, dv at the same
positions as keys are checked against float64 gradients computed from the whole softmax (every
query's lse and rowsum(dout * out), so dk and dv get every query's share), within 2e-2 relative
(Frobenius), on the first and the last batch. TFLOP/s count 2.5 times the forward's useful
FLOPs (FlashAttention's convention, as cpgen bench); the rows carry "direction": "bwd", the table
a dir column, and its kernel column names the backward kernel.

  python3 bench/kernels.py --lib build/libcpgen.so --direction bwd --head-dims 128 --lengths 8192,16384

--tune N first runs `cpgen tune` (the command line beside --lib, or --cpgen) over the
configurations' problems, N candidates per workload of --direction, into a database of this run,
and cpgen then runs the winners: the figure of a user who tunes before training, against SDPA's
backends, which pick their own kernels. The header line gives the tune's seconds and command;
every row carries "tuned": N. Not with --pin or --db.

A cpgen failure (compile, launch, wrong kernel) marks the row failed and still times cuDNN and
flash on the shape. A pinned kernel that selection did not run (--pin naming a kernel cpgen cannot
use falls through to the next cache entry) is such a failure, not a row under the wrong name. A
CUDA error that leaves the context unusable (an illegal address) ends the run with status 5
after the row that caused it is written.

TFLOP/s count the useful work: 4 * head_dim per visible (query, key) pair per query head, so a
causal attention counts half a full one (FlashAttention's convention). Ratios are cpgen's time
divided into the peer's: above 1.0 cpgen is faster.

  python3 bench/kernels.py --lib build/libcpgen.so                   # the whole matrix
  python3 bench/kernels.py --lib build/libcpgen.so --dtypes bf16 --head-dims 128 --lengths 8192,16384
  python3 bench/kernels.py ... --jsonl $OUT/kernels.jsonl --markdown $OUT/kernels.md
  python3 bench/kernels.py ... --ranks 8 --scheme zigzag --head-dims 128 --lengths 32768   # a ring

--pin runs a chosen kernel instead of the selected one: a family name, mma.sync, wgmma,
wgmma-pingpong or wgmma-persistent (the family's default tiles for each configuration on the GPU's
arch, or --arch's, as cpgen_family_kernel_uri_for_arch names them; mma.sync also where sm_90a's
default is the wgmma family; --list-pins without --arch: the tiles of the 227 KB targets),
or a URI template filled per configuration ({dtype}, {head_dim}, {group}, {mask}: causal or full):

  --pin wgmma
  --pin 'ring_fwd_wgmma_{dtype}_hd{head_dim}_{mask}_gqa{group}_bm128_bn64_c2_s3'

Each configuration's kernel is handed to cpgen as a pattern entry of a cache file in a temporary
$CPGEN_CACHES_DIR (docs/formats.md), with an empty temporary database, so selection takes it like
any shipped pattern and the table's kernel column shows what ran. --list-pins prints the kernel
each configuration would pin and exits (no GPU or PyTorch needed).

--templates DIR compiles cpgen's kernels from the template files in DIR (CPGEN_TEMPLATES_DIR)
instead of the ones built into libcpgen: run once with another revision's templates and once
without, one after the other on the same GPU, and join the two files with bench/compare_rows.py
(tools/gpu-check.sh --ab REV does this) to see what a template change did. The kernel store keys
and tuning records follow the files, so the two revisions' kernels never mix. Each row of such a
run carries "templates": DIR.

  git -C REPO archive REV templates | tar -x -C /tmp/old --strip-components=1
  python3 bench/kernels.py ... --pin wgmma --templates /tmp/old --jsonl old.jsonl

A configuration that has no result after --stall-seconds (default 120: compiles included) ends
the run with status 4, its row marked failed ("stalled"): a kernel that never finishes must not
hold the GPU call until its time limit. Status 5: a CUDA error made the context unusable (above).

The markdown table goes to stdout too. GQA groups are made with --q-heads query heads over
q_heads / group KV heads; SDPA gets enable_gqa=True (or K/V repeated when a backend refuses it,
which the table marks with "cudnn: rep" or "flash: rep"; a refusal's reason is PyTorch's warning,
kept in the note). The repeated K/V are made once, outside the timed call, and a backward row
differentiates with respect to them (dk and dv summed over each group for the check, untimed),
so a peer's time is its attention alone. --pin is for forward rows: no backward kernel is pinned. The flash backend is PyTorch's own FlashAttention (FA2 unless the build has
enabled FA3); the header line says which torch and cuDNN ran.
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings

CPGEN_DTYPE = {"bf16": 0, "fp16": 1}
CPGEN_SCHEME = {"contiguous": 0, "zigzag": 1, "zigzag-token": 2, "striped": 3}  # cpgen_scheme
CPGEN_LAYOUT_BHSD = 0
TOLERANCE = 2e-2  # out's relative error and lse's absolute one, as the C++ bench's check (gpu_bench.cpp)



class CpgenProblem(ctypes.Structure):
    # include/cpgen/cpgen_c.h, struct cpgen_problem, version 1.
    _fields_ = [
        ("batch", ctypes.c_int64),
        ("q_heads", ctypes.c_int64),
        ("kv_heads", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("seq_len", ctypes.c_int64),
        ("cp_size", ctypes.c_int64),
        ("dtype", ctypes.c_int32),
        ("causal", ctypes.c_int32),
        ("scheme", ctypes.c_int32),
        ("struct_size", ctypes.c_int32),
        ("softmax_scale", ctypes.c_double),
        ("documents", ctypes.POINTER(ctypes.c_int64)),
        ("document_count", ctypes.c_int64),
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
        ("softcap", ctypes.c_double),
        ("layout", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
    ]


class Cpgen:
    """The few C ABI calls a one-GPU forward needs."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        lib = self.lib
        lib.cpgen_version.restype = ctypes.c_char_p
        lib.cpgen_last_error.restype = ctypes.c_char_p
        lib.cpgen_problem_init_sized.argtypes = [ctypes.POINTER(CpgenProblem), ctypes.c_size_t]
        lib.cpgen_ring_create_loopback.argtypes = [
            ctypes.POINTER(CpgenProblem), ctypes.c_int32, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        lib.cpgen_ring_forward.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_void_p]
        pointers = ctypes.POINTER(ctypes.c_void_p)
        lib.cpgen_ring_forward_all.argtypes = [ctypes.c_void_p] + [pointers] * 5 + [ctypes.c_void_p]
        lib.cpgen_ring_backward.argtypes = [ctypes.c_void_p] * 11
        lib.cpgen_ring_backward_all.argtypes = [ctypes.c_void_p] + [pointers] * 9 + [ctypes.c_void_p]
        lib.cpgen_partition_rows.argtypes = [ctypes.POINTER(CpgenProblem), ctypes.c_int32,
                                             ctypes.POINTER(ctypes.c_int64)]
        lib.cpgen_partition_positions.argtypes = [ctypes.POINTER(CpgenProblem), ctypes.c_int32,
                                                  ctypes.POINTER(ctypes.c_int64), ctypes.c_size_t]
        lib.cpgen_ring_synchronize.argtypes = [ctypes.c_void_p]
        lib.cpgen_ring_kernel_uri.argtypes = [ctypes.c_void_p]
        lib.cpgen_ring_kernel_uri.restype = ctypes.c_char_p
        lib.cpgen_ring_config_source.argtypes = [ctypes.c_void_p]
        lib.cpgen_ring_config_source.restype = ctypes.c_char_p
        lib.cpgen_ring_config_reason.argtypes = [ctypes.c_void_p]
        lib.cpgen_ring_config_reason.restype = ctypes.c_char_p
        lib.cpgen_ring_backward_kernel_uri.argtypes = [ctypes.c_void_p]
        lib.cpgen_ring_backward_kernel_uri.restype = ctypes.c_char_p
        lib.cpgen_ring_destroy.argtypes = [ctypes.c_void_p]
        lib.cpgen_ring_destroy.restype = None
        lib.cpgen_family_kernel_uri_for_arch.argtypes = [ctypes.POINTER(CpgenProblem), ctypes.c_char_p,
                                                         ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.cpgen_device_arch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"cpgen {what}: {self.lib.cpgen_last_error().decode()}")

    def problem(self, cfg):
        p = CpgenProblem()
        self.check(self.lib.cpgen_problem_init_sized(ctypes.byref(p), ctypes.sizeof(p)), "problem_init")
        p.batch, p.q_heads, p.kv_heads = cfg["batch"], cfg["q_heads"], cfg["kv_heads"]
        p.head_dim, p.seq_len, p.cp_size = cfg["head_dim"], cfg["seq_len"], cfg["ranks"]
        p.dtype, p.causal = CPGEN_DTYPE[cfg["dtype"]], int(cfg["causal"])
        p.scheme = CPGEN_SCHEME["contiguous" if cfg["ranks"] == 1 else cfg["scheme"]]
        p.layout = CPGEN_LAYOUT_BHSD
        self.check(self.lib.cpgen_problem_validate(ctypes.byref(p)), "problem_validate")
        return p

    def family_uri(self, cfg, family, arch=None):
        """The URI of the forward kernel `family` (one of FAMILIES) runs by default for cfg, with
        tiles that fit `arch` (None: those of the 227 KB targets)."""
        p = self.problem(cfg)
        buf = ctypes.create_string_buffer(256)
        self.check(self.lib.cpgen_family_kernel_uri_for_arch(ctypes.byref(p), family.encode(),
                                                             arch.encode() if arch else None, buf, len(buf)),
                   "family_kernel_uri_for_arch")
        return buf.value.decode()

    def device_arch(self, device):
        """The arch cpgen compiles for on CUDA device `device`, e.g. sm_90a."""
        buf = ctypes.create_string_buffer(32)
        self.check(self.lib.cpgen_device_arch(device, buf, len(buf)), "device_arch")
        return buf.value.decode()

    def positions(self, cfg):
        """Every rank's global positions, in local order (the rows of its shard)."""
        p = self.problem(cfg)
        out = []
        for rank in range(cfg["ranks"]):
            rows = ctypes.c_int64()
            self.check(self.lib.cpgen_partition_rows(ctypes.byref(p), rank, ctypes.byref(rows)), "partition_rows")
            buf = (ctypes.c_int64 * rows.value)()
            self.check(self.lib.cpgen_partition_positions(ctypes.byref(p), rank, buf, rows.value),
                       "partition_positions")
            out.append(list(buf))
        return out

    def ring(self, cfg, database):
        p = self.problem(cfg)
        handle = ctypes.c_void_p()
        db = database.encode() if database else None
        self.check(self.lib.cpgen_ring_create_loopback(ctypes.byref(p), 0, db, ctypes.byref(handle)), "ring_create")
        return handle

    def forward(self, ring, q, k, v, out, lse, stream):
        self.check(self.lib.cpgen_ring_forward(ring, q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                                               lse.data_ptr(), stream), "ring_forward")

    def forward_all(self, ring, shards, stream):
        """shards: one dict of q, k, v, out, lse tensors per virtual rank."""
        arrays = [(ctypes.c_void_p * len(shards))(*[s[name].data_ptr() for s in shards])
                  for name in ("q", "k", "v", "out", "lse")]
        self.check(self.lib.cpgen_ring_forward_all(ring, *arrays, stream), "ring_forward_all")

    def backward(self, ring, t, stream):
        """t: q, k, v, out, lse (the forward's), dout, and dq, dk, dv to write."""
        self.check(self.lib.cpgen_ring_backward(ring, *[t[n].data_ptr() for n in BACKWARD_TENSORS], stream),
                   "ring_backward")

    def backward_all(self, ring, shards, stream):
        """shards: one dict of the BACKWARD_TENSORS per virtual rank."""
        arrays = [(ctypes.c_void_p * len(shards))(*[s[name].data_ptr() for s in shards]) for name in BACKWARD_TENSORS]
        self.check(self.lib.cpgen_ring_backward_all(ring, *arrays, stream), "ring_backward_all")


# cpgen_ring_backward's tensors, in its argument order.
BACKWARD_TENSORS = ("q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv")
# Useful FLOPs of a backward against its forward (FlashAttention's convention, as the C++ bench:
# runtime/api/gpu_bench.h kBackwardFlopsFactor): five matmuls of the forward's two.
BACKWARD_FLOPS_FACTOR = 2.5


def useful_flops(cfg):
    s = cfg["seq_len"]
    pairs = s * (s + 1) / 2 if cfg["causal"] else s * s
    flops = 4.0 * cfg["batch"] * cfg["q_heads"] * cfg["head_dim"] * pairs
    return flops * (BACKWARD_FLOPS_FACTOR if cfg.get("direction") == "bwd" else 1.0)


def reference_rows(torch, q, k, v, rows, group, causal, batch, chunk=128):
    """float64 attention of query rows `rows` of `batch`, every query head: (out [heads, rows, d],
    natural-log lse [heads, rows]), `chunk` rows at a time (a 32K row's scores over 32 heads are
    8 MB in float64)."""
    kk = k[batch].double().repeat_interleave(group, dim=0)
    vv = v[batch].double().repeat_interleave(group, dim=0)
    keys = torch.arange(k.shape[2], device=q.device)
    outs, lses = [], []
    for part in rows.split(chunk):
        scores = q[batch, :, part].double() @ kk.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if causal:
            scores = scores.masked_fill(keys[None, None, :] > part[None, :, None], float("-inf"))
        outs.append(torch.softmax(scores, dim=-1) @ vv)
        lses.append(torch.logsumexp(scores, dim=-1))
    return torch.cat(outs, dim=1), torch.cat(lses, dim=1)


# A forward row's check also reads the first and the last row of every block of this many
# positions, so that every query block of a kernel (64 to 192 packed rows) has checked rows at or
# near its edges, where masks and tile bounds go wrong: --check-rows spread evenly left 192 of a
# 32K row's 256 blocks of 128 unchecked.
EDGE_BLOCK = 64


def check_rows(torch, s, count, backward):
    """The sequence positions a row's check reads: `count` spread evenly, and for a forward row the
    edges of every EDGE_BLOCK-position block (a backward row checks dk and dv at the same
    positions, each over every query, so it keeps the spread alone)."""
    rows = torch.linspace(0, s - 1, count, device="cuda").round().long()
    if not backward:
        edges = torch.arange(0, s, EDGE_BLOCK, device="cuda")
        rows = torch.cat([rows, edges, (edges + EDGE_BLOCK - 1).clamp(max=s - 1)])
    return rows.unique()


def reference_grads(torch, q, k, v, dout, rows, keys, group, causal, batch, chunk=512):
    """float64 gradients of batch `batch`, from the whole softmax: dq at query rows `rows` [hq, R, d],
    dk and dv at key rows `keys` [hkv, J, d] (every query's contribution, summed over the group's
    query heads). Each query's lse and delta = rowsum(dout * out) come from its full row, in chunks
    of `chunk` queries per head."""
    hq, s, d = q.shape[1], q.shape[2], q.shape[3]
    scale = 1.0 / math.sqrt(d)
    positions = torch.arange(s, device=q.device)
    dq = torch.empty(hq, len(rows), d, device=q.device, dtype=torch.float64)
    dk = torch.zeros(hq // group, len(keys), d, device=q.device, dtype=torch.float64)
    dv = torch.zeros_like(dk)

    def scores(qs, q_pos, kk, k_pos):
        x = qs @ kk.transpose(-1, -2) * scale
        if causal:
            x = x.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
        return x

    for h in range(hq):
        qh, doh = q[batch, h].double(), dout[batch, h].double()
        kh, vh = k[batch, h // group].double(), v[batch, h // group].double()
        lse, delta = torch.empty(s, device=q.device, dtype=torch.float64), torch.empty_like(positions, dtype=torch.float64)
        for start in range(0, s, chunk):
            part = positions[start:start + chunk]
            x = scores(qh[part], part, kh, positions)
            lse[part] = torch.logsumexp(x, dim=-1)
            delta[part] = (doh[part] * (torch.exp(x - lse[part, None]) @ vh)).sum(-1)
        # dq of the sampled rows: scale * sum_j P_ij (dout_i . v_j - delta_i) k_j
        p = torch.exp(scores(qh[rows], rows, kh, positions) - lse[rows, None])
        dq[h] = (p * (doh[rows] @ vh.T - delta[rows, None])) @ kh * scale
        # dk, dv of the sampled keys, over every query: P_ij for all i, j in keys
        p = torch.exp(scores(qh, positions, kh[keys], keys) - lse[:, None])
        dv[h // group] += p.T @ doh
        dk[h // group] += (p * (doh @ vh[keys].T - delta[:, None])).T @ qh * scale
    return dq, dk, dv


def check_grads(torch, grads, refs, rows, keys):
    """The largest relative error of dq (at `rows`), dk and dv (at `keys`) over the checked
    batches, each NaN when any element of that gradient is unwritten."""
    errors = {}
    for name, index, got in zip(("dq", "dk", "dv"), (rows, keys, keys), grads):
        if torch.isnan(got).any():
            errors[name] = float("nan")
            continue
        errors[name] = max(float(torch.linalg.norm(got[batch, :, index].double() - ref[name]) / torch.linalg.norm(ref[name]))
                           for batch, ref in refs.items())
    return errors


def check(torch, out, refs, rows):
    """The largest relative error of one checked row (one head's output at one position) over the
    checked batches, NaN when any element is unwritten. Row by row: over all checked rows at once,
    one wrong row (a block's edge, one head) weighed 1/sqrt(rows) of its error and passed."""
    if torch.isnan(out).any():
        return float("nan")
    errors = []
    for batch, (ref, _) in refs.items():
        got = out[batch, :, rows].double()
        per_row = torch.linalg.norm(got - ref, dim=-1) / torch.linalg.norm(ref, dim=-1).clamp_min(1e-300)
        errors.append(float(per_row.max()))
    return max(errors)


def check_lse(torch, lse, refs, rows):
    """The largest absolute LSE error over the checked batches, NaN when any is unwritten."""
    if torch.isnan(lse).any():
        return float("nan")
    return max(float((lse[batch, :, rows].double() - ref_lse).abs().max()) for batch, (_, ref_lse) in refs.items())


def record_grads(row, prefix, errors):
    """A backward check's errors into `row`: each gradient's, the worst, and the verdict."""
    for name, e in errors.items():
        row[f"{prefix}_{name}_error"] = e
    row[f"{prefix}_error"] = worst(errors.values())
    row[f"{prefix}_check"] = verdict(*errors.values())


def worst(errors):
    """The largest of `errors`, NaN when any is NaN (an unwritten element)."""
    errors = list(errors)
    return float("nan") if any(math.isnan(e) for e in errors) else max(errors)


def verdict(*errors):
    """"ok" when every error is within TOLERANCE (a NaN is not), else "FAILED"."""
    return "ok" if all(e <= TOLERANCE for e in errors) else "FAILED"


def time_interleaved(torch, fns, warmup, iters):
    """{name: (median, fastest, slowest) milliseconds} of the callables in `fns` ({name: fn}), each
    run `iters` times between two events after `warmup` runs, in rounds that run every one once in
    turn. Everything is enqueued back to back: the host does not wait between runs, so its time to
    enqueue the next is not timed where the GPU is the bottleneck. A callable that raises
    RuntimeError leaves the rotation, and its entry is the exception instead; so are the entries
    of all that ran when the final synchronize raises."""
    result, live = {}, dict(fns)

    def attempt(name, fn):
        try:
            fn()
            return True
        except RuntimeError as e:
            result[name] = e
            live.pop(name)
            return False

    for name, fn in list(live.items()):
        for _ in range(warmup):
            if not attempt(name, fn):
                break
    marks = {name: [] for name in live}
    for _ in range(iters):
        for name, fn in list(live.items()):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            if attempt(name, fn):
                end.record()
                marks[name].append((start, end))
    if not live:
        return result
    try:
        torch.cuda.synchronize()  # releases the GIL: the watchdog still runs
    except RuntimeError as e:  # a launch failed on the GPU: none of the marks can be read
        return {**result, **{name: e for name in live}}
    for name in live:
        times = [start.elapsed_time(end) for start, end in marks[name]]
        result[name] = (statistics.median(times), min(times), max(times))
    return result


def store_times(row, prefix, times):
    row[f"{prefix}_ms"], row[f"{prefix}_min_ms"], row[f"{prefix}_max_ms"] = times


FAMILIES = ("mma.sync", "wgmma", "wgmma-pingpong", "wgmma-persistent")
PEERS = ("cudnn", "flash")  # the SDPA backends timed beside cpgen, by their row prefix


def pinned_uris(cpgen, configs, pin, arch=None):
    """The kernel of each distinct (dtype, head_dim, causal, group) of the configurations, in
    order: a family's default for it on `arch` (asked of cpgen), or the URI template filled in."""
    uris = {}
    for cfg in configs:
        group = cfg["q_heads"] // cfg["kv_heads"]
        key = (cfg["dtype"], cfg["head_dim"], bool(cfg["causal"]), group)
        if key in uris:
            continue
        if pin in FAMILIES:
            uris[key] = cpgen.family_uri(cfg, pin, arch)
        else:
            uris[key] = pin.format(dtype=cfg["dtype"], head_dim=cfg["head_dim"], group=group,
                                   mask="causal" if cfg["causal"] else "full")
    return uris


def pin_kernels(uris, folder):
    """Writes one cache file whose pattern entries map every configuration to its pinned kernel
    (cpgen reads its caches once per process, so all of them go in before the first ring) and
    returns an empty database path, so no tuned record overrides them."""
    entries = []
    for (dtype, head_dim, causal, group), uri in uris.items():
        entries.append({"source": "default-heuristic", "kernel": uri, "disposition": "not-timed",
                        "detail": "pinned by bench/kernels.py",
                        "workload": {"dtype": dtype, "head_dim": head_dim, "causal": causal, "gqa_group": group}})
    caches = os.path.join(folder, "caches")
    os.makedirs(caches, exist_ok=True)
    with open(os.path.join(caches, "0-pinned.json"), "w") as f:
        json.dump({"format": "cpgen-tuning-cache", "version": 1, "entries": entries}, f)
    os.environ["CPGEN_CACHES_DIR"] = caches
    return os.path.join(folder, "empty.db")


def tune_shapes(configs):
    """The distinct problems of `configs` as a shapes file's object (examples/shapes/README.md):
    what `cpgen tune` times candidates for, and what each configuration's ring then selects."""
    shapes, seen = [], set()
    for cfg in configs:
        shape = {"batch": cfg["batch"], "q_heads": cfg["q_heads"], "kv_heads": cfg["kv_heads"],
                 "head_dim": cfg["head_dim"], "seq_len": cfg["seq_len"], "cp_size": cfg["ranks"],
                 "dtype": cfg["dtype"], "causal": bool(cfg["causal"]), "scheme": cfg["scheme"]}
        key = json.dumps(shape, sort_keys=True)
        if key not in seen:
            seen.add(key)
            shapes.append(dict(shape, name=f"{cfg['dtype']}-hd{cfg['head_dim']}-{'causal' if cfg['causal'] else 'full'}-"
                                            f"s{cfg['seq_len']}-gqa{cfg['q_heads'] // cfg['kv_heads']}-r{cfg['ranks']}"))
    return {"shapes": shapes}


def tune(cli, configs, direction, candidates, folder):
    """Runs `cpgen tune` over the configurations' problems into a database in `folder`; returns
    (its path, the seconds it took, the command). Raises RuntimeError with the tune's last line."""
    shapes = os.path.join(folder, "tune-shapes.json")
    with open(shapes, "w") as f:
        json.dump(tune_shapes(configs), f)
    db = os.path.join(folder, "tuned.db")
    cmd = [cli, "tune", "--shapes", shapes, "--db", db, "--only", direction, "--require-gpu", "--quiet",
           "--max-candidates", str(candidates)]
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()
        raise RuntimeError(f"exit {done.returncode}: {last[-1] if last else 'no output'}")
    return db, time.monotonic() - started, " ".join(cmd)


def run_config(torch, cpgen, cfg, args):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[cfg["dtype"]]
    b, hq, hkv, s, d = cfg["batch"], cfg["q_heads"], cfg["kv_heads"], cfg["seq_len"], cfg["head_dim"]
    group = hq // hkv
    gen = torch.Generator(device="cuda").manual_seed(cfg["seed"])
    q = torch.randn(b, hq, s, d, device="cuda", dtype=dt, generator=gen)
    k = torch.randn(b, hkv, s, d, device="cuda", dtype=dt, generator=gen)
    v = torch.randn(b, hkv, s, d, device="cuda", dtype=dt, generator=gen)
    backward = cfg.get("direction") == "bwd"
    dout = torch.randn(b, hq, s, d, device="cuda", dtype=dt, generator=gen) if backward else None
    rows = check_rows(torch, s, args.check_rows, backward)
    # The first and the last batch: a batch stride gone wrong shows in the last one. The backward
    # checks dq at the same query rows and dk, dv at the same positions as keys.
    batches = sorted({0, b - 1})
    if backward:
        grad_refs = {batch: dict(zip(("dq", "dk", "dv"),
                                     reference_grads(torch, q, k, v, dout, rows, rows, group, cfg["causal"], batch)))
                     for batch in batches}
    else:
        refs = {batch: reference_rows(torch, q, k, v, rows, group, cfg["causal"], batch) for batch in batches}
    flops = useful_flops(cfg)
    row = dict(cfg)
    stream = torch.cuda.current_stream().cuda_stream

    def nans(shape, dtype=dt):
        return torch.full(shape, float("nan"), device="cuda", dtype=dtype)

    # cpgen: one rank on the whole sequence, or the loopback ring over the shards of every rank.
    # A backward row runs the forward once (untimed) for the out and lse its backward reads.
    if cfg["ranks"] == 1:
        t = dict(q=q, k=k, v=v, out=nans(q.shape), lse=nans((b, hq, s), torch.float32))
        if backward:
            t.update(dout=dout, dq=nans(q.shape), dk=nans(k.shape), dv=nans(v.shape))

        def run_forward():
            cpgen.forward(ring, q, k, v, t["out"], t["lse"], stream)

        def run_cpgen():
            if backward:
                cpgen.backward(ring, t, stream)
            else:
                run_forward()

        def gather():
            return (t["dq"], t["dk"], t["dv"]) if backward else (t["out"], t["lse"])
    else:
        index = [torch.tensor(pos, device="cuda", dtype=torch.long) for pos in cpgen.positions(cfg)]
        shards = []
        for i in index:
            shard = dict(q=q[:, :, i].contiguous(), k=k[:, :, i].contiguous(), v=v[:, :, i].contiguous(),
                         out=nans((b, hq, len(i), d)), lse=nans((b, hq, len(i)), torch.float32))
            if backward:
                shard.update(dout=dout[:, :, i].contiguous(), dq=nans((b, hq, len(i), d)),
                             dk=nans((b, hkv, len(i), d)), dv=nans((b, hkv, len(i), d)))
            shards.append(shard)

        def run_forward():
            cpgen.forward_all(ring, shards, stream)

        def run_cpgen():
            if backward:
                cpgen.backward_all(ring, shards, stream)
            else:
                run_forward()

        def gather():
            # Each tensor over the whole sequence: its shard's shape with all s rows.
            names = ("dq", "dk", "dv") if backward else ("out", "lse")
            full = [nans(shards[0][n].shape[:2] + (s,) + shards[0][n].shape[3:], shards[0][n].dtype) for n in names]
            for i, shard in zip(index, shards):
                for tensor, n in zip(full, names):
                    tensor[:, :, i] = shard[n]
            return tuple(full)

    # Each implementation runs once and is checked; those that ran are then timed together
    # (time_interleaved), the ring kept until that is done.
    timers = {}
    ring = None
    try:
        try:
            ring = cpgen.ring(cfg, args.db)
            row["cpgen_uri"] = cpgen.lib.cpgen_ring_kernel_uri(ring).decode()
            if backward:
                row["cpgen_backward_uri"] = cpgen.lib.cpgen_ring_backward_kernel_uri(ring).decode()
            row["cpgen_source"] = cpgen.lib.cpgen_ring_config_source(ring).decode()
            wanted = args.pinned.get((cfg["dtype"], cfg["head_dim"], bool(cfg["causal"]), group))
            if wanted and row["cpgen_uri"] != wanted:
                raise RuntimeError(f"pin not honoured: asked for {wanted}, selection runs {row['cpgen_uri']} "
                                   f"({cpgen.lib.cpgen_ring_config_reason(ring).decode()})")
            if backward:
                run_forward()
            run_cpgen()
            cpgen.check(cpgen.lib.cpgen_ring_synchronize(ring), "synchronize")
            if backward:
                record_grads(row, "cpgen", check_grads(torch, gather(), grad_refs, rows, rows))
            else:
                got, got_lse = gather()
                row["cpgen_error"] = check(torch, got, refs, rows)
                row["cpgen_lse_error"] = check_lse(torch, got_lse, refs, rows)
                row["cpgen_check"] = verdict(row["cpgen_error"], row["cpgen_lse_error"])
            timers["cpgen"] = run_cpgen
        except RuntimeError as e:
            # The peers still run on this shape; a CUDA context left unusable raises in main's probe.
            row["failed"] = "cpgen: " + str(e).splitlines()[0][:160]

        # SDPA backends on the same tensors
        for name, backend in zip(PEERS, (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION)):
            row[f"{name}_note"] = ""
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")  # a refusal's reasons are warnings, shown once otherwise
                try:
                    # A backward row differentiates with respect to leaf copies of q, k and v, and
                    # times torch.autograd.grad of the forward's output.
                    def make_leaves(kk, vv):
                        return {n: x.detach().clone().requires_grad_() if backward else x
                                for n, x in (("q", q), ("k", kk), ("v", vv))}

                    leaves = make_leaves(k, v)
                    inputs = {"gqa": group > 1}

                    def call(backend=backend, inputs=inputs, leaves=leaves):
                        with sdpa_kernel([backend]):
                            return F.scaled_dot_product_attention(leaves["q"], leaves["k"], leaves["v"],
                                                                  enable_gqa=inputs["gqa"],
                                                                  is_causal=bool(cfg["causal"]))

                    try:
                        o = call()
                    except RuntimeError:
                        if group == 1:
                            raise
                        # The backend refuses enable_gqa: give it K/V repeated per query head (same
                        # arithmetic), made once here, so that the timed call is the backend's
                        # attention alone (the repeat, and its reduction in the backward, are not
                        # the kernel's work).
                        leaves.update(make_leaves(k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)))
                        inputs.update(gqa=False)
                        row[f"{name}_note"] = "rep"
                        o = call()
                    if backward:
                        def grad(o=o):
                            return torch.autograd.grad(o, (leaves["q"], leaves["k"], leaves["v"]), dout,
                                                       retain_graph=True)

                        def per_kv_head(grads):
                            # Repeated K/V leaves give dk and dv per query head: the group's sum
                            # is the KV head's (untimed, for the check only).
                            dq, dk, dv = grads
                            if dk.shape[1] == hkv:
                                return grads
                            return dq, *(x.unflatten(1, (hkv, group)).sum(2) for x in (dk, dv))

                        record_grads(row, name, check_grads(torch, per_kv_head(grad()), grad_refs, rows, rows))
                        timers[name] = grad
                    else:
                        torch.cuda.synchronize()
                        row[f"{name}_error"] = check(torch, o, refs, rows)
                        row[f"{name}_check"] = verdict(row[f"{name}_error"])
                        del o
                        timers[name] = call
                except RuntimeError as e:
                    reasons = [str(w.message).splitlines()[0] for w in caught
                               if "not used because" not in str(w.message)]
                    why = reasons[0] if reasons else str(e).splitlines()[0]
                    row[f"{name}_note"] = "n/a: " + why[:120]

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the checked runs above showed what the backends had to say
            times = time_interleaved(torch, timers, args.warmup, args.iters)
        if "cpgen" in timers and not isinstance(times["cpgen"], RuntimeError):
            try:
                cpgen.check(cpgen.lib.cpgen_ring_synchronize(ring), "synchronize")
            except RuntimeError as e:
                times["cpgen"] = e
    finally:
        if ring is not None:
            cpgen.lib.cpgen_ring_destroy(ring)

    for name, got in times.items():
        if isinstance(got, RuntimeError):
            if name == "cpgen":
                row["failed"] = "cpgen: " + str(got).splitlines()[0][:160]
            else:
                row[f"{name}_note"] = "n/a: " + str(got).splitlines()[0][:120]
            continue
        store_times(row, name, got)
        row[f"{name}_tflops"] = flops / row[f"{name}_ms"] / 1e9
    if "cpgen_ms" in row:
        for name in PEERS:
            if f"{name}_ms" in row:
                row[f"ratio_{name}"] = row[f"{name}_ms"] / row["cpgen_ms"]
    return row


def emit_row(row, jsonl):
    """One configuration's result: a JSON line on stdout, appended to `jsonl` when given."""
    line = json.dumps(row, sort_keys=True)
    print(line, flush=True)
    if jsonl:
        with open(jsonl, "a") as f:
            f.write(line + "\n")
    return line


class Watchdog:
    """Ends the process when one configuration runs longer than `seconds`: a kernel that never
    finishes cannot be interrupted from Python, and would otherwise hold the GPU call until its
    time limit. Before exiting it appends the configuration as a failed row (jsonl) and names it
    on stderr, so the rows before it and the culprit both survive."""

    def __init__(self, seconds, jsonl):
        self.seconds, self.jsonl = seconds, jsonl
        self.cfg, self.since = None, time.monotonic()
        self.lock = threading.Lock()
        if seconds > 0:
            threading.Thread(target=self.watch, daemon=True).start()

    def start(self, cfg):
        with self.lock:
            self.cfg, self.since = cfg, time.monotonic()

    def watch(self):
        while True:
            time.sleep(1)
            with self.lock:
                if self.cfg is None or time.monotonic() - self.since < self.seconds:
                    continue
                row = dict(self.cfg, failed=f"stalled: no result after {self.seconds} s (a kernel that never finishes?)")
            line = emit_row(row, self.jsonl)
            print(f"kernels.py: configuration {line} {row['failed']}; exiting", file=sys.stderr, flush=True)
            os._exit(4)


def fmt(x, spec):
    """A measured value; "-" when it was not measured, "NaN" when it was and is NaN."""
    if x is None:
        return "-"
    return "NaN" if isinstance(x, float) and math.isnan(x) else format(x, spec)


def ratio(r, name):
    """A ratio cell: none where either side's output failed its check."""
    if r.get("cpgen_check") == "FAILED" or r.get(f"{name}_check") == "FAILED":
        return "wrong"
    return fmt(r.get(f"ratio_{name}"), ".2f")


def markdown(rows):
    """The table; with a "dir" column (fwd or bwd) when any row is a backward one, whose TFLOP/s
    count 2.5 times the forward's FLOPs and whose kernel column names the backward kernel."""
    with_dir = any(r.get("direction") == "bwd" for r in rows)
    lines = ["| dtype | hd | causal | seq | gqa | ring |" + (" dir |" if with_dir else "") +
             " cpgen TFLOP/s | cuDNN TFLOP/s | flash TFLOP/s | vs cuDNN | vs flash | cpgen err | kernel |",
             "|---|---|---|---|---|---|" + ("---|" if with_dir else "") + "---|---|---|---|---|---|---|"]
    for r in rows:
        notes = "; ".join([f"{peer}: {r[peer + '_note']}" for peer in PEERS if r.get(f"{peer}_note")] +
                          [f"{peer} CHECK FAILED" for peer in PEERS if r.get(f"{peer}_check") == "FAILED"])
        uri = r.get("cpgen_backward_uri", "") if r.get("direction") == "bwd" else r.get("cpgen_uri", "")
        kernel = " ".join(x for x in (uri, r.get("failed", "")) if x)
        if r.get("cpgen_check") == "FAILED":
            kernel += (" CHECK FAILED (" + ", ".join(f"{n} error {fmt(r.get(f'cpgen_{n}_error'), '.1e')}"
                                                     for n in ("dq", "dk", "dv")) + ")" if r.get("direction") == "bwd"
                       else f" CHECK FAILED (lse error {fmt(r.get('cpgen_lse_error'), '.1e')})")
        lines.append(
            f"| {r['dtype']} | {r['head_dim']} | {int(r['causal'])} | {r['seq_len']} | {r['q_heads'] // r['kv_heads']} "
            f"| {ring_name(r)} |{' ' + r.get('direction', 'fwd') + ' |' if with_dir else ''} "
            f"{fmt(r.get('cpgen_tflops'), '.0f')} | {fmt(r.get('cudnn_tflops'), '.0f')} "
            f"| {fmt(r.get('flash_tflops'), '.0f')} | {ratio(r, 'cudnn')} "
            f"| {ratio(r, 'flash')} | {fmt(r.get('cpgen_error'), '.1e')} "
            f"| {kernel}{' (' + notes + ')' if notes else ''} |")
    return "\n".join(lines)


def ring_name(r):
    return "1" if r.get("ranks", 1) == 1 else f"{r['ranks']} {r['scheme']}"


def ints(text):
    return [int(x) for x in text.split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True, help="path of libcpgen.so")
    ap.add_argument("--db", default=None, help="tuning database (default: cpgen's own lookup)")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--head-dims", type=ints, default=[64, 128, 256])
    ap.add_argument("--causal", type=ints, default=[0, 1])
    ap.add_argument("--lengths", type=ints, default=[4096, 8192, 16384, 32768])
    ap.add_argument("--gqa", type=ints, default=[1, 4, 8])
    ap.add_argument("--ranks", type=ints, default=[1],
                    help="virtual ranks of a loopback ring on the one GPU (1: one kernel launch)")
    ap.add_argument("--direction", default="fwd", choices=("fwd", "bwd"),
                    help="fwd: the forward; bwd: the backward (cpgen's backward ring after one untimed forward, "
                         "SDPA's torch.autograd.grad of its output; dq, dk, dv checked against float64)")
    ap.add_argument("--scheme", default="zigzag", choices=sorted(CPGEN_SCHEME),
                    help="how a ring of more than one rank splits the sequence")
    ap.add_argument("--q-heads", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=32768,
                    help="batch = max(1, tokens / seq_len), so short sequences still fill the GPU")
    ap.add_argument("--warmup", type=int, default=3)
    # 20 rounds: the ratios that matter sit within a few percent of 1.0, and a launch at the
    # issue's shapes takes 3-25 ms, so the timing costs a second or two per configuration.
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--check-rows", type=int, default=64)
    ap.add_argument("--pin", default=None,
                    help="run this instead of the selected kernel: a family (" + ", ".join(FAMILIES) + ") or a kernel URI template")
    ap.add_argument("--arch", default=None,
                    help="the arch whose tiles a family --pin gets (default: the GPU's, e.g. sm_90a; "
                         "--list-pins without it: the tiles of the 227 KB targets)")
    ap.add_argument("--list-pins", action="store_true",
                    help="print the kernel --pin gives each configuration and exit (no GPU needed)")
    ap.add_argument("--templates", default=None,
                    help="compile cpgen's kernels from the .cuh templates in DIR (another revision's, to compare)")
    ap.add_argument("--tune", type=int, default=0, metavar="N",
                    help="first time N candidates per workload of the configurations' problems with cpgen tune "
                         "(--direction's, into a database of this run) and run their winners (0: no tuning)")
    ap.add_argument("--cpgen", default=None, help="the cpgen command line --tune runs (default: cpgen beside --lib)")
    ap.add_argument("--jsonl", default=None, help="append one JSON object per configuration here")
    ap.add_argument("--markdown", default=None, help="write the table here as well")
    ap.add_argument("--stall-seconds", type=int, default=120,
                    help="exit (status 4) when one configuration takes longer, naming it (0: never)")
    args = ap.parse_args()
    if args.list_pins and not args.pin:
        print("kernels.py: --list-pins needs --pin", file=sys.stderr)
        return 2
    if args.pin and args.direction == "bwd":
        # A pin is a forward kernel (a pattern entry of a cache); selection never gives a backward
        # step a forward kernel, so every pinned row would time the same backward default.
        print(f"kernels.py: --pin '{args.pin}' names forward kernels; --direction bwd times the backward kernels "
              "selection picks (no backward pin exists): leave out one of the two", file=sys.stderr)
        return 2
    if args.tune < 0 or (args.tune and (args.pin or args.db)):
        print(f"kernels.py: --tune {args.tune}: a number of candidates per workload (0: no tuning), not with --pin "
              "or --db (it selects from a database of its own)", file=sys.stderr)
        return 2
    args.cpgen = args.cpgen or os.path.join(os.path.dirname(os.path.abspath(args.lib)), "cpgen")
    if args.tune and not os.access(args.cpgen, os.X_OK):
        print(f"kernels.py: --tune needs the cpgen command line: '{args.cpgen}' is not executable (--cpgen PATH)",
              file=sys.stderr)
        return 2
    if args.templates:
        folder = os.path.abspath(args.templates)
        if not os.path.isdir(folder) or not any(n.endswith(".cuh") for n in os.listdir(folder)):
            print(f"kernels.py: --templates '{args.templates}': not a folder of .cuh template files", file=sys.stderr)
            return 2
        # libcpgen reads it once, at its first kernel: before any.
        os.environ["CPGEN_TEMPLATES_DIR"] = folder
    if not args.list_pins:
        # PyTorch before libcpgen, as in a training program that imports torch first. The other
        # order died on the first H100 (2026-11-26) with "free(): invalid pointer" while libcpgen
        # still linked its own NCCL; it loads the process's NCCL on first use now.
        import torch  # noqa: F401
    cpgen = Cpgen(args.lib)
    configs = []
    for dtype in args.dtypes.split(","):
        for hd in args.head_dims:
            for causal in args.causal:
                for seq in args.lengths:
                    for group in args.gqa:
                        if args.q_heads % group:
                            continue
                        for ranks in args.ranks:
                            configs.append(dict(dtype=dtype, head_dim=hd, causal=causal, seq_len=seq,
                                                batch=max(1, args.tokens // seq), q_heads=args.q_heads,
                                                kv_heads=args.q_heads // group, ranks=ranks,
                                                scheme="contiguous" if ranks == 1 else args.scheme,
                                                seed=len(configs) + 1))
                            if args.templates:
                                configs[-1]["templates"] = os.environ["CPGEN_TEMPLATES_DIR"]
                            if args.direction == "bwd":  # forward rows keep the keys they always had
                                configs[-1]["direction"] = "bwd"
    uris = {}
    if args.pin:
        try:
            if args.pin in FAMILIES and not args.arch and not args.list_pins:
                import torch
                if torch.cuda.is_available():  # else the check below says so
                    args.arch = cpgen.device_arch(torch.cuda.current_device())
            uris = pinned_uris(cpgen, configs, args.pin, args.arch)
        except KeyError as e:
            print(f"kernels.py: --pin '{args.pin}': unknown placeholder {{{e.args[0]}}}; allowed: {{dtype}}, "
                  "{head_dim}, {group}, {mask}, or a family: " + ", ".join(FAMILIES), file=sys.stderr)
            return 2
        except (RuntimeError, IndexError, ValueError) as e:
            print(f"kernels.py: --pin '{args.pin}': {e}", file=sys.stderr)
            return 2
    args.pinned = uris  # run_config fails a row whose ring did not select its pinned kernel
    if args.list_pins:
        for (dtype, head_dim, causal, group), uri in uris.items():
            print(f"{dtype} hd{head_dim} {'causal' if causal else 'full'} gqa{group}: {uri}")
        return 0

    import torch
    if not torch.cuda.is_available():
        print("kernels.py: no CUDA device", file=sys.stderr)
        return 2
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"cpgen {cpgen.lib.cpgen_version().decode()}"
          + (f", templates {os.environ['CPGEN_TEMPLATES_DIR']}" if args.templates else ""), flush=True)
    # The pinned cache folder lives until the process ends (TemporaryDirectory removes it then).
    pin_dir = tempfile.TemporaryDirectory(prefix="cpgen_kernels_") if args.pin else None
    if pin_dir:
        args.db = pin_kernels(uris, pin_dir.name)
    tune_dir = tempfile.TemporaryDirectory(prefix="cpgen_kernels_tune_") if args.tune else None
    if tune_dir:
        try:
            args.db, seconds, command = tune(args.cpgen, configs, args.direction, args.tune, tune_dir.name)
        except (RuntimeError, OSError) as e:
            print(f"kernels.py: --tune: cpgen tune failed: {e}", file=sys.stderr)
            return 1
        print(f"# tuned in {seconds:.0f} s: {command}", flush=True)
        for cfg in configs:
            cfg["tuned"] = args.tune
    rows = []
    watchdog = Watchdog(args.stall_seconds, args.jsonl)
    for cfg in configs:
        watchdog.start(cfg)
        try:
            row = run_config(torch, cpgen, cfg, args)
        except Exception as e:  # one failed configuration must not lose the others
            row = dict(cfg, failed=f"{type(e).__name__}: {str(e).splitlines()[0][:120]}")
        rows.append(row)
        emit_row(row, args.jsonl)  # first: the probe below may end the run
        if args.markdown:  # after every row, so a run stopped by a time limit keeps its table
            with open(args.markdown, "w") as f:
                f.write(markdown(rows) + "\n")
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except Exception as e:  # a sticky CUDA error (an illegal address): every later row would fail
            watchdog.start(None)
            print(f"kernels.py: the CUDA context is unusable after {json.dumps(cfg, sort_keys=True)}: "
                  f"{str(e).splitlines()[0][:200]}; exiting", file=sys.stderr, flush=True)
            print(markdown(rows), flush=True)
            os._exit(5)  # interpreter shutdown could raise again in CUDA destructors
    watchdog.start(None)
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
