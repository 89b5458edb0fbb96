// Single launches of the backward step kernel's mask features (issue 11) on the emulated device:
// what the masks skip is never loaded (every buffer the kernel must not touch is too small, so a
// load runs into a guard page and fails the launch), a key block no query sees writes exact
// zeros in write mode, and a launch with an unmasked full tile and a masked one matches the
// float64 semantics of params_bwd.cuh (the model device). The kernels are the ones
// emulated_ring_backward_mask_test.cpp compiles (bf16, head dim 64, GQA group 2), so a clean
// kernel store pays for them once.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpgen/error.h"
#include "runtime/backend/emulated_device.h"
#include "runtime/core/half_convert.h"
#include "tests/runtime/backend/emulated_test_util.h"
#include "tests/runtime/backend/model_device.h"

namespace cpgen {
namespace {

constexpr const char* kArch = testing::kEmulatedArch;
KernelStore* test_store() { return testing::emulated_store(); }

// A key block that no query sees loads nothing. Every buffer the kernel could load from (Q, K, V,
// dO, lse, delta, dQ) is a 16-byte allocation between guard pages, so a tile load, which reads
// whole 128-byte rows, faults and fails the launch; only the positions and the intervals are
// real. In add mode the dK/dV accumulators are 16-byte buffers too (the kernel must return
// before touching them); in write mode they are real, poisoned, and must come out exactly zero.
// Run on the key-interval kernel and on the causal kernel without intervals.
TEST(EmulatedBackwardMaskLaunches, AKeyBlockNoQuerySeesLoadsNothingAndWritesZerosInWriteMode) {
  constexpr int kLen = 8, kHeadDim = 64;
  for (const bool intervals : {true, false}) {
    KernelSpec spec = KernelSpec::backward_default_for_arch(Dtype::kBf16, kHeadDim, true, 2, kArch);
    spec.key_intervals = intervals;
    spec.softcap = !intervals;  // the causal kernel the cases above compiled is the softcap one
    EmulatedDevice device({{StepType::kBwdDiagonal, spec}}, kArch, test_store());
    // Queries at positions 0..7 each see [max(0, i - 3), i]; the keys sit at 100..107, after all.
    std::vector<int> table(4 * kLen);
    for (int i = 0; i < kLen; ++i) {
      table[i] = i;                             // q_positions
      table[kLen + i] = 100 + i;                // kv_positions
      table[2 * kLen + i] = i < 3 ? 0 : i - 3;  // q_key_first
      table[3 * kLen + i] = i;                  // q_key_last
    }
    DeviceAllocation positions = device.allocate(table.size() * sizeof(int));
    device.upload(positions.data(), table.data(), table.size() * sizeof(int));
    DeviceAllocation tiny = device.allocate(16);
    const size_t acc_floats = static_cast<size_t>(kLen) * kHeadDim;
    DeviceAllocation dk = device.allocate(acc_floats * sizeof(float)), dv = device.allocate(acc_floats * sizeof(float));

    RingBwdParams p{};
    p.q = p.k = p.v = p.dout = tiny.data();
    p.lse = p.delta = tiny.as<const float>();
    p.dq_acc = tiny.as<float>();
    p.q_positions = positions.as<const int>();
    p.kv_positions = positions.as<const int>() + kLen;
    if (intervals) {  // a kernel's mask features and its launch's tables go together
      p.q_key_first = positions.as<const int>() + 2 * kLen;
      p.q_key_last = positions.as<const int>() + 3 * kLen;
    }
    p.q_row_stride = p.k_row_stride = p.v_row_stride = p.dout_row_stride = kHeadDim;
    p.q_head_stride = p.dout_head_stride = kLen * kHeadDim;
    p.k_head_stride = p.v_head_stride = kLen * kHeadDim;
    p.q_batch_stride = p.dout_batch_stride = 2 * kLen * kHeadDim;
    p.k_batch_stride = p.v_batch_stride = kLen * kHeadDim;
    p.batch = 1;
    p.q_heads = 2;
    p.kv_heads = 1;
    p.q_len = p.kv_len = kLen;
    p.scale = 0.125f;
    p.scale_log2 = 0.125f * 1.4426950408889634f;
    p.softcap = spec.softcap ? 2.0f : 0.0f;
    const std::string what = spec.uri();

    p.accumulate_dkv = 1;
    p.dk_acc = p.dv_acc = tiny.as<float>();
    EXPECT_NO_THROW(device.launch_backward(StepType::kBwdDiagonal, p)) << what << " (add mode)";

    p.accumulate_dkv = 0;
    p.dk_acc = dk.as<float>();
    p.dv_acc = dv.as<float>();
    std::memset(dk.data(), 0xff, dk.bytes());
    std::memset(dv.data(), 0xff, dv.bytes());
    EXPECT_NO_THROW(device.launch_backward(StepType::kBwdDiagonal, p)) << what << " (write mode)";
    for (size_t i = 0; i < acc_floats; ++i) {
      ASSERT_EQ(dk.as<const float>()[i], 0.0f) << what << ": dk_acc[" << i << "]";
      ASSERT_EQ(dv.as<const float>()[i], 0.0f) << what << ": dv_acc[" << i << "]";
    }
  }
}

// A backward launch unlike its kernel is refused before it runs, as a forward one is: key-interval
// tables for a kernel without them (it would ignore the mask), none for one with them (it would
// read null tables), a softcap for a kernel without it, and heads that are not the kernel's GQA
// group (rows packed under the wrong kv head).
TEST(EmulatedBackwardMaskLaunches, ALaunchUnlikeItsKernelIsRefused) {
  const KernelSpec plain = KernelSpec::backward_default_for_arch(Dtype::kBf16, 64, true, 2, kArch);
  KernelSpec intervals = plain;
  intervals.key_intervals = true;
  std::vector<int> table(8, 0);
  const auto refusal = [&](const KernelSpec& spec, bool tables, float softcap, int q_heads) -> std::string {
    EmulatedDevice device({{StepType::kBwdDiagonal, spec}}, kArch, test_store());
    RingBwdParams p{};
    p.q_heads = q_heads;
    p.kv_heads = 1;
    p.softcap = softcap;
    if (tables) p.q_key_first = p.q_key_last = table.data();
    try {
      device.launch_backward(StepType::kBwdDiagonal, p);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInternal) << e.what();
      return e.what();
    }
    return "";
  };
  EXPECT_NE(refusal(plain, true, 0, 2).find("mask features do not match"), std::string::npos);
  EXPECT_NE(refusal(intervals, false, 0, 2).find("mask features do not match"), std::string::npos);
  EXPECT_NE(refusal(plain, false, 2.0f, 2).find("mask features do not match"), std::string::npos);
  EXPECT_NE(refusal(intervals, true, 0, 4).find("not GQA group 2"), std::string::npos);
}

// Query tiles that no interval reaches are never loaded: 64 queries of a GQA-2 kv head are two
// 64-row tiles, and only the first (then only the second) half of the queries sees the keys. Q
// and dO are laid out [query][head][dim] and allocated for the seeing half alone, so a load of
// the other tile runs off the allocation, past its end or before its start, and faults.
TEST(EmulatedBackwardMaskLaunches, QueryTilesNoIntervalReachesAreNeverLoaded) {
  constexpr int kLen = 64, kKeys = 8, kHeadDim = 64, kHalf = kLen / 2;
  KernelSpec spec = KernelSpec::backward_default_for_arch(Dtype::kBf16, kHeadDim, true, 2, kArch);
  spec.key_intervals = true;
  ASSERT_EQ(spec.block_m, 64) << spec.uri();
  EmulatedDevice device({{StepType::kBwdDiagonal, spec}}, kArch, test_store());
  for (const bool first_half_sees : {true, false}) {
    const std::string what = spec.uri() + (first_half_sees ? ": first half sees" : ": second half sees");
    // Keys at 100..107; the seeing queries' interval covers them, the others' is [0, 0] before
    // them or [200, 200] after them, so both interval ends stay non-decreasing.
    std::vector<int> table(3 * kLen + kKeys);
    for (int i = 0; i < kLen; ++i) {
      const bool sees = (i < kHalf) == first_half_sees;
      const int blind = first_half_sees ? 200 : 0;
      table[i] = i;                                // q_positions (unread with intervals)
      table[kLen + i] = sees ? 100 : blind;        // q_key_first
      table[2 * kLen + i] = sees ? 107 : blind;    // q_key_last
    }
    for (int j = 0; j < kKeys; ++j) table[3 * kLen + j] = 100 + j;
    DeviceAllocation positions = device.allocate(table.size() * sizeof(int));
    device.upload(positions.data(), table.data(), table.size() * sizeof(int));

    const size_t half_rows = static_cast<size_t>(kHalf) * 2 * kHeadDim;  // seeing half, both heads
    const auto bf16_ones = [&](size_t count) {
      DeviceAllocation a = device.allocate(count * 2);
      const std::vector<uint16_t> bits(count, float_to_bf16(0.25f));
      device.upload(a.data(), bits.data(), count * 2);
      return a;
    };
    DeviceAllocation q = bf16_ones(half_rows), dout = bf16_ones(half_rows);
    DeviceAllocation k = bf16_ones(static_cast<size_t>(kKeys) * kHeadDim);
    DeviceAllocation v = bf16_ones(static_cast<size_t>(kKeys) * kHeadDim);
    const size_t rows = 2 * kLen;
    DeviceAllocation lse = device.allocate(rows * 4), delta = device.allocate(rows * 4);
    DeviceAllocation dq = device.allocate(rows * kHeadDim * 4);
    DeviceAllocation dk = device.allocate(kKeys * kHeadDim * 4), dv = device.allocate(kKeys * kHeadDim * 4);
    std::memset(lse.data(), 0, lse.bytes());
    std::memset(delta.data(), 0, delta.bytes());
    std::memset(dq.data(), 0, dq.bytes());
    std::memset(dk.data(), 0xff, dk.bytes());
    std::memset(dv.data(), 0xff, dv.bytes());

    RingBwdParams p{};
    // The second half's rows start kHalf queries in: the pointer for query 0 lies before the
    // allocation, and only the second tile's rows are inside it.
    const ptrdiff_t shift = first_half_sees ? 0 : -static_cast<ptrdiff_t>(half_rows) * 2;
    p.q = q.as<const char>() + shift;
    p.dout = dout.as<const char>() + shift;
    p.k = k.data();
    p.v = v.data();
    p.lse = lse.as<const float>();
    p.delta = delta.as<const float>();
    p.dq_acc = dq.as<float>();
    p.dk_acc = dk.as<float>();
    p.dv_acc = dv.as<float>();
    p.q_positions = positions.as<const int>();
    p.q_key_first = positions.as<const int>() + kLen;
    p.q_key_last = positions.as<const int>() + 2 * kLen;
    p.kv_positions = positions.as<const int>() + 3 * kLen;
    p.q_row_stride = p.dout_row_stride = 2 * kHeadDim;  // [query][head][dim]
    p.q_head_stride = p.dout_head_stride = kHeadDim;
    p.q_batch_stride = p.dout_batch_stride = static_cast<int64_t>(kLen) * 2 * kHeadDim;
    p.k_row_stride = p.v_row_stride = kHeadDim;
    p.k_head_stride = p.v_head_stride = p.k_batch_stride = p.v_batch_stride = kKeys * kHeadDim;
    p.batch = 1;
    p.q_heads = 2;
    p.kv_heads = 1;
    p.q_len = kLen;
    p.kv_len = kKeys;
    p.scale = 0.125f;
    p.scale_log2 = 0.125f * 1.4426950408889634f;
    p.accumulate_dkv = 0;
    ASSERT_NO_THROW(device.launch_backward(StepType::kBwdDiagonal, p)) << what;
    // Each key's dV is the sum over the 64 seeing (query, head) rows of P dO, with P = exp(q.k / 8
    // - 0) = exp(0.25^2 64 / 8) = exp(0.5) and dO = 0.25: 64 x exp(0.5) x 0.25 per element.
    const float expected_dv = static_cast<float>(64 * std::exp(0.5) * 0.25);
    for (int e = 0; e < kKeys * kHeadDim; ++e)
      ASSERT_NEAR(dv.as<const float>()[e], expected_dv, 1e-3f * expected_dv) << what << ": dv_acc[" << e << "]";
  }
}

// One launch on full key and query tiles, against the documented semantics run in float64 by the
// model device: 64 keys (one whole key block) and 64 queries of a GQA-2 head (two 64-row tiles).
// Queries 0..31 see all the keys, so tile 0 takes the unmasked path; queries 32..63 see keys
// [i - 10, 63] only, so tile 1 takes the per-element mask. With and without the softcap.
TEST(EmulatedBackwardMaskLaunches, FullAndMaskedTilesMatchTheModelSemantics) {
  constexpr int kLen = 64, kHeadDim = 64;
  for (const bool softcap : {false, true}) {
    KernelSpec spec = KernelSpec::backward_default_for_arch(Dtype::kBf16, kHeadDim, true, 2, kArch);
    spec.key_intervals = true;
    spec.softcap = softcap;
    ASSERT_EQ(spec.block_m, 64) << spec.uri();
    ASSERT_EQ(spec.block_n, 64) << spec.uri();
    EmulatedDevice device({{StepType::kBwdDiagonal, spec}}, kArch, test_store());
    auto memory = std::make_shared<test::ModelMemory>();
    test::ModelDevice model(memory, Dtype::kBf16, kHeadDim, true, true, softcap);

    // Each buffer twice, with the same bytes: on the emulated device and in the model's memory.
    struct Twin {
      DeviceAllocation emulated, modelled;
    };
    const auto twin = [&](const void* bytes, size_t count) {
      Twin t{device.allocate(count), memory->allocate(count)};
      device.upload(t.emulated.data(), bytes, count);
      std::memcpy(t.modelled.data(), bytes, count);
      return t;
    };
    std::mt19937 rng(611);
    std::uniform_int_distribution<int> grid(-32, 32);
    const auto bf16_tensor = [&](size_t count) {
      std::vector<uint16_t> bits(count);
      for (uint16_t& b : bits) b = float_to_bf16(static_cast<float>(grid(rng)) / 32.0f);
      return twin(bits.data(), count * 2);
    };
    const size_t q_elems = 2 * kLen * kHeadDim, kv_elems = kLen * kHeadDim;
    Twin q = bf16_tensor(q_elems), dout = bf16_tensor(q_elems), k = bf16_tensor(kv_elems), v = bf16_tensor(kv_elems);
    std::vector<float> lse(2 * kLen), delta(2 * kLen);
    for (size_t i = 0; i < lse.size(); ++i) {
      lse[i] = 3.0f + static_cast<float>(grid(rng)) / 64.0f;  // P stays below 1 for these logits
      delta[i] = static_cast<float>(grid(rng)) / 64.0f;
    }
    Twin lse_t = twin(lse.data(), lse.size() * 4), delta_t = twin(delta.data(), delta.size() * 4);
    const std::vector<float> zeros(q_elems, 0.0f), poison(kv_elems, std::numeric_limits<float>::quiet_NaN());
    Twin dq = twin(zeros.data(), q_elems * 4), dk = twin(poison.data(), kv_elems * 4), dv = twin(poison.data(), kv_elems * 4);
    std::vector<int> table(4 * kLen);
    for (int i = 0; i < kLen; ++i) {
      table[i] = i;                                     // q_positions (unread with intervals)
      table[kLen + i] = i;                              // kv_positions
      table[2 * kLen + i] = i < kLen / 2 ? 0 : i - 10;  // q_key_first
      table[3 * kLen + i] = i < kLen / 2 ? 63 : 100;    // q_key_last
    }
    Twin positions = twin(table.data(), table.size() * 4);

    const auto params = [&](bool emulated) {
      const auto at = [&](const Twin& t) { return emulated ? t.emulated.data() : t.modelled.data(); };
      RingBwdParams p{};
      p.q = at(q);
      p.k = at(k);
      p.v = at(v);
      p.dout = at(dout);
      p.lse = static_cast<const float*>(at(lse_t));
      p.delta = static_cast<const float*>(at(delta_t));
      p.dq_acc = static_cast<float*>(at(dq));
      p.dk_acc = static_cast<float*>(at(dk));
      p.dv_acc = static_cast<float*>(at(dv));
      const int* table_at = static_cast<const int*>(at(positions));
      p.q_positions = table_at;
      p.kv_positions = table_at + kLen;
      p.q_key_first = table_at + 2 * kLen;
      p.q_key_last = table_at + 3 * kLen;
      p.q_row_stride = p.k_row_stride = p.v_row_stride = p.dout_row_stride = kHeadDim;
      p.q_head_stride = p.dout_head_stride = p.k_head_stride = p.v_head_stride = kLen * kHeadDim;
      p.q_batch_stride = p.dout_batch_stride = 2 * kLen * kHeadDim;
      p.k_batch_stride = p.v_batch_stride = kLen * kHeadDim;
      p.batch = 1;
      p.q_heads = 2;
      p.kv_heads = 1;
      p.q_len = p.kv_len = kLen;
      p.scale = 0.125f;
      p.scale_log2 = 0.125f * 1.4426950408889634f;
      p.softcap = softcap ? 1.5f : 0.0f;
      p.accumulate_dkv = 0;
      return p;
    };
    ASSERT_NO_THROW(device.launch_backward(StepType::kBwdDiagonal, params(true))) << spec.uri();
    model.launch_backward(StepType::kBwdDiagonal, params(false));

    const auto error = [](const Twin& t, size_t count) {
      const float* got = t.emulated.as<const float>();
      const float* want = t.modelled.as<const float>();
      double diff = 0, ref = 0;
      for (size_t i = 0; i < count; ++i) {
        diff += (got[i] - want[i]) * (got[i] - want[i]);
        ref += static_cast<double>(want[i]) * want[i];
      }
      return std::sqrt(diff / ref);
    };
    // P and dS enter the tile GEMMs as bf16 (2^-9 relative), the model keeps float64: one step
    // against the model, so one ulp at 1 (error_limit.h), not the ring's two.
    testing::expect_within_limit(error(dq, q_elems), Dtype::kBf16, spec.uri() + " dq", 1.0);
    testing::expect_within_limit(error(dk, kv_elems), Dtype::kBf16, spec.uri() + " dk", 1.0);
    testing::expect_within_limit(error(dv, kv_elems), Dtype::kBf16, spec.uri() + " dv", 1.0);
  }
}

}  // namespace
}  // namespace cpgen
