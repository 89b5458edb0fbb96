// Online softmax in the log2 domain. A row's state is (m, l, o): m a running reference at most
// kMaxLag below the max of the scaled scores s_j = (q . k_j) * softmax_scale * log2(e) seen so
// far (and never above it), l = sum_j exp2(s_j - m), o = sum_j exp2(s_j - m) v_j. Folding log2(e) into the scale turns every exponential into one exp2 of one
// FMA: exp2(raw_j * scale_log2 - m).
//
// An empty row (no visible key yet) is m = -inf, l = 0, o = 0. Every rescale below subtracts a
// reference max that is replaced by 0 when the max is -inf, so exp2(-inf - 0) = 0 and no
// (-inf) - (-inf) = NaN can appear. The kernels merge a step into the running state by starting
// the online softmax from that state (step_fwd.cuh, step_fwd_wgmma.cuh), so online_step is the
// only merge there is.
#pragma once

#include "cpgen/platform.cuh"

namespace cpgen {
namespace device {

// How far (log2 units) a tile's max may rise above a row's m before m follows it. m need not be
// the row's true max: l, o and lse only need every exponential to subtract the same m, so a row
// keeps its m while the scores stay below m + kMaxLag, its exponentials then reach at most
// 2^kMaxLag (exact in fp32, and 256 fits fp16 and bf16 as P), and its rescale is exactly 1. A
// running max that only moves by more than that leaves the O accumulator alone on almost every
// tile after the first, where following every new max rescaled it whenever any row of a warp
// saw a slightly larger score.
constexpr float kMaxLag = 8.0f;

// New running reference m after seeing a tile whose largest scaled score is tile_max, the offset
// the tile's exponentials subtract, and the factor exp2(m_old - m_new) that rescales the old l
// and o: m stays m_old unless tile_max exceeds it by more than kMaxLag (an empty row's -inf
// always moves to a finite tile_max).
struct OnlineStep {
  float m;
  float offset;
  float rescale;
};

CPGEN_HOST_DEVICE OnlineStep online_step(float m_old, float tile_max) {
  const float m = tile_max > m_old + kMaxLag ? tile_max : m_old;
  const float offset = m == -positive_infinity() ? 0.0f : m;
  return {m, offset, exp2_approx(m_old - offset)};
}

// out = o / l, with a row that saw no key written as zeros.
CPGEN_HOST_DEVICE float output_scale(float l) { return l > 0.0f ? 1.0f / l : 0.0f; }

// Natural-log LSE of the softmax denominator: log(sum_j e^{raw_j * scale}) = (m + log2 l) ln 2;
// -inf for a row with no key.
CPGEN_HOST_DEVICE float lse_natural(float m, float l) {
  return l > 0.0f ? (m + log2_approx(l)) * 0.693147180559945309f : -positive_infinity();
}

// The softcap's tanh(x), and for the backward (step_bwd.cuh) its slope d tanh(x) / dx =
// 1 - tanh(x)^2, both from e = exp(-2|x|): tanh = sign(x) (1 - e) / (1 + e), slope = sech(x)^2 =
// 4 e / (1 + e)^2, with ex2.approx and rcp.approx (2 and 1 ulp). Not tanh.approx: its 2^-11
// relative error is c 2^-11 |t| on a logit c t, which a cap of 30-50 over logits of that size
// turns into lse errors of 1.1-2.9 bf16 and 9-23 fp16 units of the test limit (the emulator at the
// edges of the ISA's bound), and in 1 - t^2 it cancels as t nears 1 until it is all of the slope
// (fp16 gradients at 3.2 units at cap 0.25, 0.3 from this). Here tanh keeps an absolute error of a
// few 1e-7 and the slope a few ulps relative at every x (0 once e underflows, past |x| = 43).
// Two MUFU operations where tanh.approx took one.
struct TanhSlope {
  float tanh;
  float slope;
};
CPGEN_HOST_DEVICE TanhSlope tanh_and_slope(float x) {
  constexpr float kMinusTwoLog2e = -2.8853900817779268f;  // -2 log2(e)
  const float e = exp2_approx(kMinusTwoLog2e * (x < 0.0f ? -x : x));
  const float r = rcp_approx(1.0f + e);
  const float magnitude = (1.0f - e) * r;
  return {x < 0.0f ? -magnitude : magnitude, 4.0f * e * r * r};
}
// The forward's softcap: the tanh alone.
CPGEN_HOST_DEVICE float softcap_tanh(float x) { return tanh_and_slope(x).tanh; }

#if defined(__CUDACC__)

// A quad of lanes (lane / 4 equal) shares the rows of an MMA accumulator; these reduce over it.
CPGEN_DEVICE float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
CPGEN_DEVICE float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// One key tile of the online softmax over a warp's scores, in place: s[mt][j][e] holds the raw
// score of row acc_row(lane, e) of m-tile mt and key 8 j + acc_col(lane, e) (-inf where masked)
// and becomes p = exp2(raw * scale_log2 - offset). row_max is kept quad-uniform; row_sum stays a
// per-lane partial sum (every lane of a quad rescales by the same factor, so the quad_sum is
// deferred to the end of the step). rescale receives the factor for the output accumulator.
template <int kMTiles, int kNTiles>
CPGEN_DEVICE void online_softmax_tile(float (&s)[kMTiles][kNTiles][4], float (&row_max)[kMTiles][2],
                                      float (&row_sum)[kMTiles][2], float (&rescale)[kMTiles][2],
                                      float scale_log2) {
  // The max and the sum of a row's 2 kNTiles values run as kChains independent chains, combined
  // at the end: one chain is 2 kNTiles dependent FMNMX (or FADD) in the softmax's critical path
  // (the 2026-11-28 H200 profile of the wgmma kernel had its FMNMX among the top stall sites),
  // kChains of them a quarter as deep for kChains - 1 more registers each.
  constexpr int kChains = kNTiles >= 4 ? 4 : kNTiles;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // Each chain starts from its first pair (kChains <= kNTiles): no max with -inf or sum with
      // 0 to start from, which ptxas may not fold away.
      float chain_max[kChains];
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        const float pair_max = fmaxf(s[mt][j][2 * half], s[mt][j][2 * half + 1]);
        chain_max[j % kChains] = j < kChains ? pair_max : fmaxf(chain_max[j % kChains], pair_max);
      }
      float raw_max = chain_max[0];
#pragma unroll
      for (int c = 1; c < kChains; ++c) raw_max = fmaxf(raw_max, chain_max[c]);
      // scale_log2 > 0, so the max of the scaled scores is the scaled max of the raw ones.
      const OnlineStep step = online_step(row_max[mt][half], quad_max(raw_max) * scale_log2);
      row_max[mt][half] = step.m;
      rescale[mt][half] = step.rescale;
      float chain_sum[kChains];
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        const float p0 = exp2_approx(fmaf(s[mt][j][2 * half], scale_log2, -step.offset));
        const float p1 = exp2_approx(fmaf(s[mt][j][2 * half + 1], scale_log2, -step.offset));
        s[mt][j][2 * half] = p0;
        s[mt][j][2 * half + 1] = p1;
        chain_sum[j % kChains] = j < kChains ? p0 + p1 : chain_sum[j % kChains] + (p0 + p1);
      }
      float tile_sum = chain_sum[0];
#pragma unroll
      for (int c = 1; c < kChains; ++c) tile_sum += chain_sum[c];
      row_sum[mt][half] = row_sum[mt][half] * step.rescale + tile_sum;
    }
  }
}

#endif  // __CUDACC__

}  // namespace device
}  // namespace cpgen
