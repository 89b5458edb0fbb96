#include <cmath>

#include "cpgen/error.h"
#include "cpgen/problem.h"
#include "cpgen/types.h"
#include "runtime/core/enum_names.h"

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

namespace {

constexpr std::pair<Dtype, std::string_view> kDtypeNames[] = {{Dtype::kBf16, "bf16"},
                                                                 {Dtype::kFp16, "fp16"}};
constexpr std::pair<Scheme, std::string_view> kSchemeNames[] = {
    {Scheme::kContiguous, "contiguous"},
    {Scheme::kZigzag, "zigzag"},
    {Scheme::kZigzagToken, "zigzag-token"},
    {Scheme::kStriped, "striped"}};

}  // namespace

std::string_view dtype_name(Dtype dtype) {
  return enum_name<Dtype>(kDtypeNames, dtype, "dtype_name");
}

Dtype parse_dtype(std::string_view name) { return parse_enum<Dtype>(kDtypeNames, name, "dtype"); }

std::string_view scheme_name(Scheme scheme) {
  return enum_name<Scheme>(kSchemeNames, scheme, "scheme_name");
}

Scheme parse_scheme(std::string_view name) {
  return parse_enum<Scheme>(kSchemeNames, name, "scheme");
}

double Problem::scale() const {
  return softmax_scale != 0 ? softmax_scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

}  // namespace cpgen
