/* cpgen's C ABI, for FFI users (Python ctypes, Rust, Julia). Plain C, no CUDA or NCCL headers:
 * device pointers, CUDA streams and NCCL communicators travel as void*.
 *
 * Every function that can fail returns a cpgen_status. On failure the message of the error (one line naming
 * what is wrong, where, and what is allowed) is kept per thread and read with cpgen_last_error().
 * No C++ exception ever crosses this boundary.
 *
 * Tensors are q/out [batch, q_heads, rows, head_dim] and k/v [batch, kv_heads, rows, head_dim]
 * in the problem's dtype and layout (cpgen_layout; the default bhsd is contiguous row-major);
 * lse [batch, q_heads, rows] contiguous float32 (natural log). rows is the rank's count of local
 * positions (cpgen_partition_rows; seq_len / cp_size when that divides), in the order of the
 * partition scheme (cpgen_partition_positions gives the global position of each local row).
 *
 * Python with PyTorch: either order of import torch and ctypes.CDLL(libcpgen) works. libcpgen does
 * not link NCCL; it loads one on first use and prefers the NCCL the process already has
 * (cpgen_nccl_library below). Before, loading libcpgen first made PyTorch's import fail. */
#ifndef CPGEN_CPGEN_C_H_
#define CPGEN_CPGEN_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CPGEN_API __attribute__((visibility("default")))

/* The values are stable; they follow cpgen::ErrorKind. */
typedef enum cpgen_status {
  CPGEN_OK = 0,
  CPGEN_ERR_BAD_INPUT = 1,   /* a value the caller gave is not allowed */
  CPGEN_ERR_INFEASIBLE = 2,  /* no kernel config fits the device */
  CPGEN_ERR_COMPILE = 3,     /* NVRTC rejected a generated kernel */
  CPGEN_ERR_CUDA = 4,        /* a CUDA call failed */
  CPGEN_ERR_NCCL = 5,        /* an NCCL call failed, a peer stalled, or NCCL is not built in */
  CPGEN_ERR_DATABASE = 6,    /* the tuning database failed */
  CPGEN_ERR_IO = 7,          /* a file could not be read or written */
  CPGEN_ERR_NO_DEVICE = 8,   /* a GPU is needed and none is usable */
  CPGEN_ERR_INTERNAL = 9     /* a bug in cpgen */
} cpgen_status;

typedef enum cpgen_dtype { CPGEN_DTYPE_BF16 = 0, CPGEN_DTYPE_FP16 = 1 } cpgen_dtype;

typedef enum cpgen_scheme {
  CPGEN_SCHEME_CONTIGUOUS = 0,
  CPGEN_SCHEME_ZIGZAG = 1,
  CPGEN_SCHEME_ZIGZAG_TOKEN = 2,
  CPGEN_SCHEME_STRIPED = 3
} cpgen_scheme;

/* How a framework lays out each rank's tensors (cpgen::Problem::layout): every one is read in
 * place through strides, never copied. */
typedef enum cpgen_layout {
  CPGEN_LAYOUT_BHSD = 0, /* [batch, heads, rows, head_dim] */
  CPGEN_LAYOUT_BSHD = 1, /* [batch, rows, heads, head_dim] (flash-attn) */
  CPGEN_LAYOUT_SBHD = 2, /* [rows, batch, heads, head_dim] (Megatron) */
  CPGEN_LAYOUT_THD = 3   /* [tokens, heads, head_dim], packed documents, batch 1 */
} cpgen_layout;

/* An attention problem (cpgen::Problem). Fill it with cpgen_problem_init first: it sets every
 * field to its default, and struct_size to the size this header gives the struct.
 *
 * ABI versions. Version 0 of this struct ended at softmax_scale, and its struct_size was a field
 * named reserved that had to be 0; version 1 added the fields after softmax_scale. The library
 * reads those only when struct_size says the caller's struct has them, so a program built
 * against version 0 (struct_size 0) keeps working unchanged, and an FFI caller that lays the
 * struct out itself sets struct_size to its size (or 0 for version 0). */
