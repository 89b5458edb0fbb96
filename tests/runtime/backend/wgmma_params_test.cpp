// The wgmma family's launch params (runtime/backend/wgmma_params.h): the three maps encoded from
// the template's descriptions (read back from the emulator's map, the bytes the kernel receives),
// TMA's requirements refused in one line naming the kernel and the tensor, and an encoder's
// refusal passed on with the map's name. No kernel runs here.
#include "runtime/backend/wgmma_params.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "cpgen/error.h"
#include "emulation/tensor_map.h"
#include "generator/kernel_spec_wgmma.h"
#include "templates/layout.cuh"

namespace cpgen {
namespace {

// A bhsd launch: batch 2, 8 query heads over 2 kv heads (group 4), 40 queries, 24 keys, head dim 64.
struct Launch {
  alignas(16) uint16_t q[2 * 8 * 40 * 64];
  alignas(16) uint16_t k[2 * 2 * 24 * 64];
  alignas(16) uint16_t v[2 * 2 * 24 * 64];
  RingFwdParams params{};
  Launch() {
    params.q = q;
    params.k = k;
    params.v = v;
    params.batch = 2;
    params.q_heads = 8;
    params.kv_heads = 2;
    params.q_len = 40;
    params.kv_len = 24;
    params.q_row_stride = params.k_row_stride = params.v_row_stride = 64;
    params.q_head_stride = 40 * 64;
    params.q_batch_stride = 8 * 40 * 64;
    params.k_head_stride = params.v_head_stride = 24 * 64;
    params.k_batch_stride = params.v_batch_stride = 2 * 24 * 64;
  }
};

const emulation::TensorMap& as_map(const device::TmaMap& m) {
  return *reinterpret_cast<const emulation::TensorMap*>(&m);
}

KernelSpec spec_group4() { return wgmma_default_for(Dtype::kFp16, 64, true, 4); }

constexpr long long kL2 = 50ll << 20;  // an H100's L2

// The persistent launch's L2 sections: as many pairs as a third of L2 holds of one pair's K and V
// (2 x 24 keys x 64 x 2 bytes = 6144 bytes here), at least one.
TEST(WgmmaParams, SectionPairsAreAThirdOfL2OverOnePairsKeysAndValues) {
  auto launch = std::make_unique<Launch>();
  const KernelSpec spec = spec_group4();
  EXPECT_EQ(wgmma_params(spec, launch->params, &encode_emulated_tma_map, kL2).section_pairs, kL2 / 3 / 6144);
  EXPECT_EQ(wgmma_params(spec, launch->params, &encode_emulated_tma_map, 3 * 6144 * 2).section_pairs, 2);
  EXPECT_EQ(wgmma_params(spec, launch->params, &encode_emulated_tma_map, 3 * 6144 * 2 - 1).section_pairs, 1);
  EXPECT_EQ(wgmma_params(spec, launch->params, &encode_emulated_tma_map, 1000).section_pairs, 1);
  // 16K keys of head dim 128 (8 MiB per pair) on an H200's 50 MiB: two pairs.
  EXPECT_EQ(device::persistent_section_pairs(16384, 128, 2, kL2), 2);
  EXPECT_EQ(device::persistent_section_pairs(32768, 128, 2, kL2), 1);
  EXPECT_GE(device::persistent_section_pairs(0, 128, 2, kL2), 1 << 20) << "no keys: one section";
}

TEST(WgmmaParams, MapsAreTheTemplatesDescriptionsEncoded) {
  auto launch = std::make_unique<Launch>();
  const KernelSpec spec = spec_group4();
  const RingFwdWgmmaParams w = wgmma_params(spec, launch->params, &encode_emulated_tma_map, kL2);
  EXPECT_EQ(std::memcmp(&w.base, &launch->params, sizeof(RingFwdParams)), 0) << "the base params pass unchanged";
  const emulation::TensorMap& q = as_map(w.q_map);
  ASSERT_EQ(q.magic, emulation::kTensorMapMagic);
  EXPECT_EQ(q.global, launch->q);
  EXPECT_EQ(q.rank, 4u);
  // (head_dim, query head, query, batch), strides in bytes, a box of (64, G, block_m / G).
  const uint64_t q_dims[4] = {64, 8, 40, 2}, q_strides[4] = {2, 40 * 64 * 2, 64 * 2, 8 * 40 * 64 * 2};
  const uint32_t q_box[4] = {64, 4, 128 / 4, 1};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(q.dims[i], q_dims[i]) << "q dim " << i;
    EXPECT_EQ(q.strides[i], q_strides[i]) << "q stride " << i;
    EXPECT_EQ(q.box[i], q_box[i]) << "q box " << i;
  }
  EXPECT_EQ(q.swizzle, emulation::kTensorMapSwizzle128B);
  for (const auto& [map, data] : {std::pair{&w.k_map, launch->k}, std::pair{&w.v_map, launch->v}}) {
    const emulation::TensorMap& kv = as_map(*map);
    ASSERT_EQ(kv.magic, emulation::kTensorMapMagic);
    EXPECT_EQ(kv.global, data);
    const uint64_t dims[4] = {64, 24, 2, 2}, strides[4] = {2, 64 * 2, 24 * 64 * 2, 2 * 24 * 64 * 2};
    const uint32_t box[4] = {64, static_cast<uint32_t>(spec.block_n), 1, 1};
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(kv.dims[i], dims[i]) << "kv dim " << i;
      EXPECT_EQ(kv.strides[i], strides[i]) << "kv stride " << i;
      EXPECT_EQ(kv.box[i], box[i]) << "kv box " << i;
    }
  }
}

