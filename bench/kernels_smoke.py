#!/usr/bin/env python3
"""A CPU rehearsal of bench/kernels.py (not a test of cpgen, and not part of the suite: it needs
PyTorch, which the GPU machines have and CI does not). It runs the benchmark's whole flow (inputs,
NaN poisoning, shards of a loopback ring and their gathering, the float64 row check, timing,
SDPA's backends, the JSON lines and the table) with PyTorch's CPU tensors, so that a mistake in
the script shows here instead of costing a GPU session's minutes.

What stands in for what:
  - tensors the script places on "cuda" are made on the CPU; CUDA events become wall-clock marks;
  - cpgen's launch (cpgen_ring_forward / _forward_all) becomes a float32 attention computed here,
    from each shard's global positions, and its backward (cpgen_ring_backward / _backward_all,
    --direction bwd) that attention's float32 autograd, while the problem, its validation and the
    shards' positions come from the real library (--lib), through the same ctypes calls;
  - SDPA's cuDNN and flash backends are what PyTorch has on the CPU (a refused backend gives the
    script's "n/a" note, which the check accepts).

  python3 bench/kernels_smoke.py --lib build/libcpgen.so

Exit 0 when the timing runs the implementations interleaved as documented, every configuration ran, its cpgen error is below the bf16/fp16 tolerance, and the
table has one row per configuration, when a launch that never returns (in a child process) is
ended by the benchmark's watchdog as documented, when a family pin takes the GPU's arch (a stand-in
sm_89's tiles at head dim 256), and when the failures the benchmark checks for
(a wrong output, a pin selection did not honour, a sticky CUDA error; each in a child process)
come out as documented; otherwise the first problem, and exit 1.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernels  # noqa: E402


def patch_torch(torch):
    """Send the script's "cuda" tensors to the CPU and time with the wall clock."""
    def on_cpu(fn):
        def call(*args, **kwargs):
            if kwargs.get("device") == "cuda":
                kwargs["device"] = "cpu"
            return fn(*args, **kwargs)
        return call

    for name in ("randn", "linspace", "full", "tensor", "arange", "Generator"):
        setattr(torch, name, on_cpu(getattr(torch, name)))

    class Event:
        def __init__(self, enable_timing=False):
            self.at = None

        def record(self):
            self.at = time.perf_counter()

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return (end.at - self.at) * 1e3

    torch.cuda.Event = Event
    torch.cuda.synchronize = lambda *a: None
    torch.cuda.empty_cache = lambda: None
    torch.cuda.is_available = lambda: True
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_name = lambda *a: "CPU stand-in"
    torch.backends.cudnn.version = lambda: None  # asks the (absent) devices otherwise
    torch.cuda.current_stream = lambda *a: types.SimpleNamespace(cuda_stream=0)


def attend(torch, q, k, v, q_pos, k_pos, causal):
    """float32 attention of q [b, hq, n, d] over k, v [b, hkv, m, d]: (out, natural-log lse)."""
    group = q.shape[1] // k.shape[1]
    kk = k.float().repeat_interleave(group, dim=1)
    vv = v.float().repeat_interleave(group, dim=1)
    s = q.float() @ kk.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
    return torch.softmax(s, dim=-1) @ vv, torch.logsumexp(s, dim=-1)


