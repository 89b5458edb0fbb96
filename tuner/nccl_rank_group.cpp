#ifdef CPGEN_HAVE_NCCL

#include "tuner/nccl_rank_group.h"

#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cpgen/error.h"
#include "runtime/cuda_driver.h"
#include "runtime/device_buffer.h"
#include "runtime/module.h"

// Same shape as the CUDA and SQLite checks: the call, where, and NCCL's own message.
#define CPGEN_TUNER_NCCL_CHECK(call)                                                                    \
  do {                                                                                                  \
    ncclResult_t cpgen_nccl_status_ = (call);                                                           \
    if (cpgen_nccl_status_ != ncclSuccess) {                                                            \
      throw ::cpgen::Error(::cpgen::ErrorKind::kNccl, std::string("NCCL call " #call " failed at ") +    \
                                                          __FILE__ + ":" + std::to_string(__LINE__) + ": " + \
                                                          ncclGetErrorString(cpgen_nccl_status_));     \
    }                                                                                                   \
  } while (0)

namespace cpgen {

NcclRankGroup::NcclRankGroup(ncclComm_t comm, int device) : comm_(comm), device_(device) {
  CPGEN_TUNER_NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
  CPGEN_TUNER_NCCL_CHECK(ncclCommCount(comm_, &size_));
  use_primary_context(device_);
  CPGEN_CU_CHECK(cu::driver().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
}

std::unique_ptr<NcclRankGroup> NcclRankGroup::create(int rank, int world_size, int device, const std::string& id_file,
                                                     double timeout_s) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw_bad_input("rank " + std::to_string(rank) + " is outside a world of " + std::to_string(world_size) + " ranks");
  }
  ncclUniqueId id;
  if (rank == 0) {
    CPGEN_TUNER_NCCL_CHECK(ncclGetUniqueId(&id));
    const std::string tmp = id_file + ".tmp-" + std::to_string(::getpid());
    {
      std::ofstream out(tmp, std::ios::binary);
      out.write(id.internal, sizeof id.internal);
      if (!out.flush()) throw Error(ErrorKind::kIo, "cannot write the NCCL id file " + tmp);
    }
    std::filesystem::rename(tmp, id_file);
  } else {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (true) {
      std::ifstream in(id_file, std::ios::binary);
      if (in && in.read(id.internal, sizeof id.internal)) break;
      if (std::chrono::steady_clock::now() > deadline) {
        throw Error(ErrorKind::kNccl, "rank " + std::to_string(rank) + " waited " + std::to_string(timeout_s) +
                                          " s for rank 0's NCCL id in " + id_file + "; did rank 0 start?");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  use_primary_context(device);
  ncclComm_t comm = nullptr;
  CPGEN_TUNER_NCCL_CHECK(ncclCommInitRank(&comm, world_size, id, rank));
  auto group = std::make_unique<NcclRankGroup>(comm, device);
  group->owns_comm_ = true;
  return group;
}

NcclRankGroup::~NcclRankGroup() {
  use_primary_context(device_);
  if (stream_) cu::driver().cuStreamDestroy(stream_);
  if (owns_comm_) ncclCommDestroy(comm_);
}

std::string NcclRankGroup::broadcast_from_root(const std::string& bytes) {
  use_primary_context(device_);
  const cu::DriverApi& api = cu::driver();
  // The length first, so every rank can size its receive buffer; then the bytes.
  DeviceBuffer length_buffer(device_, sizeof(int64_t));
  int64_t length = rank_ == 0 ? static_cast<int64_t>(bytes.size()) : 0;
  length_buffer.upload(&length, sizeof length);
  // The upload ran on the legacy stream, which a non-blocking stream does not wait for.
  CPGEN_CU_CHECK(api.cuCtxSynchronize());
  CPGEN_TUNER_NCCL_CHECK(ncclBroadcast(length_buffer.as<void>(), length_buffer.as<void>(), 1, ncclInt64, 0, comm_,
                                       reinterpret_cast<cudaStream_t>(stream_)));
  CPGEN_CU_CHECK(api.cuStreamSynchronize(stream_));
  length_buffer.download(&length, sizeof length);
  if (length == 0) return std::string();
  DeviceBuffer payload(device_, static_cast<size_t>(length));
  if (rank_ == 0) payload.upload(bytes.data(), bytes.size());
  CPGEN_CU_CHECK(api.cuCtxSynchronize());
  CPGEN_TUNER_NCCL_CHECK(ncclBroadcast(payload.as<void>(), payload.as<void>(), static_cast<size_t>(length), ncclChar, 0, comm_,
                                       reinterpret_cast<cudaStream_t>(stream_)));
  CPGEN_CU_CHECK(api.cuStreamSynchronize(stream_));
  std::string out(static_cast<size_t>(length), '\0');
  payload.download(out.data(), out.size());
  return out;
}

}  // namespace cpgen

#endif  // CPGEN_HAVE_NCCL
