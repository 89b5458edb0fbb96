// Creating cpgen's NCCL communicator from an MPI communicator: rank 0 of `mpi_comm` makes the
// unique id and broadcasts it. Header-only: include <mpi.h> before this header and link MPI
// yourself; libcpgen has no MPI dependency.
#pragma once

#include <mpi.h>

#include <string>

#include "cpgen/error.h"
#include "cpgen/nccl_bootstrap.h"

namespace cpgen {

// Every rank of mpi_comm calls this; returns the ncclComm_t (as void*) of the same size and rank
// order. `device` is this rank's CUDA device ordinal.
inline void* nccl_comm_from_mpi(MPI_Comm mpi_comm, int device) {
  int rank = 0, nranks = 0;
  if (MPI_Comm_rank(mpi_comm, &rank) != MPI_SUCCESS || MPI_Comm_size(mpi_comm, &nranks) != MPI_SUCCESS)
    throw Error(ErrorKind::kNccl, "nccl_comm_from_mpi: MPI_Comm_rank/MPI_Comm_size failed");
  NcclUniqueId id{};
  if (rank == 0) id = nccl_unique_id();
  if (MPI_Bcast(id.data(), kNcclUniqueIdBytes, MPI_BYTE, 0, mpi_comm) != MPI_SUCCESS)
    throw Error(ErrorKind::kNccl, "nccl_comm_from_mpi: MPI_Bcast of the NCCL unique id failed on rank " +
                                      std::to_string(rank));
  return nccl_comm_init(id, rank, nranks, device);
}

}  // namespace cpgen
