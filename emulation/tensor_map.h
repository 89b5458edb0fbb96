// The emulator's tensor map: what cp.async.bulk.tensor needs to find a box of a tensor in global
// memory and lay it out in shared memory, built on the host from the same arguments the driver's
// cuTensorMapEncodeTiled takes, so a backend can make either map (or both) from one description.
//
// On a GPU a kernel receives the driver's 128-byte opaque CUtensorMap as a `const
// __grid_constant__` parameter (or inside one). Under the emulator the same 128 bytes of the
// parameter hold this struct instead: the host encodes it with encode_tensor_map_tiled and copies
// it where the CUtensorMap would go; the emulated TMA copy reads it back from the parameter's
// address (templates/hopper.cuh, TmaMap). The enum values are the driver's (cuda.h), so the
// arguments pass through unchanged. Header of the emulator only: standard headers, no project
// includes; header-only, so the library can encode maps without linking the emulator's run time.
#pragma once

#include <stdint.h>

#include <string>

namespace cpgen::emulation {

// CUtensorMapDataType values of the 16-bit types, the only ones the emulator copies.
constexpr uint32_t kTensorMapUint16 = 1;
constexpr uint32_t kTensorMapFloat16 = 6;
constexpr uint32_t kTensorMapBfloat16 = 9;
// CUtensorMapSwizzle: 16-byte chunks permuted within a 32, 64 or 128-byte span.
constexpr uint32_t kTensorMapSwizzleNone = 0;
constexpr uint32_t kTensorMapSwizzle32B = 1;
constexpr uint32_t kTensorMapSwizzle64B = 2;
constexpr uint32_t kTensorMapSwizzle128B = 3;
// CU_TENSOR_MAP_INTERLEAVE_NONE and CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE (out-of-bounds elements
// read as zero), the only interleave and fill the emulator models.
constexpr uint32_t kTensorMapInterleaveNone = 0;
constexpr uint32_t kTensorMapOobFillZero = 0;

constexpr uint32_t kTensorMapMagic = 0x544d4150u;  // "TMAP": an encoded map, not stray bytes

struct alignas(64) TensorMap {
  uint32_t magic = 0;
  uint32_t rank = 0;
  uint32_t element_bytes = 0;
  uint32_t swizzle = kTensorMapSwizzleNone;
  const void* global = nullptr;
  uint64_t dims[5] = {};
  uint64_t strides[5] = {};  // bytes between neighbours along each dimension; strides[0] = element size
  uint32_t box[5] = {};
};
static_assert(sizeof(TensorMap) == 128, "a TensorMap travels in the 128 bytes of a CUtensorMap");

// Bytes of the span a swizzle mode permutes chunks within (0 for none).
inline uint32_t tensor_map_swizzle_span(uint32_t swizzle) {
  return swizzle == kTensorMapSwizzle32B    ? 32
         : swizzle == kTensorMapSwizzle64B  ? 64
         : swizzle == kTensorMapSwizzle128B ? 128
                                            : 0;
}

// Checks the arguments as cuTensorMapEncodeTiled documents them, plus what the emulator does not
// model (other element sizes, element strides other than 1, interleave, NaN fill, swizzled rows
// narrower than the span), and fills
// *map. Returns "" or one line saying which argument is wrong and what is allowed.
inline std::string encode_tensor_map_tiled(TensorMap* map, uint32_t data_type, uint32_t rank,
                                           const void* global_address, const uint64_t* global_dim,
                                           const uint64_t* global_strides, const uint32_t* box_dim,
                                           const uint32_t* element_strides, uint32_t interleave, uint32_t swizzle,
                                           uint32_t l2_promotion, uint32_t oob_fill) {
  auto at = [](const char* what, uint32_t i) { return std::string(what) + "[" + std::to_string(i) + "] = "; };
  if (data_type != kTensorMapUint16 && data_type != kTensorMapFloat16 && data_type != kTensorMapBfloat16)
    return "tensor map data type " + std::to_string(data_type) +
           ": the emulator copies 16-bit types only (UINT16 = 1, FLOAT16 = 6, BFLOAT16 = 9)";
  if (rank < 1 || rank > 5) return "tensor map rank " + std::to_string(rank) + ": must be 1 to 5";
  if (global_address == nullptr || reinterpret_cast<uintptr_t>(global_address) % 16 != 0)
    return "tensor map global address must be non-null and 16-byte aligned";
  if (interleave != kTensorMapInterleaveNone)
    return "tensor map interleave " + std::to_string(interleave) + ": the emulator models INTERLEAVE_NONE (0) only";
  if (swizzle > kTensorMapSwizzle128B)
    return "tensor map swizzle " + std::to_string(swizzle) + ": must be NONE (0), 32B (1), 64B (2) or 128B (3)";
  if (l2_promotion > 3) return "tensor map L2 promotion " + std::to_string(l2_promotion) + ": must be 0 to 3";
  if (oob_fill != kTensorMapOobFillZero)
    return "tensor map out-of-bounds fill " + std::to_string(oob_fill) +
           ": the emulator models FILL_NONE (0, zeros) only";
  const uint32_t element_bytes = 2;
  for (uint32_t i = 0; i < rank; ++i) {
    if (global_dim[i] == 0 || global_dim[i] > (uint64_t{1} << 32))
      return at("globalDim", i) + std::to_string(global_dim[i]) + ": must be 1 to 2^32";
    if (box_dim[i] == 0 || box_dim[i] > 256) return at("boxDim", i) + std::to_string(box_dim[i]) + ": must be 1 to 256";
    if (element_strides[i] != 1)
      return at("elementStrides", i) + std::to_string(element_strides[i]) + ": the emulator models 1 only";
  }
  for (uint32_t i = 0; i + 1 < rank; ++i)
    if (global_strides[i] % 16 != 0 || global_strides[i] >= (uint64_t{1} << 40))
      return at("globalStrides", i) + std::to_string(global_strides[i]) + ": must be a multiple of 16 below 2^40";
  const uint32_t inner = box_dim[0] * element_bytes;
  if (inner % 16 != 0)
    return "boxDim[0] * element size = " + std::to_string(inner) + " bytes: must be a multiple of 16";
  // The driver allows a swizzled box row up to the span; the emulator models rows of exactly the
  // span (each row one swizzle line, the layout wgmma's swizzled operands use), and refuses the
  // narrower ones rather than guess how the hardware packs them.
  const uint32_t span = tensor_map_swizzle_span(swizzle);
  if (span != 0 && inner > span)
    return "boxDim[0] * element size = " + std::to_string(inner) + " bytes: must be at most the " +
           std::to_string(span) + "-byte swizzle span";
  if (span != 0 && inner != span)
    return "boxDim[0] * element size = " + std::to_string(inner) +
           " bytes: the emulator models swizzled rows of exactly the " + std::to_string(span) + "-byte span only";
  TensorMap m;
  m.magic = kTensorMapMagic;
  m.rank = rank;
  m.element_bytes = element_bytes;
  m.swizzle = swizzle;
  m.global = global_address;
  for (uint32_t i = 0; i < rank; ++i) {
    m.dims[i] = global_dim[i];
    m.strides[i] = i == 0 ? element_bytes : global_strides[i - 1];
    m.box[i] = box_dim[i];
  }
  *map = m;
  return {};
}

}  // namespace cpgen::emulation
