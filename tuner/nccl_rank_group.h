// The ranks of a multi-rank tuning job over NCCL: rank 0's decisions reach every rank with
// ncclBroadcast (a length, then the bytes) on a dedicated stream. Built only with NCCL.
#pragma once

#ifdef CPGEN_HAVE_NCCL

#include <memory>
#include <string>

#include "runtime/cuda/gpu_stream.h"
#include "tuner/rank_group.h"

typedef struct ncclComm* ncclComm_t;

namespace cpgen {

class NcclRankGroup : public RankGroup {
 public:
  // Uses an existing communicator (the framework's); it is not destroyed here.
  NcclRankGroup(ncclComm_t comm, int device);
  // Creates a communicator of `world_size` ranks through nccl_comm_from_file
  // (cpgen/nccl_bootstrap.h): rank 0 writes an NCCL unique id to `id_file` (atomically, by
  // rename; removed once every rank joined), the other ranks wait up to `timeout_s` for it.
  static std::unique_ptr<NcclRankGroup> create(int rank, int world_size, int device, const std::string& id_file,
                                               double timeout_s = 120);
  ~NcclRankGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string broadcast_from_root(const std::string& bytes) override;

 private:
  ncclComm_t comm_;
  bool owns_comm_ = false;
  int device_;
  int rank_ = 0;
  int size_ = 1;
  std::unique_ptr<gpu::Stream> stream_;
};

}  // namespace cpgen

#endif  // CPGEN_HAVE_NCCL