class StandIn(kernels.Cpgen):
    """The real library for problems and partitions; a float32 attention for the launches."""

    def __init__(self, path, torch):
        super().__init__(path)
        self.torch = torch
        real = self.lib
        rings = {}
        self.rings = rings
        stand_in = self

        class Lib:
            def __getattr__(self, name):
                return getattr(real, name)

            def cpgen_ring_kernel_uri(self, ring):
                return stand_in.kernel_uri(rings[ring]).encode()

            def cpgen_ring_config_reason(self, ring):
                return b"stand-in selection"

            def cpgen_ring_config_source(self, ring):
                return b"stand-in"

            def cpgen_ring_backward_kernel_uri(self, ring):
                return b"stand-in-backward"

            def cpgen_ring_synchronize(self, ring):
                return 0

            def cpgen_ring_destroy(self, ring):
                rings.pop(ring, None)

            def cpgen_device_arch(self, device, buf, size):
                buf.value = b"sm_90a"  # an H100's or H200's
                return 0

        self.lib = Lib()

    def kernel_uri(self, cfg):
        """What selection would run: the pinned cache entry of cfg when kernels.py wrote one (as
        cpgen's lookup takes it), else "stand-in"."""
        folder = os.environ.get("CPGEN_CACHES_DIR")
        path = os.path.join(folder, "0-pinned.json") if folder else None
        if path and os.path.exists(path):
            group = cfg["q_heads"] // cfg["kv_heads"]
            for e in json.load(open(path))["entries"]:
                w = e["workload"]
                if (w["dtype"], w["head_dim"], w["causal"], w["gqa_group"]) == (
                        cfg["dtype"], cfg["head_dim"], bool(cfg["causal"]), group):
                    return e["kernel"]
        return "stand-in"

    def ring(self, cfg, database):
        self.problem(cfg)  # the real validation
        handle = len(self.rings) + 1
        self.rings[handle] = cfg
        return handle

    def forward(self, ring, q, k, v, out, lse, stream):
        torch, cfg = self.torch, self.rings[ring]
        pos = torch.arange(q.shape[2])
        o, l = attend(torch, q, k, v, pos, pos, cfg["causal"])
        out.copy_(o.to(out.dtype))
        lse.copy_(l)

    def forward_all(self, ring, shards, stream):
        torch, cfg = self.torch, self.rings[ring]
        positions = [torch.tensor(p) for p in self.positions(cfg)]
        b, hkv, d = shards[0]["k"].shape[0], shards[0]["k"].shape[1], shards[0]["k"].shape[3]
        k = torch.empty(b, hkv, cfg["seq_len"], d, dtype=shards[0]["k"].dtype)
        v = torch.empty_like(k)
        for pos, shard in zip(positions, shards):
            k[:, :, pos] = shard["k"]
            v[:, :, pos] = shard["v"]
        every = torch.arange(cfg["seq_len"])
        for pos, shard in zip(positions, shards):
            o, l = attend(torch, shard["q"], k, v, pos, every, cfg["causal"])
            shard["out"].copy_(o.to(shard["out"].dtype))
            shard["lse"].copy_(l)


def attend_grads(torch, q, k, v, dout, q_pos, k_pos, causal):
    """float32 dq, dk, dv of attend's output for the upstream gradient dout (k, v: every key)."""
    leaves = [x.float().detach().requires_grad_() for x in (q, k, v)]
    out, _ = attend(torch, *leaves, q_pos, k_pos, causal)
    return torch.autograd.grad(out, leaves, dout.float())


def backward_stand_in(cls):
    """cls with backward and backward_all as float32 autograd of attend, over the whole sequence."""

    class WithBackward(cls):
        def backward(self, ring, t, stream):
            torch, cfg = self.torch, self.rings[ring]
            pos = torch.arange(t["q"].shape[2])
            for name, g in zip(("dq", "dk", "dv"), attend_grads(torch, t["q"], t["k"], t["v"], t["dout"], pos, pos,
                                                                 cfg["causal"])):
                t[name].copy_(g.to(t[name].dtype))

        def backward_all(self, ring, shards, stream):
            # The whole sequence's gradients, handed back to the shards: what the ring computes.
            torch, cfg = self.torch, self.rings[ring]
            positions = [torch.tensor(p) for p in self.positions(cfg)]
            full = {}
            for name in ("q", "k", "v", "dout"):
                x = shards[0][name]
                full[name] = torch.empty(x.shape[0], x.shape[1], cfg["seq_len"], x.shape[3], dtype=x.dtype)
                for pos, shard in zip(positions, shards):
                    full[name][:, :, pos] = shard[name]
            every = torch.arange(cfg["seq_len"])
            grads = attend_grads(torch, full["q"], full["k"], full["v"], full["dout"], every, every, cfg["causal"])
            for pos, shard in zip(positions, shards):
                for name, g in zip(("dq", "dk", "dv"), grads):
                    shard[name].copy_(g[:, :, pos].to(shard[name].dtype))

    return WithBackward


