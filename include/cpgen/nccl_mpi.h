// Creating cpgen's NCCL communicator from an MPI communicator: rank 0 of `mpi_comm` makes the
// unique id and broadcasts it. Header-only: include <mpi.h> before this header and link MPI
// yourself; libcpgen has no MPI dependency.
#pragma once

#include <mpi.h>

#include <cstdio>
#include <exception>
#include <string>

#include "cpgen/error.h"
#include "cpgen/nccl_bootstrap.h"

namespace cpgen {

// Every rank of mpi_comm calls this; returns the ncclComm_t (as void*) of the same size and rank
// order. `device` is this rank's CUDA device ordinal. When rank 0 cannot make the id (no NCCL, a
// CPGEN_NCCL_LIBRARY that does not load), rank 0 throws its error and every other rank
// Error(kNccl) "nccl_comm_from_mpi: rank 0 could not make the NCCL unique id: <its reason>".
inline void* nccl_comm_from_mpi(MPI_Comm mpi_comm, int device) {
  int rank = 0, nranks = 0;
  if (MPI_Comm_rank(mpi_comm, &rank) != MPI_SUCCESS || MPI_Comm_size(mpi_comm, &nranks) != MPI_SUCCESS)
    throw Error(ErrorKind::kNccl, "nccl_comm_from_mpi: MPI_Comm_rank/MPI_Comm_size failed");
  // Rank 0's id, or why it has none, in the one broadcast every rank takes part in: a rank 0 that
  // threw before it would leave the others waiting in MPI_Bcast for good.
  struct IdMessage {
    NcclUniqueId id;
    char error[512];  // empty: the id is good
  } message{};
  std::exception_ptr failure;
  if (rank == 0) {
    try {
      message.id = nccl_unique_id();
    } catch (const std::exception& e) {
      failure = std::current_exception();
      std::snprintf(message.error, sizeof message.error, "%s", e.what()[0] ? e.what() : "unknown error");
    }
  }
  if (MPI_Bcast(&message, static_cast<int>(sizeof message), MPI_BYTE, 0, mpi_comm) != MPI_SUCCESS)
    throw Error(ErrorKind::kNccl, "nccl_comm_from_mpi: MPI_Bcast of the NCCL unique id failed on rank " +
                                      std::to_string(rank));
  if (failure) std::rethrow_exception(failure);
  if (message.error[0] != '\0')
    throw Error(ErrorKind::kNccl, "nccl_comm_from_mpi: rank 0 could not make the NCCL unique id: " +
                                      std::string(message.error));
  return nccl_comm_init(message.id, rank, nranks, device);
}

}  // namespace cpgen
