#!/usr/bin/env bash
# The GPU session's driver: builds cpgen in its own build folder and runs the phases of issue 14
# on the machine's GPU, writing a report bench/results/<date>-<gpu>-gpu-check.md with every
# command it ran. The report is rewritten after every phase (and copied to $OUT with a tarball
# of the logs when the device tool runs it), so a call cut off by its time limit still brings
# back every phase that finished.
#
#   tools/gpu-check.sh [--only P,P..] [--skip P,P..] [--budget SECONDS] [--deps DIR]
#                      [--build-dir DIR] [--report FILE] [--kernels-args "..."] [--full-matrix]
#                      [--cpu-tests] [--tune-candidates N] [--tune-only fwd|bwd] [--list-cpu-only]
#                      [--ab REV[,REV...]] [--ring-tune]
#
# Phases, in this order (default: all of them; --only takes them in the order it names them):
#   build     configure and build (incremental: a warm machine keeps build-gpu/)
#   tests     the test suite but the tests named *Nccl* or *OnGpu* and the CPU-only families
#             (CPU_ONLY_TESTS below; --cpu-tests keeps them, --list-cpu-only prints the pattern),
#             the GPU tests live (ctest -j 8)
#   nccl      the tests named *Nccl* (the multi-process ones among them), one at a time: they
#             share the GPU and the loopback interface
#   ongpu     the tests named *OnGpu* (tuning on the GPU, whose time limit is the issue's target;
#             about 110 s), one at a time; apart from nccl so that a call can put them last
#   sanitize  tools/gpu-sanitize.sh: compute-sanitizer memcheck, racecheck, synccheck, initcheck
#   kernels   bench/kernels.py: cpgen's selected kernel against SDPA cuDNN and flash
#   wgmma     bench/kernels.py --pin on the sm_90a wgmma family (GQA 1 unless --kernels-args says
#             otherwise) and on the mma.sync family's default tiles (--pin mma.sync: on sm_90a the
#             selected kernel is the wgmma one where a GPU measured it faster), joined for the
#             family ratio; then the persistent launch and the ping-pong variant at head dim 128
#             (unless --kernels-args says otherwise), each joined with the plain family's rows
#   ncu       Nsight Compute on one forward launch of each family and of the wgmma persistent
#             and ping-pong variants (bf16, head dim 128, causal, 16K): speed of light,
#             occupancy, launch statistics, warp stalls, compute and memory workload, source
#             counters; the text and each kernel's hotspots (tools/ncu-metrics.py --hotspots) go
#             in the report, the .ncu-rep files to $OUT
#   ring      bench/ring_overhead.sh: the loopback ring against one attention of the same work
#             (--ring-tune: each row's ring and single attention tuned first, forward only,
#             --tune-candidates per workload, and run with their winners; not with --ab);
#             then bench/kernels.py --ranks 1,2,4,8: the ring against SDPA on the full sequence
#   tune      cpgen tune on examples/shapes/*.json (--tune-candidates per workload, default 24: the
#             full search took 48.7 s for one shape's forward on the first H100; --tune-only fwd
#             or bwd: one direction) into a fresh database, exported as the cache
#             <gpu>-examples.json (copied to $OUT)
# A phase that needs binaries builds first when the build phase did not run in this call.
#
# --ab REV[,REV...]: a same-call A/B of template changes. For each REV, in the order given, the
# wgmma phase also times the plain and the persistent launch compiled from REV's templates
# (tools/templates-at.sh, handed to bench/kernels.py --templates) and joins this tree's rows with
# them; then one table puts every REV and this tree side by side (bench/compare_rows.py --many),
# with each column's mean ratio to cuDNN, so that one call bisects a stack of changes. The ring
# phase runs its target row (N=8) alone on this tree and then on each REV's templates while the
# budget lasts (the other five rows need a call without --ab). Each side is its own kernels.py
# process with its own SDPA timings, so the vs-cuDNN columns are the comparison. A REV whose params*.cuh differ from this tree's is refused before anything runs (the
# host passes this tree's parameters). The kernels of a REV compile on the machine unless the pack
# holds them (tools/pack-gpu-deps.sh with AB_REV= the same list). Each REV adds about 30 s to the
# wgmma phase (two runs of 8 configurations, 14 s each on the 2026-11-28 H200) and about 30 s to
# the ring phase.
#
# --budget SECONDS: the time this call may take (default 570 under the device tool, which stops
# a command at 600; no limit elsewhere). A phase that cannot start with enough of it left is
# skipped and the report says so; a running phase is stopped (timeout) 20 s before the end so
# the report still gets written. --kernels-args passes options to both kernel benchmarks
# (default: the issue's whole matrix; e.g. "--head-dims 128 --lengths 8192,16384").
# --full-matrix sets CPGEN_FULL_COMPILE_MATRIX=1 for the tests and keeps the CPU-only ones: the
# full NVRTC compile matrix is a CPU check that CPU sessions run, so a device call does not spend
# its minutes on it by default.
#
# Recommended device session. A task lent a GPU has 15 minutes of device time in all, a machine's
# start and its idle time counted in, 10 minutes per call, and no machine starts with under 4
# minutes left. Measured (bench/results/2026-11-26-* on an H100, 2026-11-27-* on an H200): a start
# and the transfers 30-40 s, build 80-101 s, tests 134-182 s (every GPU test running), wgmma
# 59 s for 32 configurations, ncu 40 s for three profiles (now four), memcheck over the step and ring
# tests 202 s, ongpu 112 s (forward tune 20 s, backward 92 s), the 2-process NCCL ring 22 s. A
# warm machine waits 30 s for the next call. Since then (unmeasured on a GPU): the tests phase
# leaves out the CPU-only families (about half its test-seconds), and the kernels come compiled
# (.gpudeps/kernels.tar.xz, 628 sm_90a kernels: every default and the tune candidates of
# examples/shapes), so the tests, benchmarks and tune phases wait for NVRTC only where a kernel
# is missing (the report's kernel store line counts them). So: one call of up to 600 s with the
# phases in the order they matter (the budget skips, and the report names, what does not fit),
# then at once, on the warm machine (its build-gpu/ stays), a shorter one with what is left:
#   tools/pack-gpu-deps.sh   (here, about 5 minutes on 2 cores: the -dev packages, ../shared/vectors
#                            and the kernels, 21 MB compressed; again after any template change)
#   run(command="tools/gpu-check.sh --budget 520 --only ...", carry=[".gpudeps"], timeout_s=570)
#   run(command="tools/gpu-check.sh --budget 240 --only ...", carry=[".gpudeps"], timeout_s=250)
#   give_back()
# Last report: bench/results/2026-11-28-NVIDIA-H200-gpu-check.md (tree fc6ac0a): 733 GPU-run
# tests and 27 of 28 NCCL tests passed (the 4-process ring, watchdog, backward, graph replay and
# tune broadcast among them; the one failure a test bug, fixed), sanitizers clean on the
# ping-pong and persistent tests, the forward tune of examples/shapes done. Since then the
# kernels changed: the wgmma consumer's loop order of 6bd0c35 is back (4e918ba's was 3-7% slower
# on the H200), the family takes GQA 16, and on sm_90a the wgmma default now answers five more
# combinations and leads the tuner's search. So, next: the tests and the wgmma phase (plain
# wgmma/cuDNN should return to 6bd0c35's 0.93-0.99; persistent was 0.97-1.00 with the slower
# order), then the forward tune again, whose export, made on the tree that ships it, goes to
# caches/<gpu>-examples.json (a cache entry is used only while its kernel's code is unchanged).
# Back on the CPU machine, `cpgen explain --shapes examples/shapes/F.json --gpu 'NVIDIA H200' --arch
# sm_90a --sm-count 132` (the report's GPU name and SM count) should then say pretuned-exact for
# every forward step of every examples shape; a cache of this kind in caches/ was rehearsed with
# the whole suite on 2026-11-30 (nothing in it assumes caches/ holds only default-heuristic.json).
# Also since (CPU only): `cpgen bench` times each of the ring's launches alone, so the ring
# phase's table splits the overhead into what the per-step kernels cost over one kernel (steps
# alone / single) and what running the ranks together costs (ring / steps alone); and
# CliBench.SmallLoopbackRunReportsAndChecks no longer expects the mma.sync kernel's name, which
# b974b28's defaults would have failed on sm_90a; an NCCL ring runs a persistent winner as its
# plain launch, NCCL's stream at the greatest priority (8973579: the NCCL tests exercise it).
# Then (2026-11-28, CPU only, unmeasured) four kernel changes aimed at speed: both families start
# a block from its running state instead of merging at the end (the ring's per-step tail), the
# running max lags by up to 8 so the O rescale is skipped on almost every tile, the wgmma
# descriptors advance by one add per k-step, and a row's tile max and sum run as four chains
# instead of one. --ab with four commits times them one by one in the same call: e59b2ca (before
# all four), 3360f1e (the wgmma state start), 957337c (the lagging max; its parent also holds the
# mma.sync state start, which only the mma.sync kernels use), 0432e3b (the descriptor advance);
# the tree adds the four chains. The wgmma phase's A/B table sets their ratios to cuDNN side by
# side, the ring phase runs its target row on each while the budget lasts (e59b2ca first), and
# .gpudeps packed with AB_REV=e59b2ca,3360f1e,957337c,0432e3b holds their kernels (6.5 minutes
# here on 2026-11-28, 705 kernels):
#   run(command="tools/gpu-check.sh --budget 520 --only build,tests,wgmma,ring
#       --ab e59b2ca,3360f1e,957337c,0432e3b
#       --kernels-args '--dtypes bf16,fp16 --head-dims 128 --lengths 8192,16384 --gqa 1'",
#       carry=[".gpudeps"], timeout_s=570)
# Since that plan (2026-11-28, CPU only): the persistent launch takes its blocks from a work
# counter instead of a fixed stride (a model put the fixed stride's end 2-3% after an even split
# at 8K/16K causal, 11% at a 4K ring step; bench/persistent_schedule_model.py), with a scheduler
# thread and a 32/232 register plan. The plain and ping-pong kernels' SASS is unchanged (checked
# against 0432e3b's templates), so the plain table still isolates the four changes; the
# persistent table's tree column adds the counter, and the commits' persistent kernels keep their
# fixed stride (the generated entry calls their one-argument step). Their ratio of ratios, tree
# over 0432e3b persistent against the same for plain, is the counter's share.
# Keep each change whose column moves the mean ratio up past the noise (cuDNN's own TFLOP/s for
# one configuration moved by up to 2% between the wgmma-family runs of the 2026-11-28 H200 call,
# by 4% beside its mma.sync run), revert the rest (one commit each), pack again, and only then
# tune for the cache to ship (--only tune --tune-only fwd): a cache entry counts only while its
# kernel's code (rendered source and included templates) is what it was timed on, and a workload
# whose winner changed answers from none of its entries.
# then the ring phase with --ring-tune (the loopback ring's overhead was +11.3% at N=8 with the
# untuned mma.sync kernel, which GQA 4 no longer selects on sm_90a; tuned, each step type runs
# its own winner, e.g. a persistent launch for the short steps; --only ring --ring-tune, about
# 30 s of tuning for the target row), the wider matrix (head dims 64 and 256, 4K and 32K,
# GQA 4, 8 and 16), the tuned figure against cuDNN (--only kernels --kernels-args '--tune 24
# --dtypes bf16,fp16 --head-dims 128 --lengths 8192,16384 --gqa 1': each configuration's winner
# of 24 candidates, as a user who tunes would run it; issue 13's target is about cpgen against
# cuDNN, and cuDNN picks its own kernels), the backward against SDPA's (--only kernels --kernels-args '--direction bwd
# --head-dims 128 --lengths 8192,16384': cpgen's backward ring of one rank against
# torch.autograd.grad of each backend, never timed on a GPU yet) and memcheck over the step and
# ring tests (202 s). The report, the logs'
# tarball (tables and jsonl inside), the ncu profiles and the exported cache come back under
# files_at; tools/ncu-metrics.py reads the profiles on a machine without ncu.
# Since (stop 39, 2026-11-28, CPU only, unmeasured): kernel store keys and tuning records follow
# each kernel's own code (its source and the templates it includes), so pack again whatever the
# state of .gpudeps (every store key changed; a fresh checkout has none anyway). The tuner checks
# candidates on the GPU (tuner/gpu_compare.h: no 268 MB download and CPU compare per candidate at
# 32K) and stops one at its checked launch only when a second launch confirms it; the tune phase's
# "seconds:" lines show where each workload's time goes now. RingOptions::sm_margin /
# CPGEN_SM_MARGIN: a persistent step beside NCCL on all SMs but the margin (GPU test in the tests
# phase: GpuRingWgmma.PersistentLoopbackOnMoreQueryBlocksThanTheGpuHasSms, margin 96; also
# GpuCompare.OnAGpuItFindsTheFirstDisagreementOfEach). With 15 minutes of device time in all, one
# full call is what a session gets. A rehearsal of this script on the CPU with stand-ins (stop 42:
# build 95 s, tests 150 s, 1.75 s per benchmark configuration, 25 s per tune file, 30 s per ring
# row) put the wgmma phase with four --ab commits at 170 s and showed that build,tests,wgmma,tune,
# ring does not fit 540 s: the tune's last file was cut and the ring skipped. So the A/B call
# leaves the tune out (its cache is shipped only after the keep-or-revert anyway):
#   run(command="tools/gpu-check.sh --budget 540 --only build,tests,wgmma,ring
#       --ab e59b2ca,3360f1e,957337c,0432e3b
#       --kernels-args '--dtypes bf16,fp16 --head-dims 128 --lengths 8192,16384 --gqa 1'",
#       carry=[".gpudeps"], timeout_s=580)
# then, on the warm machine if device time is left, `--budget 200 --only tune --tune-only fwd`
# (the tune-time target and its per-workload seconds; a tune file no longer starts with under
# 60 s left), and give_back; the report names what the budget skipped.
# Since (stop 40, 2026-11-29, CPU only, unmeasured): the backward tune checks candidates on the GPU
# too (GpuCompare::run_gradient; GPU test GpuCompare.OnAGpuTheGradientCheckFindsTheFirstDisagreement,
# and the tests phase's GpuBwdTimer cases run it); the wgmma family has three-consumer candidates
# (bm192, _c3: FlashAttention-3's head dim 64 split), searched after two consumers and before one,
# so the forward tune of examples/shapes times them on encoder-hd64-32k-cp4 (video-dit-full-cp8)
# and the hd128 workloads' 64-key tiles: its winners say whether three consumers pay; likewise
# 80-key tiles at head dim 256 (FlashAttention-3's tile there) on gemma-2b-mqa-32k-cp4
# (gqa-heavy). Pack again (new candidates). To see them against cuDNN, one more --kernels-args run with --head-dims 64 and
# --pin 'ring_fwd_wgmma_{dtype}_hd{head_dim}_{mask}_gqa{group}_bm192_bn128_c3_s2'.
# Stop 41 (2026-11-29, CPU only) changed no template, but the kernel store's entry format (3: the
# checksum covers the metadata too), so a .gpudeps packed before it holds entries that read as
# absent: the one it left in the checkout was packed at 064df36 (.gpudeps/KERNELS says so) with the
# AB_REV list above and serves as long as `git diff 064df36 -- templates runtime/jit/kernel_store.cpp`
# touches no template a step kernel includes; pack again otherwise. Stop 42 changed only
# templates/compare.cuh (the tuner's check kernel, compiled on the GPU in about a second): on the
# unpacked pack `cpgen compile --defaults --arch sm_90a --store DIR` still found all 416 defaults.
# Stop 44 (2026-11-29, CPU only) changed the wgmma consumers' loop counter (e003c82: the hd128
# causal softcap kernels no longer spill; the other kernels' SASS moves by a few integer ops), so
# the tree's plain, ping-pong and persistent columns of the A/B hold that beside the four chains;
# every wgmma store key changed, and .gpudeps was packed again at 3fba19c with the same AB_REV. The
# backward tune checks each candidate of an accumulating step type on that path too (4eb35e2; the
# tests phase's GpuBackwardTimer case runs it in its q-half workload). The plan above stands.
#
# Stop 45 (2026-11-29, CPU only) changed no template: the pack of 3fba19c stays valid. It changed
# how libcpgen's and cpgen's RUNPATH are made (built with the install RUNPATH, which names the
# folders of CUDA, NVRTC, NCCL and the carried SQLite; 948ab75, e3e1235): a build phase that
# cannot load libcpgen names the library it missed. RingAttention::nccl splits the communicator
# before its set-up (0dfdd3b): the tests phase's NcclRing.* run that first. The plan stands.
#
# Stop 46 (2026-11-29, CPU only) changed no template either (the pack of 3fba19c stays valid).
# What the next call meets first: the GPU's StepKernel and BackwardKernels check each launch's
# mask tables and softcap against the kernel (gpu::check_launch_matches_spec, launch_grid.h; a
# mismatch is a one-line internal error instead of a null read), and the backward ring passes the
# tables only to _ivl kernels now (they were passed to every backward kernel, which ignored
# them); a causal problem's window_right alone selects the plain causal kernels; libcpgen links
# with cmake/libcpgen.map (only cpgen's names exported), so a build phase that fails to link or
# load names a symbol the script hid. The plan stands.
#
# Stop 47 (2026-11-29, CPU only) changed no template (the pack of 3fba19c stays valid: its keys
# were checked against this tree's). What the next call meets: the kernel store loads only entries
# this user or root owns that no one else may write (the pack is root's, 0644; pack-gpu-deps now
# says so in the tarball); a failed NVRTC compile's message is one line, its whole log in the
# folder it names, which this script copies into the logs (failed-compiles/); kernel selection
# reads the tuning database in one snapshot and goes on without it, warned, where a row is
# damaged; a tune's records name the environment of the rank's own device, and a multi-rank re-tune
# keeps a faster earlier pin; an NCCL rank's failed call records its completion event;
# cpgen_ring_forward_all/backward_all refuse an NCCL ring before reading their arrays; compile
# --spec of a kernel the arch cannot run exits 2. The plan stands.
#
# Stop 48 (2026-11-29, CPU only) changed no template. This script: a benchmark run that fails
# (FAILED, STOPPED, STALLED, CUDA FAULT, a failed or wrong configuration) fails the call, as a
# failed test does (the kernels, wgmma and ring phases returned 0 whatever their runs did); the
# report and the logs' tarball are written after every benchmark run and tune file, not only
# between phases, so a call ended from outside still brings back what finished; with --ab the
# wgmma phase leaves out the mma.sync and ping-pong runs (both timed on 2026-11-28) for the
# A/B's. The pack (packed again at this stop with the same AB_REV) holds the three backward
# kernels each commit's ring target row also times, and the commits' templates in
# .gpudeps/templates-ab/, which tools/templates-at.sh takes where the machine's copy of the tree
# has no git history. Budgets: the device tool runs a command under the smaller of timeout_s and
# the device time left, so read `status`'s budget_left_s before each call: the first call's
# --budget at most budget_left_s less about 90 s (the machine's start and the transfers), the
# second's budget_left_s less 40, each with timeout_s its budget plus 20. Also unrun on a GPU:
# `cpgen verify --backend gpu` now runs a --shape's mask and layout (they were dropped) and names
# each step's kernels; its NCCL rank splits the expected tensors by document; zigzag half steps of
# problems with documents are keyed (tuned, selected) at the full size the ring runs them. The
# plan stands.
#
# Stop 49 (2026-11-29, CPU only) changed no template or emulator file (the pack of d12b836 stays
# valid; `git diff 6c0f5a6 -- templates emulation` is empty). What the next call meets: the ring
# positions are listed in one pass (partition_positions_all) and plan counts masked shapes in
# O(seq_len + cp_size^2); an NCCL communicator made by cpgen leaves the caller's CUDA context
# current (the nccl phase's NcclRing.* and the tune's rank group set their own); bench_loopback
# refuses masked shapes (the ring phase's shapes are plain); db import refuses fields an export
# never writes, so the tune phase's exported cache must come from this tree's `db export` (it
# does); compile --emit-source writes one self-contained file. The plan stands.
# Stop 50 (2026-11-29, CPU only) changed templates: the softcap's tanh (forward, both families)
# and the backward's slope 1 - t^2 come from one ex2 and one rcp (softmax.cuh tanh_and_slope)
# instead of tanh.approx, after the emulator's new --approx edges of the PTX ISA's bounds showed
# tanh.approx's 2^-11 putting lse at 1.1-2.9 bf16 and 9-23 fp16 units of the test limit at caps
# of 30-50 over logits of that size, and fp16 gradients at 3.2 at cap 0.25. Unmasked kernels' PTX
# is identical to 69f9962's (checked: wgmma persistent, mma.sync forward, backward), so the A/B
# plan stands; every store key follows its templates, so pack again (a fresh checkout has no
# .gpudeps anyway). Unmeasured on a GPU: the softcap kernels issue one more MUFU operation a
# score (forward 3 for 2, backward 3 for 2; PTX of the hd128 fp16 backward default: 64 ex2 and 32
# rcp for 32 tanh and 32 ex2), no spills; registers of the hd128 backward 199 -> 225 (one CTA an
# SM either way), forward defaults within 6 of before. The tests phase's softcap cases check them,
# and GpuApprox.ResultsStayWithinTheIsasBounds checks ex2/rcp against the bounds the emulator
# models and prints how much of its 2^-11 the hardware's tanh.approx uses (the tests section of
# the report quotes that line from ctest's LastTest.log). The cost, by hand if a call has a
# minute left (cpgen bench now takes softcap=C; 69f9962's templates issue tanh.approx):
#   S=q_heads=32,kv_heads=8,head_dim=128,seq_len=16384,dtype=bf16,causal=1
#   build-gpu/cpgen bench --shape $S --ranks 1 --json                # no cap
#   build-gpu/cpgen bench --shape $S,softcap=30 --ranks 1 --json     # ex2 and rcp
#   CPGEN_TEMPLATES_DIR=$(tools/templates-at.sh 69f9962 /tmp/t69) \
#     build-gpu/cpgen bench --shape $S,softcap=30 --ranks 1 --json   # tanh.approx
# (single_ms and backward_ms of each; the three back to back on the warm machine.)
#
# The GPU machines have nvcc, CMake, PyTorch and the nvidia-nccl Python package but maybe none of
# the Debian -dev packages, and no network. Choice: vendor nothing in the repository; use what the
# machine has, and where a -dev package is missing use a carried prefix made on the dev machine by
# tools/pack-gpu-deps.sh (.gpudeps/: nlohmann-json, CLI11, GoogleTest, SQLite header and library,
# about 5 MB; 21 MB in all with the vectors and the kernels below). With no GoogleTest anywhere
# the library, the CLI and the benchmarks are still built and run and the report says the tests
# were skipped; a missing nlohmann-json, CLI11 or SQLite header (neither here nor carried) stops
# the build, and the report names what is missing.
# NCCL comes from the nvidia-nccl Python package (cmake/FindNCCL.cmake finds it). The tests
# always read the in-repo vectors (tests/data/vectors); an independent set is added from
# $CPGEN_VECTORS_DIR, else ../shared/vectors, else shared/vectors or .vectors in the checkout,
# else the set tools/pack-gpu-deps.sh packed into the carried prefix (unpacked into build-gpu/).
set -uo pipefail
# A Python process that dies in native code (the first H100 call: "free(): invalid pointer", and
# nothing else) prints where it was, and what it printed before is not lost in a buffer.
export PYTHONFAULTHANDLER=1 PYTHONUNBUFFERED=1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build-gpu
DEPS=""
REPORT=""
BUDGET=""
KERNELS_ARGS=""
FULL_MATRIX=0
TUNE_CANDIDATES=24
TUNE_ONLY=""
AB_REVS=()  # --ab, in the order given
RING_TUNE=0  # --ring-tune
AB_DIRS=()  # their templates, made before the first phase
# The test families that never touch a GPU and cost the most CPU time (the NVRTC compile matrices
# and SASS checks, the emulator's runs, the large planning and clone checks: about 510 of the 1065
# test-seconds of the H200's tests phase on 2026-11-27). Every CPU session and CI run them; the
# tests phase leaves them out unless --cpu-tests (or --full-matrix) asks for them.
# tests/tools/gpu_check_test.cpp checks that no test of a file that asks for a GPU matches.
CPU_ONLY_TESTS='Emulated|CompileMatrix|StepFwdWgmmaCompile|CliCompile|CmdCompileSass|HostJit|CmdPlanScale|^Clone\.|^Jit\.|CmdVerify\.PassesOnEveryFormat2'
CPU_TESTS=0
ALL_PHASES=(build tests nccl ongpu sanitize kernels wgmma ncu ring tune)
ONLY=""
SKIP=""
usage_error() { echo "gpu-check: $* (see --help)" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --only) ONLY=${2:-}; shift 2 ;;
    --skip) SKIP="$SKIP,${2:-}"; shift 2 ;;
    --skip-tests) SKIP="$SKIP,tests,nccl,ongpu"; shift ;;  # the options of the first version
    --skip-bench) SKIP="$SKIP,ring"; shift ;;
    --skip-sanitize) SKIP="$SKIP,sanitize"; shift ;;
    --budget) BUDGET=${2:-}; shift 2 ;;
    --deps) [ -d "${2:-}" ] || usage_error "--deps '${2:-}' is not a folder"; DEPS=$(cd "$2" && pwd); shift 2 ;;
    --build-dir) BUILD=${2:-}; shift 2 ;;
    --report) REPORT=${2:-}; shift 2 ;;
    --kernels-args) KERNELS_ARGS=${2:-}; shift 2 ;;
    --tune-candidates) TUNE_CANDIDATES=${2:-}; shift 2 ;;
    --tune-only) TUNE_ONLY=${2:-}; shift 2 ;;
    --full-matrix) FULL_MATRIX=1; CPU_TESTS=1; shift ;;
    --cpu-tests) CPU_TESTS=1; shift ;;
    --list-cpu-only) echo "$CPU_ONLY_TESTS"; exit 0 ;;
    --ab) IFS=, read -r -a AB_REVS <<<"${2:-}"; [ -n "${2:-}" ] || usage_error "--ab needs a commit"; shift 2 ;;
    --ring-tune) RING_TUNE=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