def stand_in_tune(lib, seen):
    """A stand-in for kernels.tune (cpgen tune needs a GPU): writes the shapes file as kernels.tune
    does, has the real command line read it (cpgen explain --shapes: the same parser as tune's), and
    returns a database path for the run. `seen` receives the shapes."""
    cli = os.path.join(os.path.dirname(os.path.abspath(lib)), "cpgen")

    def tune(cli_path, configs, direction, candidates, folder):
        if cli_path != cli:
            raise RuntimeError(f"tune ran {cli_path}, not the cpgen beside --lib ({cli})")
        shapes = os.path.join(folder, "tune-shapes.json")
        with open(shapes, "w") as f:
            json.dump(kernels.tune_shapes(configs), f)
        read = subprocess.run([cli, "explain", "--shapes", shapes, "--arch", "sm_90a", "--db",
                               os.path.join(folder, "absent.db"), "--json"], capture_output=True, text=True)
        if read.returncode != 0:
            raise RuntimeError(f"cpgen explain refused the shapes file: {read.stderr.strip()}")
        seen.append((json.load(open(shapes))["shapes"], direction, candidates))
        return os.path.join(folder, "tuned.db"), 0.0, "stand-in tune"

    return tune


def faulty_child(lib, jsonl, fault):
    """The benchmark with one of the failures its checks exist for, on its second configuration
    (of three): "stall" (a launch that never returns, as a hung kernel's synchronize would not),
    "wrong" (an output off by a little, and an LSE never written), "wrong-edge" (one row at a
    block's edge wrong, which only the block-edge rows of the check read), "wrong-row" (one head's
    row at a block's edge 6% off, which an error over all checked rows at once let pass), "wrong-bwd" (--direction bwd:
    dk off by a little), "unpinned" (selection runs
    another kernel than the pinned one), "fault" (a launch fails with a sticky CUDA error, after
    which the context is unusable)."""
    import torch
    patch_torch(torch)
    broken = {"context": False}

    class Faulty(backward_stand_in(StandIn)):
        def backward(self, ring, t, stream):
            super().backward(ring, t, stream)
            if t["q"].shape[2] == 256 and fault == "wrong-bwd":
                t["dk"].add_(0.1)

        def forward(self, ring, q, k, v, out, lse, stream):
            if q.shape[2] == 256 and fault == "stall":
                threading.Event().wait()
            super().forward(ring, q, k, v, out, lse, stream)
            if q.shape[2] != 256:
                return
            if fault == "wrong":
                out.add_(0.1)
                lse.fill_(float("nan"))
            if fault == "wrong-edge":
                out[:, :, 128].add_(0.5)  # the first row of a block, off the evenly spread rows
            if fault == "wrong-row":
                out[:, 1, 191].mul_(1.06)  # one head's row 6% off: 1/sqrt(rows) of that over all rows
            if fault == "fault":
                broken["context"] = True
                raise RuntimeError("cpgen ring_forward: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access")

        def kernel_uri(self, cfg):
            return "not-the-pin" if fault == "unpinned" and cfg["seq_len"] == 256 else super().kernel_uri(cfg)

    def synchronize(*a):
        if broken["context"]:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    torch.cuda.synchronize = synchronize
    kernels.Cpgen = lambda path: Faulty(path, torch)
    sys.argv = ["kernels.py", "--lib", lib, "--dtypes", "bf16", "--head-dims", "64", "--causal", "1", "--lengths",
                "128,256,512", "--gqa", "1", "--q-heads", "2", "--tokens", "512", "--warmup", "1", "--iters", "1",
                "--check-rows", "8", "--jsonl", jsonl, "--stall-seconds", "3" if fault == "stall" else "60"] + \
        (["--direction", "bwd"] if fault == "wrong-bwd" else ["--pin", "wgmma"])  # a pin is forward only
    return kernels.main()


