// Run-time compilation of generated kernels with NVRTC, backed by the compiled-kernel store.
//
// compile_kernel renders a spec's source, and either reads its cubin from the store (no NVRTC
// call; CompileStats::from_store) or compiles it for one arch, parses ptxas' resource report, and
// stores it. Safe to call from many threads at once (the tuner compiles in a thread pool) and from
// several processes sharing one store; threads of one process asking for a kernel that another
// thread is compiling wait for that compile instead of repeating it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "generator/kernel_spec.h"
#include "runtime/jit/compiled_kernel.h"
#include "runtime/jit/kernel_store.h"

namespace cpgen {

// Throws Error(kBadInput) for an unsupported spec or arch, Error(kInfeasible) when
// check_feasibility rejects the spec on `arch`, a static_assert of the traits fails in NVRTC, or
// ptxas's registers do not fit a wgmma kernel's setmaxnreg plan (wgmma_register_plan_problem),
// and Error(kCompile) when NVRTC fails otherwise; the compile error's message carries the URI, the
// options, the path of the saved source, and the NVRTC log.
// `store` may be nullptr (always compile, store nothing).
// The wgmma family moves registers between warpgroups with setmaxnreg (traits_wgmma.cuh), and
// setmaxnreg.inc waits until the CTA's pool holds what it asks for (PTX ISA). The pool is what
// ptxas allocated per thread at entry (`registers`), for every thread. "" when the plan fits and
// never asks a consumer to shrink; else why not: such a kernel would hang (or be undefined) on
// its first setmaxnreg, so compile_kernel refuses it as infeasible. "" for other kinds.
std::string wgmma_register_plan_problem(const KernelSpec& spec, int registers);

CompiledKernel compile_kernel(const KernelSpec& spec, std::string_view arch,
                              KernelStore* store = default_kernel_store());

// The step below compile_kernel, for any source: `kernel_name` must be an extern "C" __global__
// function of `source`, and is also the NVRTC program name. Exposed for tools and tests.
CompiledKernel compile_source(const std::string& kernel_name, const std::string& source,
                              std::string_view arch, KernelStore* store);

// The NVRTC options used for `arch` (validated; throws kBadInput).
std::vector<std::string> compile_options(std::string_view arch);
// Whether the loaded NVRTC keeps a cache of its own (12.9 and later), which compile_options
// turns off with --no-cache so that every compile's log carries the ptxas resource lines.
bool nvrtc_has_own_cache();
// NVRTC's major.minor, e.g. "13.0".
std::string nvrtc_version();
// What identifies the compiler in store keys: the version plus the size of the loaded libnvrtc,
// which changes between patch releases that share a major.minor.
std::string nvrtc_version_tag();
// The store key of kernel `kernel_name` of `source` compiled with the templates it includes and
// compile_options(arch), by this NVRTC: a SHA-256 in hex.
std::string kernel_store_key(const std::string& kernel_name, const std::string& source,
                             std::string_view arch);
// The hash of kernel `spec`'s code as this build generates it (16 hex digits): its rendered
// source and every header NVRTC reads for it (the prelude and the templates it includes). A
// tuning record is trusted only for the same code (cache/environment.h), so an edit of the
// templates retires the timings of the kernels it changes and of no others.
std::string kernel_code_hash(const KernelSpec& spec);
// How many times this process has called nvrtcCompileProgram (tests check that the store works).
uint64_t nvrtc_compile_count();
// Where a failed compile's source, headers, options and log are saved: $TMPDIR/cpgen-<uid>/failed
// (user_temp_dir: created private, refused when another user made it).
std::string failed_compile_dir();

}  // namespace cpgen
