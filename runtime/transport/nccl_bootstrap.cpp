// NCCL communicator creation (include/cpgen/nccl_bootstrap.h). Built only with NCCL.
#include "cpgen/nccl_bootstrap.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cache/database.h"
#include "cpgen/error.h"
#include "runtime/core/text_file.h"
#include "runtime/cuda/module.h"
#include "runtime/transport/nccl_args.h"
#include "runtime/transport/nccl_check.h"

namespace cpgen {
namespace {

constexpr const char* kIdFileMagic = "cpgen-nccl-id/1";

std::string to_hex(const NcclUniqueId& id) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (char c : id) {
    auto b = static_cast<unsigned char>(c);
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

bool from_hex(const std::string& text, NcclUniqueId& id) {
  if (text.size() != 2 * id.size()) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < id.size(); ++i) {
    int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    id[i] = static_cast<char>(hi * 16 + lo);
  }
  return true;
}

// The file: magic, nranks, job key (or "-"), id in hex; one per line. Written whole or not at
// all (runtime/core/text_file.h): readers see either no file or the whole file.
void write_id_file(const NcclFileBootstrap& o, const NcclUniqueId& id) {
  std::ostringstream text;
  text << kIdFileMagic << "\n" << o.nranks << "\n" << (o.job_key.empty() ? "-" : o.job_key) << "\n" << to_hex(id) << "\n";
  write_file_atomically(o.path, "rank 0's NCCL id file " + o.path, text.str());
}

NcclUniqueId wait_for_id_file(const NcclFileBootstrap& o) {
  const std::string who = "rank " + std::to_string(o.rank);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(o.timeout_seconds);
  while (true) {
    std::ifstream in(o.path);
    if (in) {
      std::string magic, nranks, key, hex;
      std::getline(in, magic);
      std::getline(in, nranks);
      std::getline(in, key);
      std::getline(in, hex);
      NcclUniqueId id{};
      if (magic != kIdFileMagic || !from_hex(hex, id))
        throw Error(ErrorKind::kIo, who + ": " + o.path + " is not a cpgen NCCL id file (expected '" +
                                        kIdFileMagic + "')");
      const std::string want_key = o.job_key.empty() ? "-" : o.job_key;
      if (key == want_key) {
        if (nranks != std::to_string(o.nranks))
          throw Error(ErrorKind::kBadInput, who + ": " + o.path + " was written for " + nranks +
                                                " ranks, this rank expects " +
                                                std::to_string(o.nranks));
        return id;
      }
      // Another job's file: keep waiting for ours.
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw Error(ErrorKind::kNccl, who + ": no NCCL id file for job key '" + o.job_key + "' at " +
                                        o.path + " after " + std::to_string(o.timeout_seconds) +
                                        " s; is rank 0 running, and does every rank see that path?");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

bool nccl_available() { return true; }

const NcclLibrary& nccl_library() { return nccl::api().library; }

NcclUniqueId nccl_unique_id() {
  ncclUniqueId raw;
  CPGEN_NCCL_CHECK(nccl::api().ncclGetUniqueId(&raw));
  NcclUniqueId id;
  static_assert(sizeof(raw.internal) == kNcclUniqueIdBytes);
  std::memcpy(id.data(), raw.internal, id.size());
  return id;
}

void* nccl_comm_init(const NcclUniqueId& id, int rank, int nranks, int device) {
  check_nccl_rank_args("nccl_comm_init", rank, nranks, device);
  // NCCL works on the calling thread's current device; the runtime adopts the primary context
  // made current through the driver API. The caller's own context is current again on return (a
  // PyTorch rank on another device would otherwise allocate its next tensors on this one).
  const CallerContextGuard keep;
  use_primary_context(device);
  ncclUniqueId raw;
  std::memcpy(raw.internal, id.data(), id.size());
  ncclComm_t comm = nullptr;
  CPGEN_NCCL_CHECK(nccl::api().ncclCommInitRank(&comm, nranks, raw, rank));
  return comm;
}

void nccl_comm_destroy(void* comm) {
  if (comm) CPGEN_NCCL_CHECK(nccl::api().ncclCommDestroy(static_cast<ncclComm_t>(comm)));
}

namespace {
// A double as %g (std::to_string printed 1e300 with its 300 digits).
std::string timeout_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}
}  // namespace

void* nccl_comm_from_file(const NcclFileBootstrap& o) {
  if (o.path.empty()) throw_bad_input("nccl_comm_from_file: path is empty");
  check_nccl_rank_args("nccl_comm_from_file", o.rank, o.nranks, o.device);
  // 0 or less gave up at once, NaN never, and 1e300 never either (a ctypes caller cannot
  // interrupt the wait): a day at most.
  if (!(o.timeout_seconds > 0) || !(o.timeout_seconds <= kMaxBootstrapTimeoutSeconds))
    throw_bad_input("nccl_comm_from_file: timeout_seconds " + timeout_text(o.timeout_seconds) +
                    " is not allowed; allowed: seconds > 0 and at most " +
                    std::to_string(static_cast<int>(kMaxBootstrapTimeoutSeconds)) + " (a day)");
  NcclUniqueId id{};
  if (o.rank != 0) return nccl_comm_init(wait_for_id_file(o), o.rank, o.nranks, o.device);
  id = nccl_unique_id();
  write_id_file(o, id);
  // The file the id went to (write_file_atomically writes through a symbolic link), removed.
  const auto remove_id_file = [&o] {
    std::error_code ec;
    std::filesystem::path written = std::filesystem::weakly_canonical(o.path, ec);
    if (ec) written = o.path;
    if (std::filesystem::remove(written, ec) || !ec) return std::string();
    return written.string() + ": " + ec.message();
  };
  void* comm = nullptr;
  try {
    comm = nccl_comm_init(id, o.rank, o.nranks, o.device);
  } catch (...) {
    // A failed rank 0 takes its id back: the file would otherwise wait there for the next job's
    // ranks (with no job key, any of them) to join an id no rank 0 serves.
    remove_id_file();
    throw;
  }
  // Init is collective: once it returned on rank 0 every rank has read the file. A failure to
  // remove it loses nothing of this job, whose communicator stands (every rank holds its part),
  // so it is a warning: the next job's ranks would read a stale id.
  if (const std::string failed = remove_id_file(); !failed.empty())
    warn("rank 0 could not remove its NCCL id file " + failed +
         "; remove it before another job's ranks start, or they read a stale id");
  return comm;
}

}  // namespace cpgen