def run_faulty(lib, folder, fault):
    """faulty_child in a process of its own: (the finished process, its JSON rows)."""
    jsonl = os.path.join(folder, f"{fault}.jsonl")
    child = subprocess.run([sys.executable, os.path.abspath(__file__), "--lib", lib, "--fault-child", fault, jsonl],
                           capture_output=True, text=True, timeout=300)
    return child, [json.loads(line) for line in open(jsonl)] if os.path.exists(jsonl) else []


def check_faults(lib, folder):
    """"" when each fault of faulty_child is reported as documented, else the problem."""
    for fault, code, count in (("stall", 4, 2), ("wrong", 0, 3), ("wrong-edge", 0, 3), ("wrong-row", 0, 3), ("wrong-bwd", 0, 3), ("unpinned", 0, 3),
                               ("fault", 5, 2)):
        child, rows = run_faulty(lib, folder, fault)
        if child.returncode != code or len(rows) != count:
            return f"{fault}: exit {child.returncode} with {len(rows)} rows, expected {code} and {count}: " \
                   f"{child.stderr[-300:]}"
        first, second = rows[0], rows[1]
        if "failed" in first or first.get("cpgen_check") != "ok":
            return f"{fault}: the healthy first row is not ok: {first}"
        if fault == "stall":
            if (not second.get("failed", "").startswith("stalled") or "stalled" not in child.stderr
                    or '"seq_len": 256' not in child.stderr):
                return f"stall: no stalled row naming the configuration: {second} {child.stderr[-300:]}"
        elif fault == "wrong":
            if second.get("cpgen_check") != "FAILED" or "CHECK FAILED" not in child.stdout or "wrong" not in child.stdout:
                return f"wrong: a wrong output was not marked: {second}"
        elif fault in ("wrong-edge", "wrong-row"):
            if second.get("cpgen_check") != "FAILED":
                return f"{fault}: a wrong row was not caught: {second}"
        elif fault == "wrong-bwd":
            if (second.get("cpgen_check") != "FAILED" or not second.get("cpgen_dk_error", 0) > 2e-2
                    or not second.get("cpgen_dq_error", 1) < 2e-2 or "dk error" not in child.stdout):
                return f"wrong-bwd: a wrong dk was not marked (dq and dv right): {second}"
        elif fault == "unpinned":
            if "pin not honoured" not in second.get("failed", "") or "cudnn_note" not in second:
                return f"unpinned: an unhonoured pin was not a failure with the peers still run: {second}"
        elif "ILLEGAL_ADDRESS" not in second.get("failed", "") or "context is unusable" not in child.stderr:
            return f"fault: the faulting row or the reason is missing: {second} {child.stderr[-300:]}"
    return ""


def check_interleaving(torch):
    """"" when kernels.time_interleaved runs its callables as documented (each one's warm-ups,
    then rounds of one run of each in turn; a callable that raises leaves the rotation with its
    exception as its entry), else the problem."""
    calls = []

    def fn(name, fail_at=None):
        def run():
            calls.append(name)
            if fail_at is not None and calls.count(name) == fail_at:
                raise RuntimeError(f"{name} failed")
        return run

    times = kernels.time_interleaved(torch, {"a": fn("a"), "b": fn("b", fail_at=3), "c": fn("c")}, 1, 3)
    expected = ["a", "b", "c", "a", "b", "c", "a", "b", "c", "a", "c"]
    if calls != expected:
        return f"order {calls}, expected {expected}"
    if not isinstance(times["b"], RuntimeError) or len(times) != 3:
        return f"the failing callable's entry is {times.get('b')!r}"
    if any(not (t[1] <= t[0] <= t[2]) for name, t in times.items() if name != "b"):
        return f"median outside its spread: {times}"
    return ""