typedef struct cpgen_problem {
  int64_t batch;
  int64_t q_heads;
  int64_t kv_heads;
  int64_t head_dim;
  int64_t seq_len;       /* the whole sequence, over all ranks */
  int64_t cp_size;       /* context-parallel ranks */
  int32_t dtype;         /* cpgen_dtype */
  int32_t causal;        /* 0 or 1 */
  int32_t scheme;        /* cpgen_scheme */
  int32_t struct_size;   /* 0 or 72, version 0's size (version 0); sizeof(cpgen_problem) of version 1 */
  double softmax_scale;  /* 0 means 1/sqrt(head_dim) */
  /* Version 1: the mask model (query i sees the keys [max(doc_start(i), i - window_left),
   * min(doc_end(i) - 1, i + window_right)], window_right 0 when causal) and the layout. */
  const int64_t* documents; /* lengths of the documents packed into every batch entry's
                             * sequence, summing to seq_len (0 and 1 allowed); read during the
                             * call only. NULL with document_count 0: one document */
  int64_t document_count;
  int64_t window_left;   /* -1: unbounded (the default) */
  int64_t window_right;  /* -1: unbounded (the default) */
  double softcap;        /* > 0: logits are softcap * tanh(scale q.k / softcap); 0: none */
  int32_t layout;        /* cpgen_layout */
  int32_t reserved;      /* 0 */
} cpgen_problem;

/* "0.1.0": the library's version. Never NULL; static storage. */
CPGEN_API const char* cpgen_version(void);
/* The message of the last failure on the calling thread, "" if none yet. Valid until the next
 * cpgen call on this thread. */
CPGEN_API const char* cpgen_last_error(void);
/* "ok", "bad input", ... for a status value. */
CPGEN_API const char* cpgen_status_name(int status);

/* Defaults for the fields of a struct of struct_size bytes (sizeof of the caller's
 * cpgen_problem): batch 1, bf16, causal, zigzag, cp_size 1, scale 0, one document, no window, no
 * softcap, bhsd; the sizes are 0 (must be set). struct_size 0, or version 0's own size (the
 * struct up to softmax_scale), stands for version 0 (struct_size is then set to 0). A
 * struct_size of another version than this library knows is refused. */
CPGEN_API cpgen_status cpgen_problem_init_sized(cpgen_problem* problem, size_t struct_size);
/* Version 0's entry point, kept for programs built against it: fills the version-0 fields only
 * (struct_size 0). Built against this header, the macro below passes the struct's size. A caller
 * through an FFI (ctypes, Rust, Julia), which sees the symbol and not the macro, calls
 * cpgen_problem_init_sized(problem, sizeof its struct) instead: after the symbol, struct_size
 * is 0 and the version-1 fields (documents, windows, softcap, layout) are not read. */
CPGEN_API cpgen_status cpgen_problem_init(cpgen_problem* problem);
#define cpgen_problem_init(problem) cpgen_problem_init_sized((problem), sizeof(*(problem)))
/* Checks every field, with the messages of cpgen::Problem::validate (sizes, GQA grouping,
 * supported head dims and groups, documents, windows, softcap, layout). */
CPGEN_API cpgen_status cpgen_problem_validate(const cpgen_problem* problem);
/* The number of local rows of `rank` (ranks may hold different counts when the lengths do not
 * divide): what cpgen_partition_positions writes and the row count of the rank's tensors. */
CPGEN_API cpgen_status cpgen_partition_rows(const cpgen_problem* problem, int32_t rank, int64_t* rows);
/* Global positions of rank's local rows, in local order: writes cpgen_partition_rows values
 * (positions may be NULL when that is 0). */
CPGEN_API cpgen_status cpgen_partition_positions(const cpgen_problem* problem, int32_t rank,
                                                 int64_t* positions, size_t capacity);
/* Number of usable CUDA devices (0 without a driver or device). */
CPGEN_API cpgen_status cpgen_device_count(int32_t* count);

/* NCCL communicators for cpgen_ring_create_nccl, through a file every rank can read: rank 0
 * writes NCCL's unique id there (atomically) and removes it once all ranks joined, or when its own
 * init fails; the others wait up to timeout_seconds for it (<= 0 or NaN: 120; more than 86400, a day, is refused). job_key (may be NULL) must match
 * between ranks, so that a stale file of an earlier job is never used. device: the rank's CUDA
 * device ordinal, 0 and up. *comm receives an ncclComm_t. CPGEN_ERR_NCCL when cpgen was built
 * without NCCL. */
CPGEN_API cpgen_status cpgen_nccl_comm_from_file(const char* path, int32_t rank, int32_t nranks,
                                                 int32_t device, double timeout_seconds,
                                                 const char* job_key, void** comm);
/* NCCL communicators without a shared file, through whatever channel the ranks already have (a
 * framework's broadcast, e.g. torch.distributed.broadcast_object_list): rank 0 writes a fresh
 * NCCL unique id into id (size must be CPGEN_NCCL_UNIQUE_ID_BYTES), every rank passes those same
 * bytes to cpgen_nccl_comm_init_rank with its rank and CUDA device (0 and up), which makes the
 * communicator (collective: every rank must call it) and leaves the caller's current CUDA context
 * as it found it. *comm receives an ncclComm_t. CPGEN_ERR_NCCL when cpgen was built without NCCL. */