TEST(WgmmaParams, AnEmptyChunkStillGetsMapsOfOneKey) {
  // The last step on a rank that received no keys launches with kv_len 0 and loads no tile.
  auto launch = std::make_unique<Launch>();
  launch->params.kv_len = 0;
  const RingFwdWgmmaParams w = wgmma_params(spec_group4(), launch->params, &encode_emulated_tma_map, kL2);
  EXPECT_EQ(as_map(w.k_map).dims[1], 1u);
  EXPECT_EQ(as_map(w.v_map).dims[1], 1u);
  EXPECT_EQ(w.base.kv_len, 0) << "the kernel still sees no keys";
}

// Regression: an empty chunk's layout has zero head and batch strides (no rows), and a caller may
// give a size-1 dim stride 0; the driver's documentation does not say it takes a zero stride, so
// those become the bytes the inner dims span, as in a dense tensor. Strides a load steps along are
// left as they are.
TEST(WgmmaParams, StridesNoLoadStepsAlongAreNestedNotZero) {
  auto launch = std::make_unique<Launch>();
  launch->params.kv_len = 0;
  launch->params.k_head_stride = launch->params.v_head_stride = 0;
  launch->params.k_batch_stride = launch->params.v_batch_stride = 0;
  launch->params.batch = 1;
  launch->params.q_batch_stride = 0;  // batch 1: never stepped along
  const RingFwdWgmmaParams w = wgmma_params(spec_group4(), launch->params, &encode_emulated_tma_map, kL2);
  for (const device::TmaMap* map : {&w.k_map, &w.v_map}) {
    const emulation::TensorMap& kv = as_map(*map);
    // (64, 1 key, 2 heads, 1 batch): rows of 128 bytes, heads 128 apart, the batch 256.
    EXPECT_EQ(kv.strides[1], 64u * 2);
    EXPECT_EQ(kv.strides[2], 64u * 2);
    EXPECT_EQ(kv.strides[3], 2u * 64 * 2);
  }
  const emulation::TensorMap& q = as_map(w.q_map);
  EXPECT_EQ(q.strides[1], 40u * 64 * 2) << "the head stride is used: unchanged";
  EXPECT_EQ(q.strides[3], 8u * 40 * 64 * 2) << "batch of one: the 8 heads' span, as if dense";
  EXPECT_EQ(w.base.k_head_stride, 0) << "the kernel's own params are not touched";
}

void expect_refused(const RingFwdParams& params, ErrorKind kind, const std::string& needle,
                    TmaMapEncoder encode = &encode_emulated_tma_map) {
  const KernelSpec spec = spec_group4();
  try {
    wgmma_params(spec, params, encode, kL2);
    ADD_FAILURE() << "accepted; expected an error with '" << needle << "'";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), kind) << what;
    EXPECT_NE(what.find(spec.uri()), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(WgmmaParams, TmaRequirementsAreRefusedNamingTheKernelAndTensor) {
  auto launch = std::make_unique<Launch>();
  RingFwdParams p = launch->params;
  p.k = reinterpret_cast<const char*>(launch->k) + 8;
  expect_refused(p, ErrorKind::kBadInput, "k is not 16-byte aligned");
  p = launch->params;
  p.v_head_stride = 24 * 64 + 4;  // 8 bytes past a multiple of 16
  expect_refused(p, ErrorKind::kBadInput, "v head stride 1540 elements");
  p = launch->params;
  p.q_row_stride = 68;
  expect_refused(p, ErrorKind::kBadInput, "q row stride 68");
  EXPECT_EQ(wgmma_tma_requirements(launch->params), "");
}

std::string refuse_everything(const TmaMapDescription&, device::TmaMap*) { return "no driver here"; }

TEST(WgmmaParams, AnEncodersRefusalNamesTheMap) {
  auto launch = std::make_unique<Launch>();
  expect_refused(launch->params, ErrorKind::kCuda, "the tensor map of q was refused: no driver here",
                 &refuse_everything);
}

TEST(WgmmaParams, AMmaSyncKernelIsNotGivenMaps) {
  auto launch = std::make_unique<Launch>();
  EXPECT_THROW(
      wgmma_params(KernelSpec::default_for(Dtype::kFp16, 64, true, 4), launch->params, &encode_emulated_tma_map, kL2),
      Error);
}

}  // namespace
}  // namespace cpgen