def check_arch_pin(lib, torch, folder):
    """"" when a family pin takes the GPU's arch, as cpgen_device_arch names it: on a stand-in
    sm_89 (99 KB of shared memory), --pin mma.sync at head dim 256 runs the tiles that fit it
    (block_n 32), not the documented ones; else the problem."""
    class On89(backward_stand_in(StandIn)):
        def __init__(self, path, torch):
            super().__init__(path, torch)
            inner = self.lib

            class Lib:
                def __getattr__(self, name):
                    return getattr(inner, name)

                def cpgen_device_arch(self, device, buf, size):
                    buf.value = b"sm_89"
                    return 0

            self.lib = Lib()

    jsonl = os.path.join(folder, "arch.jsonl")
    kernels.Cpgen = lambda path: On89(path, torch)
    sys.argv = ["kernels.py", "--lib", lib, "--dtypes", "bf16", "--head-dims", "256", "--causal", "1", "--lengths",
                "256", "--gqa", "1", "--q-heads", "2", "--tokens", "256", "--warmup", "1", "--iters", "1",
                "--check-rows", "8", "--jsonl", jsonl, "--pin", "mma.sync"]
    code = kernels.main()
    rows = [json.loads(line) for line in open(jsonl)] if os.path.exists(jsonl) else []
    want = "ring_fwd_bf16_hd256_causal_gqa1_bm64_bn32_w4_s2"
    if code != 0 or len(rows) != 1 or rows[0].get("cpgen_uri") != want or "failed" in rows[0]:
        return f"exit {code}, rows {rows}: expected one row running {want}"
    return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True, help="path of libcpgen.so (its CPU entry points are used)")
    ap.add_argument("--fault-child", nargs=2, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.fault_child:
        return faulty_child(args.lib, args.fault_child[1], args.fault_child[0])
    import torch
    patch_torch(torch)
    kernels.Cpgen = lambda path: backward_stand_in(StandIn)(path, torch)
    problem = check_interleaving(torch)
    if problem:
        print(f"kernels_smoke: time_interleaved: {problem}", file=sys.stderr)
        return 1

    keep = tempfile.TemporaryDirectory(prefix="cpgen_kernels_smoke_")  # removed at exit
    folder = keep.name
    runs = [
        ["--ranks", "1,4", "--scheme", "zigzag"],
        ["--ranks", "2", "--scheme", "striped", "--pin", "wgmma-pingpong"],
        ["--ranks", "1", "--pin", "ring_fwd_wgmma_{dtype}_hd{head_dim}_{mask}_gqa{group}_bm128_bn64_c2_s3"],
        ["--ranks", "1", "--pin", "wgmma-persistent"],
        ["--ranks", "1,4", "--scheme", "zigzag", "--direction", "bwd"],
        ["--ranks", "1,4", "--scheme", "zigzag", "--tune", "3"],
    ]
    tuned = []
    kernels.tune = stand_in_tune(args.lib, tuned)
    for n, extra in enumerate(runs):
        jsonl, table = os.path.join(folder, f"{n}.jsonl"), os.path.join(folder, f"{n}.md")
        sys.argv = ["kernels.py", "--lib", args.lib, "--dtypes", "bf16,fp16", "--head-dims", "64", "--causal", "0,1",
                    "--lengths", "256", "--gqa", "1,4", "--q-heads", "4", "--tokens", "512", "--warmup", "1",
                    "--iters", "2", "--check-rows", "16", "--jsonl", jsonl, "--markdown", table] + extra
        code = kernels.main()
        rows = [json.loads(line) for line in open(jsonl)]
        ranks = [int(r) for r in extra[1].split(",")]
        expected = 2 * 2 * 2 * len(ranks)  # dtypes x causal x gqa x ranks
        problems = []
        if code != 0:
            problems.append(f"exit {code}")
        if len(rows) != expected:
            problems.append(f"{len(rows)} rows, expected {expected}")
        for r in rows:
            if "failed" in r:
                problems.append(f"failed: {r['failed']}")
            elif not r["cpgen_error"] < 2e-2 or r.get("cpgen_check") != "ok":
                problems.append(f"cpgen error {r['cpgen_error']} (lse {r.get('cpgen_lse_error')}) on {r}")
            elif "--direction" in extra and not (r.get("direction") == "bwd" and
                                                 all(r.get(f"cpgen_{g}_error", 1) < 2e-2 for g in ("dq", "dk", "dv"))
                                                 and r.get("cpgen_backward_uri") == "stand-in-backward"):
                problems.append(f"a backward row without its gradients' errors or kernel: {r}")
            elif not r["cpgen_min_ms"] <= r["cpgen_ms"] <= r["cpgen_max_ms"]:
                problems.append(f"timing spread out of order on {r}")
            for peer in ("cudnn", "flash"):
                if f"{peer}_ms" not in r and not r.get(f"{peer}_note", "").startswith("n/a"):
                    problems.append(f"{peer}: neither timed nor noted: {r}")
                if f"{peer}_ms" in r and r.get(f"{peer}_check") != "ok":
                    problems.append(f"{peer}: timed, but its check is {r.get(f'{peer}_check')}: {r}")
                if f"{peer}_ms" in r and "--direction" in extra and not r.get(f"{peer}_dk_error", 1) < 2e-2:
                    problems.append(f"{peer}: a backward row without its dk error: {r}")
        table_rows = [line for line in open(table) if line.startswith("| ") and not line.startswith("| dtype")]
        if len(table_rows) != expected:
            problems.append(f"table has {len(table_rows)} rows, expected {expected}")
        if "--direction" in extra and not all(" | bwd | " in line and "stand-in-backward" in line for line in table_rows):
            problems.append(f"backward rows without their dir and kernel cells: {table_rows[:1]}")
        if "--tune" in extra:
            # One tune over every distinct problem (the 16 configurations' 16), forward, 3 candidates.
            if len(tuned) != 1 or len(tuned[0][0]) != expected or tuned[0][1:] != ("fwd", 3):
                problems.append(f"the tune was not one call over the {expected} problems: {tuned}")
            elif any(r.get("tuned") != 3 for r in rows):
                problems.append(f"rows without tuned 3: {rows[0]}")
            elif sorted(s["cp_size"] for s in tuned[0][0]).count(4) != expected // 2:
                problems.append(f"the ring problems' cp_size is not their ranks: {tuned[0][0]}")
        if problems:
            print(f"kernels_smoke: run {n} ({' '.join(extra)}): {problems[0]}", file=sys.stderr)
            return 1
        print(f"kernels_smoke: run {n} ({' '.join(extra)}): {len(rows)} configurations ok", file=sys.stderr)
    problem = check_arch_pin(args.lib, torch, folder)
    if problem:
        print(f"kernels_smoke: a family pin on the GPU's arch: {problem}", file=sys.stderr)
        return 1
    print("kernels_smoke: --pin mma.sync on a stand-in sm_89 runs the tiles that fit it", file=sys.stderr)
    problem = check_faults(args.lib, folder)
    if problem:
        print(f"kernels_smoke: a faulty configuration: {problem}", file=sys.stderr)
        return 1
    print("kernels_smoke: a stalled configuration ends the run with status 4 and a stalled row, a wrong output "
          "or gradient is CHECK FAILED, an unhonoured pin a failed row with its peers timed, a sticky CUDA error ends the "
          "run with status 5 after its row", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
