#include <cmath>

#include "cpgen/error.h"
#include "cpgen/problem.h"
#include "cpgen/types.h"

namespace cpgen {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kBadInput: return "bad input";
    case ErrorKind::kInfeasible: return "infeasible";
    case ErrorKind::kCompile: return "compile error";
    case ErrorKind::kCuda: return "CUDA error";
    case ErrorKind::kNccl: return "NCCL error";
    case ErrorKind::kDatabase: return "database error";
    case ErrorKind::kIo: return "I/O error";
    case ErrorKind::kNoDevice: return "no CUDA device";
    case ErrorKind::kInternal: return "internal error";
  }
  return "unknown error";
}

std::string_view dtype_name(Dtype dtype) {
  switch (dtype) {
    case Dtype::kBf16: return "bf16";
    case Dtype::kFp16: return "fp16";
  }
  throw Error(ErrorKind::kInternal, "dtype_name: unknown dtype value");
}

Dtype parse_dtype(std::string_view name) {
  if (name == "bf16") return Dtype::kBf16;
  if (name == "fp16") return Dtype::kFp16;
  throw_bad_input("dtype '" + std::string(name) + "' is not supported; allowed: bf16, fp16");
}

std::string_view scheme_name(Scheme scheme) {
  switch (scheme) {
    case Scheme::kContiguous: return "contiguous";
    case Scheme::kZigzag: return "zigzag";
    case Scheme::kZigzagToken: return "zigzag-token";
    case Scheme::kStriped: return "striped";
  }
  throw Error(ErrorKind::kInternal, "scheme_name: unknown scheme value");
}

Scheme parse_scheme(std::string_view name) {
  if (name == "contiguous") return Scheme::kContiguous;
  if (name == "zigzag") return Scheme::kZigzag;
  if (name == "zigzag-token") return Scheme::kZigzagToken;
  if (name == "striped") return Scheme::kStriped;
  throw_bad_input("scheme '" + std::string(name) +
                  "' is not supported; allowed: contiguous, zigzag, zigzag-token, striped");
}

double Problem::scale() const {
  return softmax_scale != 0 ? softmax_scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

}  // namespace cpgen