for p in ${ONLY//,/ } ${SKIP//,/ }; do
  [[ " ${ALL_PHASES[*]} " == *" $p "* ]] || usage_error "unknown phase '$p': the phases are ${ALL_PHASES[*]}"
done
[[ -z "$BUDGET" || "$BUDGET" =~ ^[0-9]+$ ]] || usage_error "--budget '$BUDGET': a whole number of seconds"
[[ "$TUNE_CANDIDATES" =~ ^[0-9]+$ ]] ||
  usage_error "--tune-candidates '$TUNE_CANDIDATES': a whole number of candidates per workload (0: all)"
[[ -z "$TUNE_ONLY" || "$TUNE_ONLY" == fwd || "$TUNE_ONLY" == bwd ]] ||
  usage_error "--tune-only '$TUNE_ONLY': fwd or bwd (default: both directions)"
# A tuned record counts only under the templates it was timed with, so the commits' rows of --ab
# would run defaults against this tree's winners.
[ "$RING_TUNE" = 1 ] && [ ${#AB_REVS[@]} -gt 0 ] &&
  usage_error "--ring-tune with --ab: the commits' templates would run defaults against this tree's tuned kernels"
[ -z "$DEPS" ] && [ -d "$ROOT/.gpudeps" ] && DEPS=$ROOT/.gpudeps
# A commit git does not know (a copy of the tree without its history) is found in the pack's copies
# of the --ab commits' templates (tools/pack-gpu-deps.sh AB_REV=; tools/templates-at.sh).
[ -n "$DEPS" ] && export CPGEN_AB_TEMPLATES="$DEPS/templates-ab"
declare -A AB_SEEN=()  # commit -> the --ab name that gave it: one commit twice would time it twice
for rev in "${AB_REVS[@]}"; do
  # Its reason as templates-at gives it (not a commit, an ambiguous packed prefix).
  full=$("$ROOT/tools/templates-at.sh" --resolve "$rev" 2>&1) || usage_error "--ab: ${full#templates-at: }"
  [ -n "${AB_SEEN[$full]:-}" ] && usage_error "--ab '$rev': the same commit as '${AB_SEEN[$full]}'"
  AB_SEEN[$full]=$rev
done
# --kernels-args as the shell would split it (quotes group, as in --pin '...{dtype}...'), once:
# every benchmark call passes the same words.
KARGS=()
if [ -n "${KERNELS_ARGS//[[:space:]]/}" ]; then
  printf '%s' "$KERNELS_ARGS" | xargs printf '' 2>/dev/null ||
    usage_error "--kernels-args '$KERNELS_ARGS': an unmatched quote"
  mapfile -d '' -t KARGS < <(printf '%s' "$KERNELS_ARGS" | xargs printf '%s\0')
fi
[ -z "$BUDGET" ] && { [ -n "${OUT:-}" ] && BUDGET=570 || BUDGET=0; }
# --only runs its phases in the order it names them (a one-call session puts first what matters
# most), the build always first; otherwise every phase not skipped runs, in ALL_PHASES order.
WANTED=("${ALL_PHASES[@]}")
[ -n "$ONLY" ] && read -r -a WANTED <<<"${ONLY//,/ }"
PHASES=()
for p in "${WANTED[@]}"; do
  [[ ",$SKIP," == *",$p,"* || " ${PHASES[*]} " == *" $p "* ]] && continue
  # The build, when asked for, comes first wherever it is named: the other phases need it.
  if [ "$p" = build ]; then PHASES=(build "${PHASES[@]}"); else PHASES+=("$p"); fi
done
[ ${#PHASES[@]} -gt 0 ] || usage_error "no phase left to run"
# The wgmma phase pins forward kernels (--pin), which kernels.py refuses beside --direction bwd:
# say so now rather than after the build, in each of the phase's benchmark calls.
if [[ " ${PHASES[*]} " == *" wgmma "* ]]; then
  for i in "${!KARGS[@]}"; do
    if [ "${KARGS[$i]}" = --direction=bwd ] || { [ "${KARGS[$i]}" = --direction ] && [ "${KARGS[$((i + 1))]:-}" = bwd ]; }; then
      usage_error "--kernels-args '$KERNELS_ARGS': the wgmma phase pins forward kernels, which --direction bwd cannot time; run the backward with --only kernels"
    fi
  done
fi

START=$(date +%s)
mkdir -p "$BUILD"
BUILD=$(cd "$BUILD" && pwd)
# --ab: each REV's templates in $BUILD/templates-ab/N (kept across calls while N names the same
# commit), before any phase spends the budget: a REV whose parameters differ stops the call here.
for i in "${!AB_REVS[@]}"; do
  dir=$("$ROOT/tools/templates-at.sh" "${AB_REVS[$i]}" "$BUILD/templates-ab/$((i + 1))" 2>"$BUILD/templates-at.err") ||
    usage_error "--ab: $(sed 's/^templates-at: //' "$BUILD/templates-at.err")"
  AB_DIRS+=("$dir")
done
rm -f "$BUILD/templates-at.err"
if [ -z "${CPGEN_VECTORS_DIR:-}" ]; then
  if [ -n "$DEPS" ] && [ -f "$DEPS/vectors.tar.xz" ] && [ ! -f "$BUILD/vectors/partitions.json" ]; then
    mkdir -p "$BUILD/vectors" && tar -C "$BUILD/vectors" -xJf "$DEPS/vectors.tar.xz"
  fi
  for d in "$ROOT/../shared/vectors" "$ROOT/shared/vectors" "$ROOT/.vectors" "$BUILD/vectors"; do
    [ -f "$d/partitions.json" ] && export CPGEN_VECTORS_DIR=$(cd "$d" && pwd) && break
  done
fi
# The logs of earlier calls on a warm machine stay: each phase replaces only its own files, so a
# session's calls add up to one report.
LOGS=$BUILD/gpu-check-logs
mkdir -p "$LOGS/phases"
COMMANDS=$LOGS/commands.txt
touch "$COMMANDS"
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
# The device tool copies the working tree, and its git HEAD can be older (the first H100 calls
# showed the session's first commit for trees several commits later): when the tree differs from
# HEAD's, the report names the tree's hash as well, which `git log --format='%h %t'` maps back to
# the commit on the dev machine. The reports this script writes into bench/results are left out,
# or an earlier call's report would make every later call's tree a changed one.
tree_of_worktree() {
  local index
  index=$(mktemp) || return
  GIT_INDEX_FILE=$index git -C "$ROOT" read-tree HEAD 2>/dev/null &&
    GIT_INDEX_FILE=$index git -C "$ROOT" add -A -- . ':(exclude)bench/results/*-gpu-check*.md' 2>/dev/null &&
    GIT_INDEX_FILE=$index git -C "$ROOT" write-tree 2>/dev/null | cut -c1-7
  rm -f "$index"
}
TREE=$(tree_of_worktree)
[ -n "$TREE" ] && [ "$TREE" != "$(git -C "$ROOT" rev-parse --short=7 'HEAD^{tree}' 2>/dev/null)" ] &&
  COMMIT="$COMMIT with changes: tree $TREE"

if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break; done
fi
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
GPU_TAG=$(echo "${GPU_NAME:-nogpu}" | tr ' /' '--')
CACHE_TAG=$(echo "${GPU_NAME:-nogpu}" | tr 'A-Z' 'a-z' | sed 's/nvidia //; s/[^a-z0-9]\+/-/g; s/-$//')
REPORT=${REPORT:-$ROOT/bench/results/$(date -u +%Y-%m-%d)-$GPU_TAG-gpu-check.md}
mkdir -p "$(dirname "$REPORT")"

# The kernel store every phase compiles into and loads from: $CPGEN_KERNEL_DIR when set, else one
# in the build folder (a warm machine keeps it between calls). On a GPU, the kernels that
# tools/pack-gpu-deps.sh compiled on the dev machine (every sm_90a default, the tune candidates of
# examples/shapes) are unpacked into it first: a store key holds the source, the templates, the
# options and the NVRTC version and library size, so under the same NVRTC they are found and
# NVRTC compiles only the rest; under another they are never found, and cost nothing but the
# unpacking. The report says how many came along and how many this call compiled.
export CPGEN_KERNEL_DIR=${CPGEN_KERNEL_DIR:-$BUILD/kernel-store}
store_entries() { find "$CPGEN_KERNEL_DIR" -maxdepth 1 -name '*.cpgenk' 2>/dev/null | wc -l; }
KERNELS_NOTE=""
if [ -n "$GPU_NAME" ]; then
  mkdir -p "$CPGEN_KERNEL_DIR"
  if [ -n "$DEPS" ] && [ -f "$DEPS/kernels.tar.xz" ]; then
    # One pass over the archive: -v lists every member, the ones already there (kept) too.
    if listing=$(tar -C "$CPGEN_KERNEL_DIR" --skip-old-files -xvJf "$DEPS/kernels.tar.xz" 2>/dev/null); then
      carried=$(grep -c '\.cpgenk$' <<<"$listing")
      KERNELS_NOTE="$carried carried in $DEPS/kernels.tar.xz ($(head -1 "$DEPS/KERNELS" 2>/dev/null || echo 'no KERNELS file'))"
    else
      KERNELS_NOTE="$DEPS/kernels.tar.xz could not be unpacked; every kernel is compiled here"
    fi
  fi
  KERNELS_AT_START=$(store_entries)
fi

# ---- phase bookkeeping ----
# phase_status PHASE TEXT: the one-line result of a phase, with the commit and the seconds it took.
phase_status() { echo "$2 ($(( $(date +%s) - PHASE_START )) s, commit $COMMIT)" >"$LOGS/phases/$1.status"; }
# note PHASE TEXT: a line of the phase's section.
note() { echo "- $2" >>"$LOGS/phases/$1.notes"; echo "gpu-check: $1: $2" >&2; }
left() { [ "$BUDGET" -eq 0 ] && echo 999999 || echo $(( START + BUDGET - $(date +%s) )); }
# run NAME CMD...: CMD under the remaining budget (less 20 s for the report), output in
# $LOGS/NAME.log, the command recorded; returns its status (124: stopped by the budget).
run() {
  local name=$1
  shift
  { printf '%q ' "$@"; echo; } >>"$COMMANDS"  # quoted, so that a line pasted into a shell runs as it ran
  echo "+ $*" >&2
  local limit
  limit=$(( $(left) - 20 ))
  [ "$limit" -lt 1 ] && limit=1
  timeout --kill-after=10 "$limit" "$@" >"$LOGS/$name.log" 2>&1
}
# can_start PHASE SECONDS: whether SECONDS of budget are left to start PHASE; notes a skip.
can_start() {
  if [ "$(left)" -lt "$2" ]; then
    echo "skipped: $(left) s of the budget left, the phase needs about $2" >"$LOGS/phases/$1.status"
    echo "gpu-check: $1 skipped (budget)" >&2
    return 1
  fi
  return 0
}
begin_phase() {
  PHASE_START=$(date +%s)
  rm -f "$LOGS/phases/$1".*
  echo "gpu-check: phase $1 ($(left) s of budget left)" >&2
}
STATUS=0
# gpu_phase PHASE SECONDS: begins a phase that needs the GPU and the binaries (building them when
# this call has not); false, with the reason as the phase's status, when it cannot run. A build
# that fails fails the call.
gpu_phase() {
  begin_phase "$1"
  can_start "$1" "$2" || return 1
  [ -n "$GPU_NAME" ] || { phase_status "$1" "not run: no GPU"; return 1; }
  need_build || { phase_status "$1" "not run: no build"; STATUS=1; return 1; }
  can_start "$1" "$2" || return 1  # again, after a build this call had to make first
}
# The sm_90a family's kernel for a benchmark configuration (bench/kernels.py --pin): its default
# tiles for each configuration, which cpgen names (cpgen_family_kernel_uri). The ping-pong variant
# (two consumer warpgroups taking turns) is a tuner candidate, not a default: timed beside it.
WGMMA_PIN=wgmma
PINGPONG_PIN=wgmma-pingpong
# The persistent launch of the default tiles (about one CTA per SM looping over query blocks), a
# tuner candidate too, timed beside the plain launch.
PERSISTENT_PIN=wgmma-persistent

# ---- the report, rewritten after every phase ----
NVCC_VERSION=$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo "nvcc missing")
CMAKE_VERSION=$(cmake --version 2>/dev/null | head -1)
TORCH=$(python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())' 2>/dev/null || echo "not importable")
NCCL_PY=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || echo "not found")
write_report() {
  local p
  {
    echo "# gpu-check on ${GPU_NAME:-no GPU} ($(date -u '+%Y-%m-%d %H:%M UTC'))"
    echo
    echo "- GPU: ${GPU_NAME:-none}, driver ${DRIVER:-none}; nvcc $NVCC_VERSION; $CMAKE_VERSION"
    echo "- PyTorch: $TORCH; NCCL package: $NCCL_PY"
    echo "- reference vectors: tests/data/vectors${CPGEN_VECTORS_DIR:+ and $CPGEN_VECTORS_DIR}"
    [ -n "${KERNELS_AT_START:-}" ] && echo "- kernel store $CPGEN_KERNEL_DIR: ${KERNELS_NOTE:-nothing carried in}; \
$(( $(store_entries) - KERNELS_AT_START )) entries added (compiled here) by this call so far"
    echo
    echo "| phase | result |"
    echo "|---|---|"
    for p in "${ALL_PHASES[@]}"; do
      [ -f "$LOGS/phases/$p.status" ] && echo "| $p | $(cat "$LOGS/phases/$p.status") |"
    done
    for p in "${ALL_PHASES[@]}"; do
      [ -f "$LOGS/phases/$p.notes" ] || [ -f "$LOGS/phases/$p.md" ] || continue
      echo
      echo "## $p"
      echo
      [ -f "$LOGS/phases/$p.notes" ] && cat "$LOGS/phases/$p.notes" && echo
      [ -f "$LOGS/phases/$p.md" ] && cat "$LOGS/phases/$p.md"
    done
    echo
    echo "## Commands (every call on this machine, in order)"
    echo
    sed 's/^/    /' "$COMMANDS"
  } >"$REPORT"
  # A failed compile's message holds one line of its log; the whole log, options and source stay in
  # the folder the message names (runtime/jit/jit.cpp, save_failed_compile), copied here so that
  # they come back with the logs.
  local failed_dir="${TMPDIR:-/tmp}/cpgen-$(id -u)/failed" f rel
  if [ -d "$failed_dir" ]; then
    find "$failed_dir" -maxdepth 2 \( -name nvrtc.log -o -name options.txt -o -name '*.cu' \) 2>/dev/null | head -300 |
      while read -r f; do
        rel=${f#"$failed_dir"/}
        mkdir -p "$LOGS/failed-compiles/$(dirname "$rel")" && cp "$f" "$LOGS/failed-compiles/$rel" 2>/dev/null
      done
  fi
  if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
    cp "$REPORT" "$OUT/" 2>/dev/null
    # The device tool brings back at most 8 files from $OUT: the report, this tarball (every log,
    # table and jsonl), and on their own the four ncu profiles and the exported cache.
    tar -C "$LOGS" --exclude='*.ncu-rep' --exclude='*.db' -czf "$OUT/gpu-check-logs.tar.gz" . 2>/dev/null
  fi
}

# ---- build ----
BUILD_OK=0
TESTS_BUILT=0
phase_build() {
  begin_phase build
  # Each test's limit (tests/CMakeLists.txt) down from 600 s: the slowest test takes under a
  # minute, and a kernel that never finishes must cost minutes of this call, not all of it.
  local args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCPGEN_TEST_TIMEOUT=180) hints=() missing=() dep name where syslib lib
  # The python3 on PATH is the one holding PyTorch and the nvidia-nccl wheel on the GPU image;
  # FindNCCL asks it where the wheel is.
  command -v python3 >/dev/null && args+=(-DPython3_EXECUTABLE="$(command -v python3)")
  find_header() {  # RELPATH -> "system", "carried" or nothing
    local d
    for d in /usr/include /usr/local/include; do [ -f "$d/$1" ] && { echo system; return; }; done
    [ -n "$DEPS" ] && [ -f "$DEPS/usr/include/$1" ] && echo carried
  }
  local carried=0
  for dep in "nlohmann-json:nlohmann/json.hpp" "CLI11:CLI/CLI.hpp" "GoogleTest:gtest/gtest.h" "SQLite:sqlite3.h"; do
    name=${dep%%:*}
    where=$(find_header "${dep#*:}")
    case "$where" in
      system) note build "$name: system" ;;
      carried) note build "$name: carried from $DEPS"; carried=1 ;;
      *) note build "$name: MISSING (not installed, and not in a carried prefix; run tools/pack-gpu-deps.sh on the dev machine and carry .gpudeps)"; missing+=("$name") ;;
    esac
    if [ "$name" = SQLite ] && [ "$where" = carried ]; then
      # Prefer the machine's own libsqlite3 (Python's sqlite3 module uses it) over the carried one.
      syslib=$(ldconfig -p 2>/dev/null | grep -o '/[^ ]*libsqlite3\.so\.0$' | head -1)
      lib=${syslib:-$(ls "$DEPS"/usr/lib/*/libsqlite3.so.0 2>/dev/null | head -1)}
      hints+=(-DSQLite3_INCLUDE_DIR="$DEPS/usr/include" -DSQLite3_LIBRARY="$lib")
      note build "SQLite library: $lib"
    fi
  done
  [ $carried = 1 ] && hints+=(-DCMAKE_PREFIX_PATH="$DEPS/usr;$(ls -d "$DEPS"/usr/lib/*/cmake 2>/dev/null | head -1)")
  args+=("${hints[@]}")
  # The clone test (tests/clone_test.cpp) configures a fresh clone on this machine: it needs the
  # same hints to the carried dependencies (the first H100 call failed it for want of them).
  CPGEN_CMAKE_ARGS=
  [ ${#hints[@]} -gt 0 ] && CPGEN_CMAKE_ARGS=$(printf '%q ' "${hints[@]}")
  export CPGEN_CMAKE_ARGS
  TESTS_BUILT=1
  if printf '%s\n' "${missing[@]}" | grep -qx GoogleTest; then
    args+=(-DCPGEN_BUILD_TESTS=OFF)
    TESTS_BUILT=0
    note build "tests SKIPPED: GoogleTest is missing; the library, CLI and benchmarks are still built"
  fi
  if printf '%s\n' "${missing[@]}" | grep -qxE 'nlohmann-json|CLI11|SQLite'; then
    phase_status build "SKIPPED: a required dependency is missing (${missing[*]})"
    return 1
  fi
  # An earlier call's logs must not stand for this one's (a configure that fails runs no build).
  rm -f "$LOGS/configure.log" "$LOGS/build.log"
  if run configure cmake -S "$ROOT" -B "$BUILD" "${args[@]}" && run build cmake --build "$BUILD" -j "$(nproc)"; then
    BUILD_OK=1
    phase_status build "ok"
    grep -h "NCCL" "$LOGS/configure.log" 2>/dev/null | sed 's/^/- configure: /' >>"$LOGS/phases/build.notes"
    return 0
  fi
  phase_status build "FAILED (errors below)"
  {
    local last=$LOGS/build.log
    [ -f "$last" ] || last=$LOGS/configure.log  # the configure failed
    echo "Build errors (first 30) and the last 15 lines of $(basename "$last"):"
    echo
    grep -hE "error|Error|No rule" "$LOGS/configure.log" "$LOGS/build.log" 2>/dev/null | head -30 | sed 's/^/    /'
    echo "    ..."
    tail -15 "$last" 2>/dev/null | sed 's/^/    /'
  } >"$LOGS/phases/build.md"
  return 1
}
need_build() {
  [ $BUILD_OK = 1 ] && return 0
  if [[ " ${PHASES[*]} " == *" build "* ]]; then return 1; fi  # it ran in this call and failed
  PHASES=(build "${PHASES[@]}")  # so that a failure is reported
  local started=$PHASE_START  # the phase that asked keeps its own clock
  phase_build; local rc=$?
  PHASE_START=$started
  write_report
  return $rc
}

# ctest_summary LOG: the pass count, the test time, and one line per failed or skipped test.
ctest_summary() {
  {
    grep -E "tests passed|Total Test time|^[[:space:]]+[0-9]+ - " "$1"
    grep -q "tests passed" "$1" || grep -E '^ *[0-9]+/[0-9]+ Test +#' "$1" | grep -v ' Passed '
  } | head -80 | sed 's/^/    /'
}
ctest_result() {  # LOG RC -> one line
  local passed
  passed=$(grep -h "tests passed" "$1" 2>/dev/null | tail -1)
  if [ "$2" = 124 ] || [ "$2" = 137 ]; then
    # ctest prints no summary when stopped: count the finished tests' lines instead (a skip is
    # not a failure: NcclRingWorker.Run, the multi-process tests' worker, always skips alone).
    local finished ok skipped
    finished=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#' "$1")
    ok=$(grep -E '^ *[0-9]+/[0-9]+ Test +#' "$1" | grep -c ' Passed ')
    skipped=$(grep -E '^ *[0-9]+/[0-9]+ Test +#' "$1" | grep -c 'Skipped ')
    echo "STOPPED by the budget after $finished tests: $ok passed, $skipped skipped, $((finished - ok - skipped)) failed"
  elif [ -z "$passed" ]; then echo "FAILED: no ctest summary (see the log)"
  # The exit status decides: CMake 4 prints "100% tests passed out of N", without "0 tests failed".
  elif [ "$2" = 0 ]; then echo "$passed; $(grep -c '(Skipped)$' "$1") skipped"
  else echo "FAILED: $passed; $(grep -c '(Skipped)$' "$1") skipped"; fi
}

# ctest_phase PHASE SECONDS LOG CMD...: a phase that runs ctest (CMD) in the build folder.
ctest_phase() {
  local phase=$1 need=$2 log=$3
  shift 3
  begin_phase "$phase"
  can_start "$phase" "$need" || return 0
  need_build || { phase_status "$phase" "not run: no build"; return 1; }
  [ $TESTS_BUILT = 1 ] || { phase_status "$phase" "not run: built without GoogleTest"; return 0; }
  (cd "$BUILD" && run "$log" "$@" --output-on-failure)
  local rc=$?
  phase_status "$phase" "$(ctest_result "$LOGS/$log.log" $rc)"
  { echo "$*, failures and skips:"; echo; ctest_summary "$LOGS/$log.log"; } >"$LOGS/phases/$phase.md"
  grep -q "^FAILED\|^STOPPED" "$LOGS/phases/$phase.status" && return 1 || return 0
}
phase_tests() {
  local env=() exclude='Nccl|OnGpu'
  [ $FULL_MATRIX = 1 ] && env=(env CPGEN_FULL_COMPILE_MATRIX=1)
  [ $CPU_TESTS = 1 ] || exclude="$exclude|$CPU_ONLY_TESTS"
  ctest_phase tests 120 ctest "${env[@]}" ctest -j 8 -E "$exclude"
  local rc=$?
  # What GpuApprox measured of the hardware's tanh.approx (a passing test's output is only in
  # ctest's LastTest.log): the figure behind the softcap's tanh from ex2 and rcp.
  [ -f "$LOGS/phases/tests.md" ] &&
    grep -h "^GpuApprox on" "$BUILD"/Testing/Temporary/LastTest*.log 2>/dev/null | head -1 |
    sed 's/^/    /' >>"$LOGS/phases/tests.md"
  return $rc
}
phase_nccl() { ctest_phase nccl 60 ctest_nccl ctest -R Nccl; }
phase_ongpu() { ctest_phase ongpu 60 ctest_ongpu ctest -R OnGpu; }

phase_sanitize() {
  gpu_phase sanitize 120 || return 0
  [ $TESTS_BUILT = 1 ] || { phase_status sanitize "not run: built without GoogleTest"; return 0; }
  run sanitize "$ROOT/tools/gpu-sanitize.sh" --build-dir "$BUILD" --logs "$LOGS/sanitize"
  local rc=$?
  if [ $rc = 0 ]; then phase_status sanitize "clean"
  elif [ $rc = 124 ] || [ $rc = 137 ]; then phase_status sanitize "STOPPED by the budget (the lines below finished)"
  else phase_status sanitize "FINDINGS or failures (below)"; fi
  grep -v '^+' "$LOGS/sanitize.log" | sed 's/^/    /' >"$LOGS/phases/sanitize.md"
  return $rc
}

# kernel_bench NAME EXTRA_ARGS...: bench/kernels.py into $LOGS/NAME.{jsonl,md}. A configuration
# gets 45 s (a few seconds is normal, compiles included): a kernel that never finishes then costs
# 45 s of the call, not kernels.py's default 120 (EXTRA_ARGS may say otherwise).
kernel_bench() {
  local name=$1
  shift
  rm -f "$LOGS/$name.jsonl" "$LOGS/$name.md"
  run "$name" python3 "$ROOT/bench/kernels.py" --lib "$BUILD/libcpgen.so" --stall-seconds 45 "$@" \
    --jsonl "$LOGS/$name.jsonl" --markdown "$LOGS/$name.md"
}
kernel_section() {  # NAME RC: the table, and the configurations that failed or computed wrong
  local name=$1 rc=$2 rows failed wrong counts
  rows=$(cat "$LOGS/$name.jsonl" 2>/dev/null | wc -l)
  failed=$(grep -c '"failed"' "$LOGS/$name.jsonl" 2>/dev/null)
  wrong=$(grep -c '"cpgen_check": "FAILED"' "$LOGS/$name.jsonl" 2>/dev/null)
  counts="${failed:-0} failed$([ "${wrong:-0}" != 0 ] && echo ", $wrong WRONG RESULTS (CHECK FAILED)")"
  {
    [ -f "$LOGS/$name.md" ] && cat "$LOGS/$name.md" && echo
    grep -h '"failed"\|"cpgen_check": "FAILED"' "$LOGS/$name.jsonl" 2>/dev/null | head -20 | sed 's/^/    /'
    [ "$rc" = 0 ] || { echo "The log's last 10 lines:"; echo; tail -10 "$LOGS/$name.log" | sed 's/^/    /'; }
  } >"$LOGS/phases/$name.md"
  case $rc in
    0) echo "$rows configurations, $counts" ;;
    124 | 137) echo "STOPPED by the budget after $rows configurations, $counts" ;;
    4) echo "STALLED (exit 4) after $rows configurations, $counts: $(tail -1 "$LOGS/$name.log")" ;;
    5) echo "CUDA FAULT (exit 5) after $rows configurations, $counts: $(grep -m1 'context is unusable' "$LOGS/$name.log")" ;;
    *) echo "FAILED (exit $rc): $(tail -1 "$LOGS/$name.log")" ;;
  esac
}
# run_failed STATUS: whether a benchmark run's status (kernel_section) says it failed, was stopped,
# stalled or faulted, or that any configuration failed or computed wrong; a phase with such a run
# fails the call (its exit status), as a failed test does. A run not started for the budget does not.
run_failed() {
  [[ "$1" =~ ^(FAILED|STOPPED|STALLED|CUDA\ FAULT) || "$1" == *WRONG* || "$1" =~ (^|[^0-9])[1-9][0-9]*\ failed ]]
}
phase_kernels() {
  gpu_phase kernels 90 || return 0
  kernel_bench kernels "${KARGS[@]}"
  local rc=$? status
  status=$(kernel_section kernels $rc)
  phase_status kernels "$status"
  run_failed "$status" && return 1
  return 0
}
# join_section NAME STATUS TITLE BASE OTHER JOIN: appends to the wgmma phase's section NAME's table
# (phases/NAME.md, which kernel_section wrote) under "### TITLE: STATUS", then under the line JOIN
# the rows of OTHER joined with those of BASE (bench/compare_rows.py, OTHER over BASE).
join_section() {
  local name=$1 status=$2 title=$3 base=$4 other=$5 join=$6
  {
    echo
    echo "### $title: $status"
    echo
    cat "$LOGS/phases/$name.md"
    echo
    echo "$join"
    echo
    [ -f "$LOGS/$base.jsonl" ] && [ -f "$LOGS/$other.jsonl" ] &&
      python3 "$ROOT/bench/compare_rows.py" "$LOGS/$base.jsonl" "$LOGS/$other.jsonl" 2>&1
  } >>"$LOGS/phases/wgmma.md"
  rm -f "$LOGS/phases/$name.md"
}
# variant_bench NAME PIN BASE OTHER TITLE JOIN [ARGS...]: with 60 s of the budget left, times PIN
# (GQA 1, ARGS, then --kernels-args) and joins the rows of OTHER with those of BASE under TITLE
# (join_section); prints its status.
variant_bench() {
  local name=$1 pin=$2 base=$3 other=$4 title=$5 join=$6 rc status
  shift 6
  [ "$(left)" -ge 60 ] || { echo "not run: under 60 s of the budget left"; return 0; }
  kernel_bench "$name" --pin "$pin" --gqa 1 "$@" "${KARGS[@]}" >&2
  rc=$?
  status=$(kernel_section "$name" $rc)
  join_section "$name" "$status" "$title" "$base" "$other" "$join"
  # The report and the logs' tarball now, not only after the phase: a call ended from outside
  # (the device tool's limit, a hang past kill) still brings back every run finished so far.
  write_report
  echo "$status"
}
# ab_summary KIND TREE: every --ab REV's KIND run (ab-KIND-N.jsonl) and this tree's (TREE.jsonl)
# side by side (bench/compare_rows.py --many), appended to the wgmma phase's section.
ab_summary() {
  local kind=$1 tree=$2 i runs=()
  for i in "${!AB_REVS[@]}"; do
    [ -f "$LOGS/ab-$kind-$((i + 1)).jsonl" ] && runs+=("${AB_REVS[$i]}=$LOGS/ab-$kind-$((i + 1)).jsonl")
  done
  [ -f "$LOGS/$tree.jsonl" ] && runs+=("tree=$LOGS/$tree.jsonl")
  {
    echo
    echo "### A/B, the $kind launch: each --ab commit's templates and this tree's, ratio to cuDNN (TFLOP/s)"
    echo
    if [ ${#runs[@]} -ge 2 ]; then python3 "$ROOT/bench/compare_rows.py" --many "${runs[@]}" 2>&1
    else echo "(fewer than two runs finished: nothing to set side by side)"; fi
  } >>"$LOGS/phases/wgmma.md"
}
phase_wgmma() {
  gpu_phase wgmma 90 || return 0
  kernel_bench wgmma --pin "$WGMMA_PIN" --gqa 1 "${KARGS[@]}"
  local rc=$? plain skip="" pingpong persistent
  plain=$(kernel_section wgmma $rc)
  # A plain run that stalled (exit 4: a kernel that never finished) or faulted (exit 5: a CUDA
  # error left the context unusable) leaves the other runs out: they would most likely do the
  # same, and the rest of the call needs the minutes more.
  [ $rc = 4 ] && skip="not run: the plain family's run stalled"
  [ $rc = 5 ] && skip="not run: the plain family's run hit a CUDA fault"
  pingpong=$skip persistent=$skip
  local mmasync=$skip failed=0
  run_failed "$plain" && failed=1
  if [ -z "$skip" ]; then
    # The family ratio: wgmma TFLOP/s over the mma.sync default's on the same configuration. The
    # selected kernel (the kernels phase) is no baseline: on sm_90a it is the wgmma one where a
    # GPU measured it faster (generator/kernel_spec_wgmma.h kWgmmaDefaultShapes). With --ab the
    # mma.sync and ping-pong runs are left out (both were timed on 2026-11-28's H200): the A/B's
    # runs need their half minute each, and the ring phase after this one its minutes.
    if [ ${#AB_REVS[@]} -eq 0 ]; then
      mmasync=$(variant_bench mmasync mma.sync mmasync wgmma "The mma.sync family's default tiles (\`--pin mma.sync\`)" \
        "wgmma (other) against mma.sync (base):")
    else
      mmasync="not run: --ab"
    fi
    # The persistent launch and the ping-pong schedule against the plain one (issue 13: whether
    # either becomes the default), at head dim 128: whether overlapping one query block's start
    # with the last one's end closes the causal gap to cuDNN.
    persistent=$(variant_bench persistent "$PERSISTENT_PIN" wgmma persistent \
      "The persistent launch (\`_persistent\`)" "Persistent (other) against the plain launch (base):" --head-dims 128)
    if [ ${#AB_REVS[@]} -eq 0 ]; then
      pingpong=$(variant_bench pingpong "$PINGPONG_PIN" wgmma pingpong "The ping-pong variant (\`_pingpong\`)" \
        "Ping-pong (other) against the plain family (base):" --head-dims 128)
    else
      pingpong="not run: --ab"
    fi
    local v
    for v in "$mmasync" "$persistent" "$pingpong"; do run_failed "$v" && failed=1; done
  fi
  local ab="" i rev
  if [ ${#AB_REVS[@]} -gt 0 ] && [ -z "$skip" ]; then
    # An earlier call's A/B runs (a warm machine keeps the logs) must not enter this call's table.
    rm -f "$LOGS"/ab-plain-*.jsonl "$LOGS"/ab-persistent-*.jsonl
    local ab_plain ab_persistent
    for i in "${!AB_REVS[@]}"; do
      rev=${AB_REVS[$i]}
      ab_plain=$(variant_bench "ab-plain-$((i + 1))" "$WGMMA_PIN" "ab-plain-$((i + 1))" wgmma \
        "The plain launch compiled from $rev's templates (\`--ab\`)" \
        "This tree (other) against $rev's templates (base); compare the two vs-cuDNN columns:" \
        --templates "${AB_DIRS[$i]}")
      ab_persistent=$(variant_bench "ab-persistent-$((i + 1))" "$PERSISTENT_PIN" "ab-persistent-$((i + 1))" \
        persistent "The persistent launch compiled from $rev's templates (\`--ab\`)" \
        "This tree's persistent launch (other) against $rev's (base):" --head-dims 128 --templates "${AB_DIRS[$i]}")
      ab="$ab; A/B $rev: plain $ab_plain, persistent $ab_persistent"
      { run_failed "$ab_plain" || run_failed "$ab_persistent"; } && failed=1
    done
    ab_summary plain wgmma
    ab_summary persistent persistent
  elif [ ${#AB_REVS[@]} -gt 0 ]; then
    ab="; A/B: $skip"
  fi
  phase_status wgmma "$plain; mma.sync: $mmasync; ping-pong: $pingpong; persistent: $persistent$ab"
  return $failed
}

phase_ncu() {
  gpu_phase ncu 60 || return 0
  local ncu family rc results=""
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  [ -n "$ncu" ] || { phase_status ncu "not run: no ncu on PATH, in /usr/local/cuda/bin or /opt/nvidia/nsight-compute"; return 0; }
  : >"$LOGS/phases/ncu.md"
  # wgmma-persistent: whether the persistent launch keeps the tensor pipe busier than the plain
  # one over a whole launch (its aim: no idle SM between one query block and the next).
  # wgmma-pingpong: whether the two consumer warpgroups' turns move the waits at the MMAs (on the
  # 2026-11-27 H200 the plain schedule's tensor pipe was busy 71.6% of the time, 13.9% of its
  # samples at the wait for a warpgroup's P V), which its timings (0.98-1.02x plain) did not show.
  for family in mma.sync wgmma wgmma-persistent wgmma-pingpong; do
    local pin=(--pin "$family")  # family names of kernels.py --pin
    rm -f "$LOGS/ncu-$family.ncu-rep"  # an earlier call's profile must not stand for a failed one
    # The first launch whose name starts ring_fwd (the URI is the kernel's name): kernels.py's
    # checked run, before any timing. --clock-control none: the clocks the benchmarks ran at.
    # SourceCounters names the SASS lines the warps stall at: the 2026-11-27 H200 profile of
    # the wgmma kernel averaged its producer and consumer warps' stalls into one figure.
    run "ncu-$family" "$ncu" --target-processes all --clock-control none --kernel-name 'regex:^ring_fwd' \
      --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section SourceCounters --section InstructionStats \
      --export "$LOGS/ncu-$family" --force-overwrite \
      python3 "$ROOT/bench/kernels.py" --lib "$BUILD/libcpgen.so" --dtypes bf16 --head-dims 128 \
      --lengths 16384 --gqa 1 --causal 1 --warmup 0 --iters 1 --check-rows 8 "${pin[@]}"
    rc=$?
    results="$results $family: $([ $rc = 0 ] && echo ok || echo "exit $rc");"
    # With --export ncu prints no sections (the 2026-11-27 H200 report had none): the text comes
    # from reading the report back. tools/ncu-metrics.py reads the same file where ncu is absent.
    "$ncu" --import "$LOGS/ncu-$family.ncu-rep" --page details >"$LOGS/ncu-$family.txt" 2>&1 ||
      echo "(ncu --import failed; tools/ncu-metrics.py reads the .ncu-rep)" >>"$LOGS/ncu-$family.txt"
    # Where the warps waited, by instruction (the PC sampler's counts and the SASS).
    python3 "$ROOT/tools/ncu-metrics.py" "$LOGS/ncu-$family.ncu-rep" --hotspots 16 >"$LOGS/ncu-$family-hotspots.txt" 2>&1
    { echo "### $family"; echo; grep -vE '^(\{|# |\| |==PROF==)' "$LOGS/ncu-$family.log" | head -20 | sed 's/^/    /'
      echo; head -200 "$LOGS/ncu-$family.txt" | sed 's/^/    /'; echo
      echo "Hotspots (tools/ncu-metrics.py --hotspots 16: offset, share of samples, top stall reasons, SASS):"
      echo; sed 's/^/    /' "$LOGS/ncu-$family-hotspots.txt"; echo; } >>"$LOGS/phases/ncu.md"
    [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ] && cp "$LOGS/ncu-$family.ncu-rep" "$OUT/" 2>/dev/null
  done
  results=${results# }
  phase_status ncu "${results%;}"
  return 0
}

# bench/ring_overhead.sh's target shape (its TARGET_SHAPE).
RING_TARGET_SHAPE="q_heads=32,kv_heads=8,head_dim=128,seq_len=32768,dtype=bf16,causal=1,scheme=zigzag"
phase_ring() {
  gpu_phase ring 60 || return 0
  # With --ab the phase compares commits on the target row: that row alone on this tree (about 30 s
  # of the six rows' 3 minutes), then on each commit.
  local target_only=0
  [ ${#AB_REVS[@]} -gt 0 ] && target_only=1
  # An earlier call's table and rows (a warm machine keeps the logs) must not stand for this one's.
  rm -f "$LOGS/ring-overhead.md" "$LOGS"/ring-ab-*.log "$LOGS/phases/ring.md"
  run ring env CPGEN="$BUILD/cpgen" TARGET_ONLY=$target_only TUNE=$RING_TUNE TUNE_CANDIDATES="$TUNE_CANDIDATES" \
    "$ROOT/bench/ring_overhead.sh" "$LOGS/ring-overhead.md"
  local rc=$?
  local verdict status failed=0
  # A missed target is a figure, not a failure; a row that failed or a check that did not hold is.
  [ $rc = 0 ] || failed=1
  verdict=$(grep -E '^target' "$LOGS/ring.log" | tail -1)
  [[ -z "$verdict" || "$verdict" == *FAILED* || "$verdict" == *missing* ]] && failed=1
  status="${verdict:-no verdict (ring_overhead.sh wrote none)}; $(grep -c '^ring_overhead: row [0-9]* failed' "$LOGS/ring.log") rows failed"
  { [ $rc = 124 ] || [ $rc = 137 ]; } && status="$status; STOPPED by the budget"
  if [ -f "$LOGS/ring-overhead.md" ]; then sed 's/^# /### /' "$LOGS/ring-overhead.md" >"$LOGS/phases/ring.md"
  else echo "ring_overhead.sh wrote no table (exit $rc); its log's last lines:" >"$LOGS/phases/ring.md"
    tail -10 "$LOGS/ring.log" | sed 's/^/    /' >>"$LOGS/phases/ring.md"; fi
  # --ab: the target row (N=8) once more on each REV's templates, right after this tree's, while
  # the budget lasts; the status counts the rows that failed or did not run.
  local i ab_failed=0 ab_skipped=0
  for i in "${!AB_REVS[@]}"; do
    if [ "$(left)" -le 60 ]; then
      ab_skipped=$((ab_skipped + 1))
      { echo; echo "### The target row on ${AB_REVS[$i]}'s templates (\`--ab\`): not run, under 60 s of the budget left"; } \
        >>"$LOGS/phases/ring.md"
      continue
    fi
    run "ring-ab-$((i + 1))" env CPGEN_TEMPLATES_DIR="${AB_DIRS[$i]}" "$BUILD/cpgen" bench --shape "$RING_TARGET_SHAPE" \
      --ranks 8 --iters 20 --warmup 5
    rc=$?
    [ $rc = 0 ] || ab_failed=$((ab_failed + 1))
    { echo; echo "### The target row on ${AB_REVS[$i]}'s templates (\`--ab\`, exit $rc)"; echo
      grep -v '^$' "$LOGS/ring-ab-$((i + 1)).log" | tail -24 | sed 's/^/    /'; } >>"$LOGS/phases/ring.md"
  done
  [ ${#AB_REVS[@]} -gt 0 ] &&
    status="$status; A/B target rows: $((${#AB_REVS[@]} - ab_failed - ab_skipped)) ran, $ab_failed FAILED, $ab_skipped not run (budget)"
  [ $ab_failed = 0 ] || failed=1
  phase_status ring "$status"
  write_report  # before the SDPA rows, as after each benchmark run of the wgmma phase
  # The same target shape as a whole loopback ring against SDPA on the full sequence (issue 14,
  # point 4), N = 1 being one kernel launch.
  if [ "$(left)" -gt 60 ]; then
    kernel_bench ring-sdpa --ranks 1,2,4,8 --scheme zigzag --dtypes bf16 --head-dims 128 --causal 1 \
      --lengths 32768 --gqa 4 --q-heads 32 --tokens 32768
    rc=$?
    local sdpa
    sdpa=$(kernel_section ring-sdpa $rc)
    run_failed "$sdpa" && failed=1
    { echo; echo "### The loopback ring against SDPA on the full sequence ($sdpa)"; echo
      cat "$LOGS/phases/ring-sdpa.md"; } >>"$LOGS/phases/ring.md"
    rm -f "$LOGS/phases/ring-sdpa.md"
  fi
  return $failed
}

phase_tune() {
  gpu_phase tune 90 || return 0
  local db=$LOGS/tune.db cache=$LOGS/$CACHE_TAG-examples.json f name t0 rc failed=0
  local seconds=$LOGS/tune-seconds.txt
  rm -f "$db" "$cache" "$seconds"
  { echo "cpgen tune, ${TUNE_ONLY:-fwd and bwd}, at most $TUNE_CANDIDATES candidates per workload:"; echo
    echo "| shapes file | seconds | result |"; echo "|---|---|---|"; } >"$LOGS/phases/tune.md"
  for f in "$ROOT"/examples/shapes/*.json; do
    name=$(basename "$f" .json)
    # A file started with too little left is stopped part way and its minutes are lost.
    if [ "$(left)" -lt 60 ]; then
      echo "| $name | | not run: under 60 s of the budget left |" >>"$LOGS/phases/tune.md"
      failed=1
      continue
    fi
    t0=$(date +%s)
    run "tune-$name" "$BUILD/cpgen" tune --shapes "$f" --db "$db" --require-gpu --max-candidates "$TUNE_CANDIDATES" \
      ${TUNE_ONLY:+--only "$TUNE_ONLY"}
    rc=$?
    [ $rc = 0 ] || failed=1
    # Where each workload's time went: cpgen tune's "seconds:" line under each workload's line.
    grep -E '^  (forward|backward): |^    seconds: ' "$LOGS/tune-$name.log" | sed 's/^/    /' >>"$seconds"
    echo "| $name | $(( $(date +%s) - t0 )) | $([ $rc = 0 ] && echo ok || echo "exit $rc: $(tail -1 "$LOGS/tune-$name.log")") |" \
      >>"$LOGS/phases/tune.md"
    write_report  # each file's row comes back even if the call is ended from outside
    { [ $rc = 124 ] || [ $rc = 137 ]; } && break
  done
  { echo; echo "Seconds per workload (cpgen tune: compiling, preparing the inputs and checking the reference,"
    echo "checking and timing the candidates, of which the timer's calls and storing the records):"; echo
    cat "$seconds" 2>/dev/null; } >>"$LOGS/phases/tune.md"
  local exported=1
  { run tune-export "$BUILD/cpgen" db export --db "$db" -o "$cache" && [ -s "$cache" ]; } || exported=0
  run tune-show "$BUILD/cpgen" db show --db "$db"
  { echo; echo "Winners (cpgen db show):"; echo; sed 's/^/    /' "$LOGS/tune-show.log" | head -80; } >>"$LOGS/phases/tune.md"
  [ $exported = 1 ] && [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ] && cp "$cache" "$OUT/" 2>/dev/null
  if [ $exported = 0 ]; then
    failed=1
    { echo; echo "The export FAILED; its log's last lines:"; echo; tail -5 "$LOGS/tune-export.log" | sed 's/^/    /'; } \
      >>"$LOGS/phases/tune.md"
  fi
  phase_status tune "$([ $failed = 0 ] && echo ok || echo 'FAILED, stopped or cut short (below)'); \
$([ $exported = 1 ] && echo "cache $(basename "$cache")" || echo 'NO cache: the export failed')"
  return $failed
}

for p in "${PHASES[@]}"; do
  "phase_$p" || STATUS=1
  write_report
done
echo "gpu-check: wrote $REPORT" >&2
exit $STATUS
