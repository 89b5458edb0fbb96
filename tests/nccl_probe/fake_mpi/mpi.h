// A stand-in for <mpi.h> with the calls cpgen/nccl_mpi.h makes (MPI_Comm_rank, MPI_Comm_size,
// MPI_Bcast), whose ranks are the threads of one process (mpi_probe.cpp): each thread sets its
// rank with fake_mpi_set_rank before calling. MPI_Bcast waits until every rank has arrived (a
// barrier, stronger than MPI asks), so a rank that never calls it leaves the others waiting, as
// a real MPI would. It serves one broadcast at a time: the root may not start the next before
// every rank has copied the last (mpi_probe.cpp makes one).
#pragma once

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

using MPI_Comm = int;
using MPI_Datatype = int;
inline constexpr MPI_Comm MPI_COMM_WORLD = 0;
inline constexpr MPI_Datatype MPI_BYTE = 1;
inline constexpr int MPI_SUCCESS = 0;

struct FakeMpi {
  int size = 1;
  std::mutex mutex;
  std::condition_variable changed;
  int arrived = 0;
  long generation = 0;
  std::vector<char> root_bytes;
};
inline FakeMpi& fake_mpi() {
  static FakeMpi world;
  return world;
}
inline thread_local int fake_mpi_rank = 0;
inline void fake_mpi_set_rank(int rank) { fake_mpi_rank = rank; }

inline int MPI_Comm_rank(MPI_Comm, int* rank) {
  *rank = fake_mpi_rank;
  return MPI_SUCCESS;
}
inline int MPI_Comm_size(MPI_Comm, int* size) {
  *size = fake_mpi().size;
  return MPI_SUCCESS;
}
inline int MPI_Bcast(void* buffer, int count, MPI_Datatype, int root, MPI_Comm) {
  FakeMpi& w = fake_mpi();
  std::unique_lock<std::mutex> lock(w.mutex);
  const long generation = w.generation;
  if (fake_mpi_rank == root) w.root_bytes.assign(static_cast<char*>(buffer), static_cast<char*>(buffer) + count);
  if (++w.arrived == w.size) {
    w.arrived = 0;
    ++w.generation;
    w.changed.notify_all();
  } else {
    w.changed.wait(lock, [&] { return w.generation != generation; });
  }
  if (fake_mpi_rank != root) {
    if (static_cast<size_t>(count) != w.root_bytes.size()) return 1;  // the ranks disagree on the count
    std::memcpy(buffer, w.root_bytes.data(), static_cast<size_t>(count));
  }
  return MPI_SUCCESS;
}
