// Flash-decoding combine: merges the per-split partial results of the split pass.
//   lse = max_s + ln(sum_s exp(lse_s - max_s)),  O = sum_s exp(lse_s - lse) * O_s
// Splits whose rows saw no key carry lse_s = -inf and weigh 0.  The head's sink z (params word
// P_COUNT + h when P_SINKS = 1) joins here, once, as one more term with no value:
//   lse = log(e^z + sum_s e^lse_s), O = sum_s e^(lse_s - lse) O_s;
// a row with no key at all gets O = 0, lse = z (-inf without sinks).
#pragma once
#include <math_constants.h>
#include "element_type.cuh"
#include "flash_params.cuh"

namespace flash {

constexpr int kCombineThreads = 128;
// D/8 threads per row, each combining 8 values (one 16-byte store of 8 elements): rows per block.
template <int D>
constexpr int kCombineRows = kCombineThreads / (D / 8);
// Every thread of a block but the last 128 % (D/8) (D = 96, 192: 8 idle threads) owns one
// 8-column slice of a row.
template <int D>
constexpr bool kCombineFits = D % 8 == 0 && D / 8 <= kCombineThreads;
template <int D>
constexpr bool kCombineIdle = kCombineThreads % (D / 8) != 0;

// A partial result: kL2Only reads it with ld.global.cg (L2, not L1), for the fused decode kernel,
// where other CTAs of the same launch wrote it and this SM's L1 may hold an older copy of the line.
template <bool kL2Only, typename T>
__device__ __forceinline__ T load_partial(const T* p) {
  if constexpr (kL2Only) return __ldcg(p);
  else return *p;
}

// Combines row `row` (= (b*Hq + h)*Sq + s, the lse layout) of `rows`, columns [c, c + 8):
// the caller gives each row D/8 threads, so the store of o (element type E) is one 16-byte vector.
// pd: the params block's data (the sinks follow its 32 words).
template <class E, int D, bool kL2Only>
__device__ __forceinline__ void combine_row(const float* __restrict__ o_partial,
                                            const float* __restrict__ lse_partial,
                                            typename E::Storage* __restrict__ o, float* __restrict__ lse,
                                            const Params& p, const int* __restrict__ pd, int64_t rows, int64_t row,
                                            int c) {
  const int splits = p.num_splits;
  const int h = (int)((row / p.Sq) % p.Hq);
  // A cache decode's absent query (kAbsentLseBits in every split) has no sink: O = 0, lse = -inf.
  const bool absent = __float_as_int(load_partial<kL2Only>(lse_partial + row)) == kAbsentLseBits;
  const float sink = absent ? -CUDART_INF_F : sink_logit<0>(pd, h);
  float lmax = sink;
  for (int s = 0; s < splits; ++s) lmax = fmaxf(lmax, load_partial<kL2Only>(lse_partial + s * rows + row));

  float acc[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j] = 0.f;
  float wsum = 0.f;
  if (lmax != -CUDART_INF_F) {
    for (int s = 0; s < splits; ++s) {
      const float ls = load_partial<kL2Only>(lse_partial + s * rows + row);
      if (ls == -CUDART_INF_F || absent) continue;
      const float w = __expf(ls - lmax);
      wsum += w;
      const float4* src = reinterpret_cast<const float4*>(o_partial + (s * rows + row) * D + c);
      const float4 x0 = load_partial<kL2Only>(src), x1 = load_partial<kL2Only>(src + 1);
      acc[0] += w * x0.x; acc[1] += w * x0.y; acc[2] += w * x0.z; acc[3] += w * x0.w;
      acc[4] += w * x1.x; acc[5] += w * x1.y; acc[6] += w * x1.z; acc[7] += w * x1.w;
    }
    if (sink != -CUDART_INF_F) wsum += __expf(sink - lmax);
  }
  const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
  const int sq = (int)(row % p.Sq);
  const int b = (int)(row / ((int64_t)p.Sq * p.Hq));
  uint4 out;
  typename E::Pair* oh = reinterpret_cast<typename E::Pair*>(&out);
#pragma unroll
  for (int j = 0; j < 4; ++j) oh[j] = E::pair_rn(acc[2 * j] * inv, acc[2 * j + 1] * inv);
  *reinterpret_cast<uint4*>(o + (int64_t)b * p.o_sb + (int64_t)h * p.o_sh + (int64_t)sq * p.o_sr + c) = out;
  if (p.write_lse && c == 0) lse[row] = wsum > 0.f ? lmax + logf(wsum) : -CUDART_INF_F;
}

// The combine pass: grid = ceil(B*Hq*Sq / (128 / (D/8))), D/8 threads per row.
template <class E, int D>
__device__ __forceinline__ void decode_combine_body(const float* __restrict__ o_partial,
                                                    const float* __restrict__ lse_partial,
                                                    typename E::Storage* __restrict__ o, float* __restrict__ lse,
                                                    const int* __restrict__ params) {
  static_assert(kCombineFits<D>, "combine: D/8 threads per row, at most the block");
  constexpr int kThreadsPerRow = D / 8;
  constexpr int kRowsPerBlock = kCombineRows<D>;
  if constexpr (kCombineIdle<D>) {
    if (threadIdx.x >= kRowsPerBlock * kThreadsPerRow) return;
  }
  const Params p = load_params(params);
  const int64_t rows = (int64_t)p.B * p.Hq * p.Sq;
  const int64_t row = (int64_t)blockIdx.x * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  if (row >= rows) return;
  combine_row<E, D, false>(o_partial, lse_partial, o, lse, p, params, rows, row, (threadIdx.x % kThreadsPerRow) * 8);
}

// The split-then-combine-in-one-launch handshake of the fused decodes (decode_fused_body,
// cache_decode_fused_body): after its split pass a CTA publishes its partials and takes a ticket of
// its row block (tickets: gridDim.y * gridDim.z zeroed words behind a kHdr-byte header); the last of
// the gridDim.x split CTAs gets the ticket word back (it combines the block's rows, then sets the
// word to 0 for the next launch), every other CTA nullptr.
template <int kHdr>
__device__ __forceinline__ int* last_split_ticket(int* tickets) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  int* ticket = at_data<kHdr>(tickets) + blockIdx.z * gridDim.y + blockIdx.y;
  if (threadIdx.x == 0) last = atomicAdd(ticket, 1) == (int)gridDim.x - 1;
  __syncthreads();
  if (!last) return nullptr;
  __threadfence();  // every other split's partials are visible from here on
  return ticket;
}

}  // namespace flash
