// The RAII device buffer used by GPU tests: round trips, poisoning, copies, single elements,
// bounds, ownership.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpgen/error.h"
#include "runtime/cuda/device_buffer.h"
#include "test_util.h"

namespace cpgen {
namespace {

TEST(DeviceBuffer, UploadDownloadRoundTripsEveryByte) {
  CPGEN_REQUIRE_GPU();
  std::vector<float> values(4099);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.25f - 7.0f;
  DeviceBuffer buffer = DeviceBuffer::from_host(0, values);
  EXPECT_EQ(buffer.bytes(), values.size() * sizeof(float));
  EXPECT_NE(buffer.address(), 0u);
  EXPECT_EQ(buffer.download_as<float>(), values);
}

TEST(DeviceBuffer, PoisonReadsAsNanInEveryFloatFormat) {
  CPGEN_REQUIRE_GPU();
  DeviceBuffer buffer(0, 64);
  buffer.fill_bytes(0);
  buffer.poison();
  auto words = buffer.download_as<uint32_t>();
  for (uint32_t w : words) {
    float f;
    std::memcpy(&f, &w, 4);
    ASSERT_TRUE(std::isnan(f));
    // Both 16-bit halves are 0xFFFF: NaN as fp16 (exponent all ones, mantissa non-zero) and bf16.
    ASSERT_EQ(w & 0xFFFFu, 0xFFFFu);
  }
}

TEST(DeviceBuffer, CopiesPastTheEndAreRejected) {
  CPGEN_REQUIRE_GPU();
  DeviceBuffer buffer(0, 16);
  std::vector<char> host(32);
  try {
    buffer.upload(host.data(), host.size());
    FAIL() << "upload of 32 bytes into 16 succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
  }
  EXPECT_THROW(buffer.download(host.data(), host.size()), Error);
}

// copy() is a second buffer with the same bytes, independent of the first; element(i) reads one
// value, and an element past the end is rejected as a download past it is.
TEST(DeviceBuffer, CopyIsIndependentAndElementReadsOneValue) {
  CPGEN_REQUIRE_GPU();
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  DeviceBuffer buffer = DeviceBuffer::from_host(0, values);
  DeviceBuffer copy = buffer.copy();
  EXPECT_NE(copy.address(), buffer.address());
  buffer.poison();
  EXPECT_EQ(copy.download_as<float>(), values);
  EXPECT_EQ(copy.element<float>(777), 388.5f);
  EXPECT_EQ(copy.element<float>(999), 499.5f);
  EXPECT_THROW(copy.element<float>(1000), Error);
}

TEST(DeviceBuffer, MoveTransfersOwnership) {
  CPGEN_REQUIRE_GPU();
  DeviceBuffer a(0, 256);
  const CUdeviceptr address = a.address();
  DeviceBuffer b(std::move(a));
  EXPECT_EQ(b.address(), address);
  EXPECT_EQ(a.address(), 0u);  // NOLINT(bugprone-use-after-move): the moved-from state is the contract
  DeviceBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.address(), address);
  EXPECT_EQ(c.bytes(), 256u);
}

}  // namespace
}  // namespace cpgen
