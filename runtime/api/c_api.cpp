// The C ABI (include/cpgen/cpgen_c.h). Every entry point runs its C++ body inside guard(), which
// turns any exception into a status and a per-thread message, so nothing is thrown across the
// boundary.
#include "cpgen/cpgen_c.h"

#include <cstddef>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "cpgen/error.h"
#include "cpgen/nccl_bootstrap.h"
#include "cpgen/problem.h"
#include "cpgen/ring_attention.h"
#include "runtime/core/problem_limits.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/module.h"
#include "runtime/ring/partition.h"
#include "runtime/ring/kernel_support.h"
#include "runtime/transport/nccl_args.h"

struct cpgen_ring {
  cpgen::RingAttention ring;
};

namespace {

thread_local std::string g_last_error;

cpgen_status status_of(cpgen::ErrorKind kind) {
  switch (kind) {
    case cpgen::ErrorKind::kBadInput: return CPGEN_ERR_BAD_INPUT;
    case cpgen::ErrorKind::kInfeasible: return CPGEN_ERR_INFEASIBLE;
    case cpgen::ErrorKind::kCompile: return CPGEN_ERR_COMPILE;
    case cpgen::ErrorKind::kCuda: return CPGEN_ERR_CUDA;
    case cpgen::ErrorKind::kNccl: return CPGEN_ERR_NCCL;
    case cpgen::ErrorKind::kDatabase: return CPGEN_ERR_DATABASE;
    case cpgen::ErrorKind::kIo: return CPGEN_ERR_IO;
    case cpgen::ErrorKind::kNoDevice: return CPGEN_ERR_NO_DEVICE;
    case cpgen::ErrorKind::kInternal: return CPGEN_ERR_INTERNAL;
  }
  return CPGEN_ERR_INTERNAL;
}

// Where g_last_error could not take a message (no memory left for its copy): a fixed one.
thread_local const char* g_fixed_error = nullptr;

// The failed call's message, `prefix` then `text`. Storing it may allocate, and an allocation
// that throws in guard's handlers would escape the noexcept guard (std::terminate): with no memory
// for the copy, cpgen_last_error says so instead.
void set_last_error(const char* prefix, const char* text) noexcept {
  try {
    g_last_error.assign(prefix);
    g_last_error.append(text);
    g_fixed_error = nullptr;
  } catch (...) {
    g_fixed_error = "out of host memory (the error's message could not be stored)";
  }
}

template <typename Body>
cpgen_status guard(Body&& body) noexcept {
  try {
    body();
    return CPGEN_OK;
  } catch (const cpgen::Error& e) {
    set_last_error("", e.what());
    return status_of(e.kind());
  } catch (const std::bad_alloc&) {
    set_last_error("", "out of host memory");
    return CPGEN_ERR_INTERNAL;
  } catch (const std::exception& e) {
    set_last_error("internal error: ", e.what());
    return CPGEN_ERR_INTERNAL;
  } catch (...) {
    set_last_error("", "internal error: unknown exception");
    return CPGEN_ERR_INTERNAL;
  }
}

void require(const void* pointer, const char* name, const char* function) {
  if (!pointer) cpgen::throw_bad_input(std::string(function) + ": " + name + " is NULL");
}

// The bytes of a version-0 struct: the fields up to softmax_scale.
constexpr size_t kVersion0Size = offsetof(cpgen_problem, documents);

// 0 or version 0's own size (an FFI caller that lays out the version-0 struct sets its size, as
// the header says) for version 0, sizeof(cpgen_problem) for version 1.
bool known_struct_size(uint64_t size) { return size == 0 || size == kVersion0Size || size == sizeof(cpgen_problem); }

// `size` as the caller gave it: the struct's int32 field, or init_sized's size_t (2^63 was printed
// as a negative size).
template <typename Size>
void check_struct_size(Size size, const char* function) {
  bool known = known_struct_size(static_cast<uint64_t>(size));
  if constexpr (std::is_signed_v<Size>) known = known && size >= 0;
  if (!known)
    cpgen::throw_bad_input(std::string(function) + ": struct_size " + std::to_string(size) +
                           " is not a cpgen_problem this library knows; allowed: 0 or " + std::to_string(kVersion0Size) +
                           " (version 0) or " +
                           std::to_string(sizeof(cpgen_problem)) + " (version 1; fill it with cpgen_problem_init_sized)");
}

cpgen::Problem to_problem(const cpgen_problem* c, const char* function, bool for_kernels = true) {
  require(c, "problem", function);
  cpgen::Problem p;
  p.batch = c->batch;
  p.q_heads = c->q_heads;
  p.kv_heads = c->kv_heads;
  p.head_dim = c->head_dim;
  p.seq_len = c->seq_len;
  p.cp_size = c->cp_size;
  switch (c->dtype) {
    case CPGEN_DTYPE_BF16: p.dtype = cpgen::Dtype::kBf16; break;
    case CPGEN_DTYPE_FP16: p.dtype = cpgen::Dtype::kFp16; break;
    default:
      cpgen::throw_bad_input(std::string(function) + ": dtype " + std::to_string(c->dtype) +
                             " is not supported; allowed: 0 (bf16), 1 (fp16)");
  }
  if (c->causal != 0 && c->causal != 1)
    cpgen::throw_bad_input(std::string(function) + ": causal " + std::to_string(c->causal) +
                           " is not allowed; allowed: 0, 1");
  p.causal = c->causal == 1;
  switch (c->scheme) {
    case CPGEN_SCHEME_CONTIGUOUS: p.scheme = cpgen::Scheme::kContiguous; break;
    case CPGEN_SCHEME_ZIGZAG: p.scheme = cpgen::Scheme::kZigzag; break;
    case CPGEN_SCHEME_ZIGZAG_TOKEN: p.scheme = cpgen::Scheme::kZigzagToken; break;
    case CPGEN_SCHEME_STRIPED: p.scheme = cpgen::Scheme::kStriped; break;
    default:
      cpgen::throw_bad_input(std::string(function) + ": scheme " + std::to_string(c->scheme) +
                             " is not supported; allowed: 0 (contiguous), 1 (zigzag), "
                             "2 (zigzag-token), 3 (striped)");
  }
  check_struct_size(c->struct_size, function);
  p.softmax_scale = c->softmax_scale;
  if (c->struct_size == static_cast<int32_t>(sizeof(cpgen_problem))) {  // version 1: the mask and the layout
    if (c->document_count < 0 || (c->document_count > 0 && !c->documents))
      cpgen::throw_bad_input(std::string(function) + ": document_count " + std::to_string(c->document_count) +
                             (c->document_count < 0 ? " is negative" : " with documents NULL") +
                             "; allowed: 0 (one document), or a count with that many lengths in documents");
    // The limit before the copy: a count past it would read (or, wrapping the pointer sum, skip)
    // memory the caller never gave.
    if (c->document_count > cpgen::kMaxDocuments)
      cpgen::throw_bad_input(std::string(function) + ": document_count " + std::to_string(c->document_count) +
                             " is too large; at most " + std::to_string(cpgen::kMaxDocuments) + " documents are allowed");
    if (c->document_count > 0) p.documents.assign(c->documents, c->documents + c->document_count);
    p.window_left = c->window_left;
    p.window_right = c->window_right;
    p.softcap = c->softcap;
    switch (c->layout) {
      case CPGEN_LAYOUT_BHSD: p.layout = "bhsd"; break;
      case CPGEN_LAYOUT_BSHD: p.layout = "bshd"; break;
      case CPGEN_LAYOUT_SBHD: p.layout = "sbhd"; break;
      case CPGEN_LAYOUT_THD: p.layout = "thd"; break;
      default:
        cpgen::throw_bad_input(std::string(function) + ": layout " + std::to_string(c->layout) +
                               " is not supported; allowed: 0 (bhsd), 1 (bshd), 2 (sbhd), 3 (thd)");
    }
    if (c->reserved != 0)
      cpgen::throw_bad_input(std::string(function) + ": reserved must be 0 (fill the struct with cpgen_problem_init_sized)");
  }
  p.validate();
  // What the ring kernels run (creating a ring); the problem itself may be wider.
  if (for_kernels) cpgen::check_kernel_ring_problem(p);
  return p;
}

// The C strides are cpgen::ShardStrides field for field.
static_assert(sizeof(cpgen_shard_strides) == sizeof(cpgen::ShardStrides) &&
              offsetof(cpgen_shard_strides, dv) == offsetof(cpgen::ShardStrides, dv) &&
              offsetof(cpgen_tensor_strides, row) == offsetof(cpgen::TensorStrides, row));

const cpgen::ShardStrides* to_strides(const cpgen_shard_strides* strides, cpgen::ShardStrides& storage) {
  if (!strides) return nullptr;
  const cpgen_tensor_strides* from[] = {&strides->q,    &strides->k,  &strides->v,  &strides->out,
                                        &strides->dout, &strides->dq, &strides->dk, &strides->dv};
  cpgen::TensorStrides* to[] = {&storage.q,    &storage.k,  &storage.v,  &storage.out,
                                &storage.dout, &storage.dq, &storage.dk, &storage.dv};
  for (size_t i = 0; i < 8; ++i) *to[i] = {from[i]->batch, from[i]->head, from[i]->row};
  return &storage;
}

cpgen::RingOptions options_for(const char* database_path) {
  cpgen::RingOptions options;
  if (database_path) options.database_path = database_path;
  return options;
}

}  // namespace