#define CPGEN_NCCL_UNIQUE_ID_BYTES 128
CPGEN_API cpgen_status cpgen_nccl_unique_id(void* id, size_t size);
CPGEN_API cpgen_status cpgen_nccl_comm_init_rank(const void* id, size_t size, int32_t rank, int32_t nranks,
                                                 int32_t device, void** comm);
/* Destroys a communicator made by cpgen_nccl_comm_from_file or cpgen_nccl_comm_init_rank (NULL is
 * allowed). */
CPGEN_API cpgen_status cpgen_nccl_comm_destroy(void* comm);
/* The NCCL library cpgen runs on, loaded by this call if no NCCL function ran yet (libcpgen does
 * not link NCCL; the order it looks in is in cpgen/nccl_bootstrap.h: CPGEN_NCCL_LIBRARY, then an
 * NCCL already in the process). *version as ncclGetVersion (22809 for 2.28.9); *path the file,
 * valid for the life of the process. Either may be NULL. CPGEN_ERR_NCCL naming why none can be
 * used. */
CPGEN_API cpgen_status cpgen_nccl_library(int32_t* version, const char** path);

/* A ring attention object for one problem; see cpgen/ring_attention.h. */
typedef struct cpgen_ring cpgen_ring;

/* Loopback: all cp_size ranks as virtual ranks in this process, on CUDA device `device` (-1:
 * device 0; below -1: CPGEN_ERR_BAD_INPUT). database_path may be NULL (default lookup). */
CPGEN_API cpgen_status cpgen_ring_create_loopback(const cpgen_problem* problem, int32_t device,
                                                  const char* database_path, cpgen_ring** ring);
/* NCCL: this process is one rank of nccl_comm (an ncclComm_t whose size is cp_size), on the
 * communicator's device. watchdog_seconds <= 0 or NaN takes the default (300 s); +inf is refused. $CPGEN_SM_MARGIN, where
 * set, is the SMs a persistent step kernel leaves to NCCL (RingOptions::sm_margin); unset, such a
 * kernel runs as its plain launch. */
CPGEN_API cpgen_status cpgen_ring_create_nccl(const cpgen_problem* problem, void* nccl_comm,
                                              const char* database_path, double watchdog_seconds,
                                              cpgen_ring** ring);
/* Forward over this rank's shard (NCCL, or loopback with cp_size 1). stream is a CUstream /
 * cudaStream_t (NULL: the legacy default stream). Asynchronous: returns once the work is queued. */
CPGEN_API cpgen_status cpgen_ring_forward(cpgen_ring* ring, const void* q, const void* k,
                                          const void* v, void* out, float* lse, void* stream);
/* Element strides of one [batch, heads, rows, head_dim] tensor (head_dim contiguous), and of
 * every tensor of one rank's call (cpgen::ShardStrides): for tensors that are not in the
 * problem's layout, e.g. views into a packed qkv tensor. Non-negative multiples of 8 elements
 * whose entries do not overlap; k and v (and so dk, dv's source) must be in the problem's
 * layout, because they travel the ring as they are. A stride that is not allowed gets
 * CPGEN_ERR_BAD_INPUT with one line naming the tensor and the stride. */
typedef struct cpgen_tensor_strides {
  int64_t batch;
  int64_t head;
  int64_t row;
} cpgen_tensor_strides;
typedef struct cpgen_shard_strides {
  cpgen_tensor_strides q, k, v, out, dout, dq, dk, dv;
} cpgen_shard_strides;
/* cpgen_ring_forward / cpgen_ring_backward with explicit strides (NULL: the problem's layout);
 * read during the call only. */
CPGEN_API cpgen_status cpgen_ring_forward_strided(cpgen_ring* ring, const void* q, const void* k,
                                                  const void* v, void* out, float* lse,
                                                  const cpgen_shard_strides* strides, void* stream);
CPGEN_API cpgen_status cpgen_ring_backward_strided(cpgen_ring* ring, const void* q, const void* k,
                                                   const void* v, const void* out, const float* lse,
                                                   const void* dout, void* dq, void* dk, void* dv,
                                                   const cpgen_shard_strides* strides, void* stream);
/* Loopback forward over every virtual rank: each argument is an array of cp_size pointers. */
CPGEN_API cpgen_status cpgen_ring_forward_all(cpgen_ring* ring, const void* const* q,
                                              const void* const* k, const void* const* v,
                                              void* const* out, float* const* lse, void* stream);
