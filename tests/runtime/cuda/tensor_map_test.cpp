// The driver's tensor map encoder (runtime/cuda/tensor_map.h): without a driver it reports why in
// one line instead of throwing (the mma.sync family never needs it); on a GPU it encodes the
// template's descriptions of a real launch (K, and Q with its strides that do not nest), and a
// stride TMA cannot take comes back as the driver's refusal.
#include "runtime/cuda/tensor_map.h"

#include <gtest/gtest.h>

#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/module.h"
#include "test_util.h"

namespace cpgen {
namespace {

// One batch of [head, row, dim] tensors, 100 rows of head dim 128: Q with 8 heads at `q`, K with
// 2 at `k`.
RingFwdParams bhsd_params(const void* q, const void* k) {
  RingFwdParams p{};
  p.q = q;
  p.k = k;
  p.batch = 1;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.q_len = p.kv_len = 100;
  p.q_row_stride = p.k_row_stride = 128;
  p.q_head_stride = p.k_head_stride = 100 * 128;
  p.q_batch_stride = 8 * 100 * 128;
  p.k_batch_stride = 2 * 100 * 128;
  return p;
}

TmaMapDescription kv_description(const void* data) {
  return device::kv_map_description(bhsd_params(nullptr, data), false, true, 128, 64);
}

// Q as the kernels map it: dims (head_dim, heads, rows, batch), so the head stride (rows x 128)
// exceeds the row stride (128): strides that do not nest, as the driver's comment describes
// them. Packed GQA: boxes of 4 heads x 32 rows.
TmaMapDescription q_description(const void* data) {
  return device::q_map_description(bhsd_params(data, nullptr), true, 128, 4, 128);
}

TEST(DriverTensorMap, WithoutADriverTheReasonIsOneLine) {
  if (cu::try_driver()) GTEST_SKIP() << "a CUDA driver is present (see EncodesOnAGpu)";
  alignas(16) static unsigned char data[16];
  device::TmaMap map{};
  const std::string why = cu::encode_driver_tma_map(kv_description(data), &map);
  EXPECT_FALSE(why.empty());
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
}

TEST(DriverTensorMap, EncodesOnAGpuAndPassesTheDriversRefusalOn) {
  CPGEN_REQUIRE_GPU();
  if (!cu::driver().cuTensorMapEncodeTiled) GTEST_SKIP() << "the driver has no cuTensorMapEncodeTiled";
  use_primary_context(0);
  DeviceBuffer k(0, 2 * 100 * 128 * 2);
  device::TmaMap map{};
  EXPECT_EQ(cu::encode_driver_tma_map(kv_description(k.as<void>()), &map), "");
  DeviceBuffer q(0, 8 * 100 * 128 * 2);
  EXPECT_EQ(cu::encode_driver_tma_map(q_description(q.as<void>()), &map), "")
      << "the driver refuses the Q map's strides that do not nest (head stride above row stride)";
  TmaMapDescription bad = kv_description(k.as<void>());
  bad.strides[0] = 8;  // not a multiple of 16 bytes
  const std::string why = cu::encode_driver_tma_map(bad, &map);
  EXPECT_NE(why.find("cuTensorMapEncodeTiled failed"), std::string::npos) << why;
}

}  // namespace
}  // namespace cpgen
