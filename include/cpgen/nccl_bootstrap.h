// Creating the NCCL communicator a RingAttention runs on. Three ways:
// - the caller already has an ncclComm_t (a framework's process group): pass it to
//   RingAttention::nccl directly; nothing here is needed;
// - a shared file: rank 0 writes NCCL's unique id to a path every rank can read (atomically:
//   written to a temporary name, then renamed), the others wait for it with a timeout;
// - MPI: cpgen/nccl_mpi.h broadcasts the id over an MPI communicator (header-only, so that
//   libcpgen itself never depends on MPI).
// Communicators are ncclComm_t passed as void*, so that no NCCL header is needed here. Every
// function throws Error(kNccl) when cpgen was built without NCCL.
#pragma once

#include <array>
#include <string>

#include "cpgen/cxx_abi.h"

namespace cpgen {

inline constexpr int kNcclUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
using NcclUniqueId = std::array<char, kNcclUniqueIdBytes>;

bool nccl_available();  // cpgen was built with NCCL

// The NCCL library cpgen runs on. libcpgen does not link NCCL: it loads it when one of its NCCL
// functions first runs, taking, in this order, the file CPGEN_NCCL_LIBRARY names, an NCCL the
// process has already loaded (a framework's: communicators passed in are that NCCL's), the one
// cpgen was built with, and libnccl.so.2 on the library search path. Loading libcpgen and then
// PyTorch therefore works; an NCCL loaded by cpgen first becomes the process's NCCL for whatever
// loads later. Throws Error(kNccl) naming why none could be used (none found, older than 2.18).
struct NcclLibrary {
  int version = 0;   // as ncclGetVersion reports it: 22809 for 2.28.9
  std::string path;  // the library file
};
const NcclLibrary& nccl_library();  // loaded once; the reference is valid for the process's life

// A fresh unique id (rank 0 creates it, every rank passes the same bytes to nccl_comm_init).
NcclUniqueId nccl_unique_id();
// ncclCommInitRank on CUDA device `device`; returns the ncclComm_t.
void* nccl_comm_init(const NcclUniqueId& id, int rank, int nranks, int device);
// ncclCommDestroy; nullptr is allowed.
void nccl_comm_destroy(void* comm);

inline constexpr double kMaxBootstrapTimeoutSeconds = 86400;  // NcclFileBootstrap::timeout_seconds

struct NcclFileBootstrap {
  std::string path;              // on a file system every rank sees; fresh per job
  int rank = 0;
  int nranks = 1;
  int device = 0;                // CUDA device ordinal of this rank
  double timeout_seconds = 120;  // how long ranks != 0 wait for the file (> 0, a day at most)
  std::string job_key;           // optional: written by rank 0, must match on the others, so a
                                 // stale file from an earlier job is never used
};
// Rank 0 writes the id file and removes it once every rank joined (or when its own init fails);
// returns the ncclComm_t. A negative device is kBadInput.
// Errors name the rank, the path and what went wrong (timeout, mismatched nranks or job key).
void* nccl_comm_from_file(const NcclFileBootstrap& options);

}  // namespace cpgen