/* Backward over this rank's shard (NCCL, or loopback with cp_size 1): reads q, k, v, out and lse
 * (the forward's results) and dout (q's layout); writes dq (q's layout), dk and dv (k's layout)
 * in the problem's dtype. Same stream rules as cpgen_ring_forward; the first backward of a ring
 * loads the backward kernels and must not be captured into a CUDA graph. */
CPGEN_API cpgen_status cpgen_ring_backward(cpgen_ring* ring, const void* q, const void* k,
                                           const void* v, const void* out, const float* lse,
                                           const void* dout, void* dq, void* dk, void* dv,
                                           void* stream);
/* Loopback backward over every virtual rank: each argument is an array of cp_size pointers. */
CPGEN_API cpgen_status cpgen_ring_backward_all(cpgen_ring* ring, const void* const* q,
                                               const void* const* k, const void* const* v,
                                               const void* const* out, const float* const* lse,
                                               const void* const* dout, void* const* dq,
                                               void* const* dk, void* const* dv, void* stream);
/* Waits for the last forward or backward; reports a stalled peer (NCCL watchdog) or a failed
 * launch. */
CPGEN_API cpgen_status cpgen_ring_synchronize(cpgen_ring* ring);
/* The URI of ring step 0's kernel, where its config came from ("database-exact",
 * "database-bucket", "pretuned-exact", "pretuned-bucket", "pretuned-pattern" or "default"; the
 * names of cpgen/config_source.h, as `cpgen explain` prints them) and one line saying why.
 * Static per ring; valid until cpgen_ring_destroy; "" for a NULL ring. */
CPGEN_API const char* cpgen_ring_kernel_uri(const cpgen_ring* ring);
CPGEN_API const char* cpgen_ring_config_source(const cpgen_ring* ring);
CPGEN_API const char* cpgen_ring_config_reason(const cpgen_ring* ring);
/* The URI of the backward kernel of ring step 0 (its bwd- step type), selected with the forward
 * ones when the ring was made (loaded by the first backward). Static per ring; valid until
 * cpgen_ring_destroy; "" for a NULL ring. */
CPGEN_API const char* cpgen_ring_backward_kernel_uri(const cpgen_ring* ring);
/* The URI of the forward kernel a named family runs by default for the problem, written with its
 * terminating NUL into uri[0..size): family "wgmma" (the sm_90a family's default tiles, with the
 * _ivl/_cap features the problem's mask and softcap need), "wgmma-pingpong" (the same with the
 * two consumer warpgroups taking turns), "wgmma-persistent" (the same tiles launched as about one
 * CTA per SM, each looping over query blocks) or "mma.sync" (that family's documented tiles, also where
 * the arch's default is a wgmma kernel). A ring runs it when a cache or database entry names it
 * (bench/kernels.py --pin wgmma does that). CPGEN_ERR_BAD_INPUT for an unknown family, a problem
 * the family cannot run, or a buffer too small (128 bytes always suffice). */
CPGEN_API cpgen_status cpgen_family_kernel_uri(const cpgen_problem* problem, const char* family, char* uri,
                                               size_t size);
/* The same for the target arch ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_120",
 * as cpgen_device_arch names a GPU's): the tiles that fit its shared memory (mma.sync at head dim
 * 256 on the 99 KB sm_86, sm_89 and sm_120 gets smaller key tiles). cpgen_family_kernel_uri's
 * tiles are those of the 227 KB targets. A wgmma family on an arch other than sm_90a, or an arch
 * not listed, is CPGEN_ERR_BAD_INPUT. arch NULL or "": as cpgen_family_kernel_uri. */
CPGEN_API cpgen_status cpgen_family_kernel_uri_for_arch(const cpgen_problem* problem, const char* family,
                                                        const char* arch, char* uri, size_t size);
/* The arch cpgen compiles for on CUDA device `device` (e.g. "sm_90a" for an H100 or H200),
 * written with its NUL into arch[0..size) (16 bytes always suffice). CPGEN_ERR_NO_DEVICE without a
 * CUDA driver; CPGEN_ERR_BAD_INPUT for a device that is not present or a capability cpgen does
 * not target. */
CPGEN_API cpgen_status cpgen_device_arch(int device, char* arch, size_t size);
/* Frees the ring (NULL is allowed). Does not destroy the NCCL communicator. */
CPGEN_API void cpgen_ring_destroy(cpgen_ring* ring);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* CPGEN_CPGEN_C_H_ */
