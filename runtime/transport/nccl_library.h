// NCCL, loaded at run time with dlopen instead of linked, for two reasons:
// - one NCCL per process. A communicator the caller passes in (PyTorch's process group, say) was
//   made by the NCCL the caller loaded, and only that one may use it. The dynamic loader reuses an
//   already loaded library of the same soname, so loading cpgen's own NCCL with libcpgen would
//   make it the process's NCCL for everything loaded later: importing PyTorch after libcpgen
//   failed (an older NCCL without the functions PyTorch needs) or crashed;
// - libcpgen loads, and everything but the NCCL transport runs, where NCCL is missing.
// Nothing loads NCCL until an NCCL function of cpgen runs. The order is in nccl_library.cpp.
// Only compiled where NCCL is built in (CPGEN_HAVE_NCCL), like nccl_check.h.
#pragma once

#include <nccl.h>

#include <string>

#include "cpgen/nccl_bootstrap.h"

namespace cpgen::nccl {

// 2.18.0: ncclCommSplit, the newest function of nccl_fns.inc.
inline constexpr int kMinNcclVersion = 21800;

// Function pointers, named as in nccl.h (call them as api().ncclSend(...)).
struct NcclApi {
#define CPGEN_NCCL_FN(name) decltype(&::name) name = nullptr;
#include "runtime/transport/nccl_fns.inc"
#undef CPGEN_NCCL_FN
  NcclLibrary library;  // ncclGetVersion's code and the file the functions were resolved from
};

// Loads NCCL on first use and returns it; throws Error(kNccl) naming why not (no library found,
// one older than kMinNcclVersion, a function missing), with the same message on every call.
const NcclApi& api();

// "2.28.9" for 22809; NCCL before 2.9 encoded versions as major * 1000 + minor * 100 + patch.
std::string version_text(int code);

}  // namespace cpgen::nccl
