// cpgen/nccl_mpi.h over the stand-in MPI of fake_mpi/mpi.h: three ranks as threads call
// nccl_comm_from_mpi and each prints "rank R: ok" or "rank R: error: <message>" once it has
// returned. Run with an NCCL that cannot load (CPGEN_NCCL_LIBRARY=/nonexistent) every rank must
// return with an error; before, rank 0 threw before the broadcast and the others waited in it
// for good (tests/runtime/transport/nccl_mpi_test.cpp runs this under a timeout).
#include <cstdio>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <mpi.h>  // fake_mpi/mpi.h
#include "cpgen/nccl_mpi.h"

int main() {
  constexpr int kRanks = 3;
  fake_mpi().size = kRanks;
  std::mutex print;
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([r, &print] {
      fake_mpi_set_rank(r);
      std::string result = "ok";
      try {
        void* comm = cpgen::nccl_comm_from_mpi(MPI_COMM_WORLD, 0);
        cpgen::nccl_comm_destroy(comm);
      } catch (const std::exception& e) {
        result = std::string("error: ") + e.what();
      }
      std::lock_guard<std::mutex> lock(print);
      std::printf("rank %d: %s\n", r, result.c_str());
    });
  }
  for (std::thread& t : ranks) t.join();
  return 0;
}
