// The NCCL check macro, the same shape as CPGEN_CU_CHECK: a failed call throws Error(kNccl) with
// the call text, file:line, NCCL's name for the status and its last error message. Calls go through
// api() (nccl_library.h): CPGEN_NCCL_CHECK(nccl::api().ncclSend(...)). Only compiled
// where NCCL is built in (CPGEN_HAVE_NCCL): include it only from runtime/nccl_*.cpp (left out
// of builds without NCCL) or from code inside #ifdef CPGEN_HAVE_NCCL (tuner/nccl_rank_group.cpp).
#pragma once

#include "runtime/transport/nccl_library.h"

namespace cpgen::nccl {

[[noreturn]] void raise(ncclResult_t status, const char* call, const char* file, int line,
                        ncclComm_t comm = nullptr);

}  // namespace cpgen::nccl

#define CPGEN_NCCL_CHECK(call)                                                 \
  do {                                                                         \
    ncclResult_t cpgen_nccl_status_ = (call);                                  \
    if (cpgen_nccl_status_ != ncclSuccess && cpgen_nccl_status_ != ncclInProgress) \
      ::cpgen::nccl::raise(cpgen_nccl_status_, #call, __FILE__, __LINE__);     \
  } while (0)
