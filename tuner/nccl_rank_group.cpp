#ifdef CPGEN_HAVE_NCCL

#include "tuner/nccl_rank_group.h"

#include <nccl.h>

#include <cstdint>

#include "cpgen/error.h"
#include "cpgen/nccl_bootstrap.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/module.h"
#include "runtime/transport/nccl_check.h"

namespace cpgen {

NcclRankGroup::NcclRankGroup(ncclComm_t comm, int device) : comm_(comm), device_(device) {
  CPGEN_NCCL_CHECK(nccl::api().ncclCommUserRank(comm_, &rank_));
  CPGEN_NCCL_CHECK(nccl::api().ncclCommCount(comm_, &size_));
  use_primary_context(device_);
  stream_ = std::make_unique<gpu::Stream>();
}

std::unique_ptr<NcclRankGroup> NcclRankGroup::create(int rank, int world_size, int device, const std::string& id_file,
                                                     double timeout_s) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw_bad_input("rank " + std::to_string(rank) + " is outside a world of " + std::to_string(world_size) + " ranks");
  }
  // The same id-file handshake as RingAttention's communicators (cpgen/nccl_bootstrap.h).
  NcclFileBootstrap bootstrap;
  bootstrap.path = id_file;
  bootstrap.rank = rank;
  bootstrap.nranks = world_size;
  bootstrap.device = device;
  bootstrap.timeout_seconds = timeout_s;
  auto comm = static_cast<ncclComm_t>(nccl_comm_from_file(bootstrap));
  auto group = std::make_unique<NcclRankGroup>(comm, device);
  group->owns_comm_ = true;
  return group;
}

NcclRankGroup::~NcclRankGroup() {
  use_primary_context(device_);
  stream_.reset();
  if (owns_comm_) nccl::api().ncclCommDestroy(comm_);
}

std::string NcclRankGroup::broadcast_from_root(const std::string& bytes) {
  use_primary_context(device_);
  const cu::DriverApi& api = cu::driver();
  // The length first, so every rank can size its receive buffer; then the bytes.
  DeviceBuffer length_buffer(device_, sizeof(int64_t));
  int64_t length = rank_ == 0 ? static_cast<int64_t>(bytes.size()) : 0;
  length_buffer.upload(&length, sizeof length);
  CPGEN_NCCL_CHECK(nccl::api().ncclBroadcast(length_buffer.as<void>(), length_buffer.as<void>(), 1, ncclInt64, 0, comm_,
                                 reinterpret_cast<cudaStream_t>(stream_->get())));
  CPGEN_CU_CHECK(api.cuStreamSynchronize(stream_->get()));
  length_buffer.download(&length, sizeof length);
  if (length == 0) return std::string();
  DeviceBuffer payload(device_, static_cast<size_t>(length));
  if (rank_ == 0) payload.upload(bytes.data(), bytes.size());
  CPGEN_CU_CHECK(api.cuCtxSynchronize());
  CPGEN_NCCL_CHECK(nccl::api().ncclBroadcast(payload.as<void>(), payload.as<void>(), static_cast<size_t>(length), ncclChar, 0, comm_,
                                 reinterpret_cast<cudaStream_t>(stream_->get())));
  CPGEN_CU_CHECK(api.cuStreamSynchronize(stream_->get()));
  std::string out(static_cast<size_t>(length), '\0');
  payload.download(out.data(), out.size());
  return out;
}

}  // namespace cpgen

#endif  // CPGEN_HAVE_NCCL