extern "C" {

const char* cpgen_version(void) { return cpgen::version(); }

const char* cpgen_last_error(void) { return g_fixed_error ? g_fixed_error : g_last_error.c_str(); }

const char* cpgen_status_name(int status) {
  switch (status) {
    case CPGEN_OK: return "ok";
    case CPGEN_ERR_BAD_INPUT: return cpgen::error_kind_name(cpgen::ErrorKind::kBadInput);
    case CPGEN_ERR_INFEASIBLE: return cpgen::error_kind_name(cpgen::ErrorKind::kInfeasible);
    case CPGEN_ERR_COMPILE: return cpgen::error_kind_name(cpgen::ErrorKind::kCompile);
    case CPGEN_ERR_CUDA: return cpgen::error_kind_name(cpgen::ErrorKind::kCuda);
    case CPGEN_ERR_NCCL: return cpgen::error_kind_name(cpgen::ErrorKind::kNccl);
    case CPGEN_ERR_DATABASE: return cpgen::error_kind_name(cpgen::ErrorKind::kDatabase);
    case CPGEN_ERR_IO: return cpgen::error_kind_name(cpgen::ErrorKind::kIo);
    case CPGEN_ERR_NO_DEVICE: return cpgen::error_kind_name(cpgen::ErrorKind::kNoDevice);
    case CPGEN_ERR_INTERNAL: return cpgen::error_kind_name(cpgen::ErrorKind::kInternal);
    default: return "unknown status";
  }
}

cpgen_status cpgen_problem_init_sized(cpgen_problem* problem, size_t struct_size) {
  return guard([&] {
    const char* fn = "cpgen_problem_init_sized";
    require(problem, "problem", fn);
    // Version 0's own size (its struct ends at softmax_scale) stands for version 0, as 0 does.
    if (struct_size == kVersion0Size) struct_size = 0;
    check_struct_size(struct_size, fn);
    cpgen_problem defaults{};
    defaults.batch = 1;
    defaults.cp_size = 1;
    defaults.dtype = CPGEN_DTYPE_BF16;
    defaults.causal = 1;
    defaults.scheme = CPGEN_SCHEME_ZIGZAG;
    defaults.struct_size = static_cast<int32_t>(struct_size);
    defaults.window_left = -1;
    defaults.window_right = -1;
    defaults.layout = CPGEN_LAYOUT_BHSD;
    // Never past the caller's struct: a version-0 caller's ends at softmax_scale.
    std::memcpy(problem, &defaults, struct_size == 0 ? kVersion0Size : struct_size);
  });
}

// Version 0's symbol (the header's macro of the same name passes the struct's size instead).
cpgen_status(cpgen_problem_init)(cpgen_problem* problem) { return cpgen_problem_init_sized(problem, 0); }

cpgen_status cpgen_problem_validate(const cpgen_problem* problem) {
  return guard([&] { to_problem(problem, "cpgen_problem_validate", false); });
}

cpgen_status cpgen_partition_rows(const cpgen_problem* problem, int32_t rank, int64_t* rows) {
  return guard([&] {
    const char* fn = "cpgen_partition_rows";
    const cpgen::Problem p = to_problem(problem, fn, false);
    require(rows, "rows", fn);
    if (rank < 0 || rank >= p.cp_size)
      cpgen::throw_bad_input(std::string(fn) + ": rank " + std::to_string(rank) + " is outside [0, cp_size " +
                             std::to_string(p.cp_size) + ")");
    *rows = cpgen::partition_rows(p.scheme, p.seq_len, static_cast<int>(p.cp_size), rank, p.documents);
  });
}

cpgen_status cpgen_partition_positions(const cpgen_problem* problem, int32_t rank,
                                       int64_t* positions, size_t capacity) {
  return guard([&] {
    const char* fn = "cpgen_partition_positions";
    cpgen::Problem p = to_problem(problem, fn, false);
    if (rank < 0 || rank >= p.cp_size)
      cpgen::throw_bad_input(std::string(fn) + ": rank " + std::to_string(rank) +
                             " is outside [0, cp_size " + std::to_string(p.cp_size) + ")");
    // The capacity check needs the count only; the positions are listed once it passes.
    const int64_t rows = cpgen::partition_rows(p.scheme, p.seq_len, static_cast<int>(p.cp_size), rank, p.documents);
    if (rows == 0) return;  // an empty array: positions may be NULL, as a framework's empty tensor is
    require(positions, "positions", fn);
    if (capacity < static_cast<uint64_t>(rows))
      cpgen::throw_bad_input(std::string(fn) + ": capacity " + std::to_string(capacity) + " is less than the " +
                             std::to_string(rows) + " rows of rank " + std::to_string(rank) + " (cpgen_partition_rows)");
    const std::vector<int64_t> local =
        cpgen::partition_positions(p.scheme, p.seq_len, static_cast<int>(p.cp_size), rank, p.documents);
    for (size_t i = 0; i < local.size(); ++i) positions[i] = local[i];
  });
}

cpgen_status cpgen_device_count(int32_t* count) {
  return guard([&] {
    require(count, "count", "cpgen_device_count");
    *count = cpgen::cu::device_count();
  });
}

cpgen_status cpgen_nccl_comm_from_file(const char* path, int32_t rank, int32_t nranks,
                                       int32_t device, double timeout_seconds, const char* job_key,
                                       void** comm) {
  return guard([&] {
    const char* fn = "cpgen_nccl_comm_from_file";
    require(comm, "comm", fn);
    *comm = nullptr;
    require(path, "path", fn);
    cpgen::NcclFileBootstrap o;
    o.path = path;
    o.rank = rank;
    o.nranks = nranks;
    o.device = device;
    if (timeout_seconds > 0) o.timeout_seconds = timeout_seconds;
    if (job_key) o.job_key = job_key;
    *comm = cpgen::nccl_comm_from_file(o);
  });
}

static_assert(CPGEN_NCCL_UNIQUE_ID_BYTES == cpgen::kNcclUniqueIdBytes);

namespace {
void require_unique_id_size(size_t size, const char* fn) {
  if (size != cpgen::kNcclUniqueIdBytes)
    cpgen::throw_bad_input(std::string(fn) + ": size " + std::to_string(size) + " is not an NCCL unique id's " +
                           std::to_string(cpgen::kNcclUniqueIdBytes) + " bytes (CPGEN_NCCL_UNIQUE_ID_BYTES)");
}
}  // namespace

cpgen_status cpgen_nccl_unique_id(void* id, size_t size) {
  return guard([&] {
    const char* fn = "cpgen_nccl_unique_id";
    require(id, "id", fn);
    require_unique_id_size(size, fn);
    const cpgen::NcclUniqueId fresh = cpgen::nccl_unique_id();
    std::memcpy(id, fresh.data(), fresh.size());
  });
}

cpgen_status cpgen_nccl_comm_init_rank(const void* id, size_t size, int32_t rank, int32_t nranks, int32_t device,
                                       void** comm) {
  return guard([&] {
    const char* fn = "cpgen_nccl_comm_init_rank";
    require(comm, "comm", fn);
    *comm = nullptr;
    require(id, "id", fn);
    require_unique_id_size(size, fn);
    cpgen::check_nccl_rank_args(fn, rank, nranks, device);
    cpgen::NcclUniqueId unique;
    std::memcpy(unique.data(), id, unique.size());
    *comm = cpgen::nccl_comm_init(unique, rank, nranks, device);
  });
}

cpgen_status cpgen_nccl_comm_destroy(void* comm) {
  return guard([&] { cpgen::nccl_comm_destroy(comm); });
}

cpgen_status cpgen_nccl_library(int32_t* version, const char** path) {
  return guard([&] {
    const cpgen::NcclLibrary& library = cpgen::nccl_library();  // loaded once, lives as long as the process
    if (version) *version = library.version;
    if (path) *path = library.path.c_str();
  });
}

cpgen_status cpgen_ring_create_loopback(const cpgen_problem* problem, int32_t device,
                                        const char* database_path, cpgen_ring** ring) {
  return guard([&] {
    const char* fn = "cpgen_ring_create_loopback";
    require(ring, "ring", fn);
    *ring = nullptr;
    cpgen::RingOptions options = options_for(database_path);
    options.device = device;
    *ring = new cpgen_ring{cpgen::RingAttention::loopback(to_problem(problem, fn), options)};
  });
}

cpgen_status cpgen_ring_create_nccl(const cpgen_problem* problem, void* nccl_comm,
                                    const char* database_path, double watchdog_seconds,
                                    cpgen_ring** ring) {
  return guard([&] {
    const char* fn = "cpgen_ring_create_nccl";
    require(ring, "ring", fn);
    *ring = nullptr;
    require(nccl_comm, "nccl_comm", fn);
    cpgen::RingOptions options = options_for(database_path);
    if (watchdog_seconds > 0) options.watchdog_seconds = watchdog_seconds;
    *ring = new cpgen_ring{cpgen::RingAttention::nccl(to_problem(problem, fn), nccl_comm, options)};
  });
}

cpgen_status cpgen_ring_forward(cpgen_ring* ring, const void* q, const void* k, const void* v,
                                void* out, float* lse, void* stream) {
  return guard([&] {
    require(ring, "ring", "cpgen_ring_forward");
    ring->ring.forward(q, k, v, out, lse, stream);
  });
}

cpgen_status cpgen_ring_forward_strided(cpgen_ring* ring, const void* q, const void* k, const void* v, void* out,
                                        float* lse, const cpgen_shard_strides* strides, void* stream) {
  return guard([&] {
    require(ring, "ring", "cpgen_ring_forward_strided");
    cpgen::ShardStrides storage;
    ring->ring.forward(q, k, v, out, lse, stream, to_strides(strides, storage));
  });
}

cpgen_status cpgen_ring_backward_strided(cpgen_ring* ring, const void* q, const void* k, const void* v,
                                         const void* out, const float* lse, const void* dout, void* dq, void* dk,
                                         void* dv, const cpgen_shard_strides* strides, void* stream) {
  return guard([&] {
    require(ring, "ring", "cpgen_ring_backward_strided");
    cpgen::ShardStrides storage;
    ring->ring.backward(q, k, v, out, lse, dout, dq, dk, dv, stream, to_strides(strides, storage));
  });
}

cpgen_status cpgen_ring_forward_all(cpgen_ring* ring, const void* const* q, const void* const* k,
                                    const void* const* v, void* const* out, float* const* lse,
                                    void* stream) {
  return guard([&] {
    const char* fn = "cpgen_ring_forward_all";
    require(ring, "ring", fn);
    // Before the arrays are read (an NCCL rank's hold its own shard only, not cp_size): the
    // ring's own refusal, with no shards.
    if (ring->ring.rank() >= 0) ring->ring.forward_all({}, stream);
    require(q, "q", fn);
    require(k, "k", fn);
    require(v, "v", fn);
    require(out, "out", fn);
    require(lse, "lse", fn);
    const int64_t n = ring->ring.problem().cp_size;
    std::vector<cpgen::ShardPointers> shards(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) shards[r] = {q[r], k[r], v[r], out[r], lse[r]};
    ring->ring.forward_all(shards, stream);
  });
}

cpgen_status cpgen_ring_backward(cpgen_ring* ring, const void* q, const void* k, const void* v,
                                 const void* out, const float* lse, const void* dout, void* dq,
                                 void* dk, void* dv, void* stream) {
  return guard([&] {
    require(ring, "ring", "cpgen_ring_backward");
    ring->ring.backward(q, k, v, out, lse, dout, dq, dk, dv, stream);
  });
}

cpgen_status cpgen_ring_backward_all(cpgen_ring* ring, const void* const* q, const void* const* k,
                                     const void* const* v, const void* const* out,
                                     const float* const* lse, const void* const* dout,
                                     void* const* dq, void* const* dk, void* const* dv, void* stream) {
  return guard([&] {
    const char* fn = "cpgen_ring_backward_all";
    require(ring, "ring", fn);
    // Before the arrays are read (an NCCL rank's hold its own shard only, not cp_size): the
    // ring's own refusal, with no shards.
    if (ring->ring.rank() >= 0) ring->ring.backward_all({}, stream);
    require(q, "q", fn);
    require(k, "k", fn);
    require(v, "v", fn);
    require(out, "out", fn);
    require(lse, "lse", fn);
    require(dout, "dout", fn);
    require(dq, "dq", fn);
    require(dk, "dk", fn);
    require(dv, "dv", fn);
    const int64_t n = ring->ring.problem().cp_size;
    std::vector<cpgen::BackwardShardPointers> shards(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r)
      shards[r] = {q[r], k[r], v[r], out[r], lse[r], dout[r], dq[r], dk[r], dv[r]};
    ring->ring.backward_all(shards, stream);
  });
}

cpgen_status cpgen_ring_synchronize(cpgen_ring* ring) {
  return guard([&] {
    require(ring, "ring", "cpgen_ring_synchronize");
    ring->ring.synchronize();
  });
}

namespace {
// Writes `text` and its NUL into out[0..size), or fails naming `fn` and the size needed.
void copy_out(const std::string& text, char* out, size_t size, const char* fn) {
  if (text.size() + 1 > size)
    cpgen::throw_bad_input(std::string(fn) + ": size " + std::to_string(size) + " cannot hold '" + text +
                           "' and its NUL; allowed: " + std::to_string(text.size() + 1) + " or more");
  memcpy(out, text.c_str(), text.size() + 1);
}

void family_uri(const cpgen_problem* problem, const char* family, const char* arch, char* uri, size_t size,
                const char* fn) {
  require(family, "family", fn);
  require(uri, "uri", fn);
  const cpgen::Problem p = to_problem(problem, fn);
  copy_out(cpgen::family_default_spec(p, family, fn, arch ? arch : "").uri(), uri, size, fn);
}
}  // namespace

cpgen_status cpgen_family_kernel_uri(const cpgen_problem* problem, const char* family, char* uri, size_t size) {
  return guard([&] { family_uri(problem, family, nullptr, uri, size, "cpgen_family_kernel_uri"); });
}

cpgen_status cpgen_family_kernel_uri_for_arch(const cpgen_problem* problem, const char* family, const char* arch,
                                              char* uri, size_t size) {
  return guard([&] { family_uri(problem, family, arch, uri, size, "cpgen_family_kernel_uri_for_arch"); });
}

cpgen_status cpgen_device_arch(int device, char* arch, size_t size) {
  return guard([&] {
    const char* fn = "cpgen_device_arch";
    require(arch, "arch", fn);
    // The caller's arguments first (bad input is bad input on any machine), then the driver.
    if (device < 0)
      cpgen::throw_bad_input(std::string(fn) + ": device " + std::to_string(device) +
                             " is not a device ordinal; allowed: 0 and up");
    if (size == 0) cpgen::throw_bad_input(std::string(fn) + ": size 0 cannot hold an arch name and its NUL");
    cpgen::cu::driver();  // kNoDevice, with the reason (no driver, or one that sees no device)
    const int count = cpgen::cu::device_count();
    if (device < 0 || device >= count)
      cpgen::throw_bad_input(std::string(fn) + ": device " + std::to_string(device) + " is not present; allowed: 0 to " +
                             std::to_string(count - 1));
    copy_out(cpgen::device_arch(device), arch, size, fn);
  });
}

const char* cpgen_ring_kernel_uri(const cpgen_ring* ring) {
  return ring ? ring->ring.kernel_uri().c_str() : "";
}

const char* cpgen_ring_config_source(const cpgen_ring* ring) {
  return ring ? ring->ring.config_source().c_str() : "";
}

const char* cpgen_ring_config_reason(const cpgen_ring* ring) {
  return ring ? ring->ring.config_reason().c_str() : "";
}

const char* cpgen_ring_backward_kernel_uri(const cpgen_ring* ring) {
  if (!ring || ring->ring.backward_step_kernels().empty()) return "";
  return ring->ring.backward_step_kernels().front().kernel_uri.c_str();
}

void cpgen_ring_destroy(cpgen_ring* ring) {
  // A destructor that fails (a CUDA context already torn down at exit) must not throw through C.
  guard([&] { delete ring; });
}

}  // extern "C"
