// bfloat16 attention for CPUs with AVX-512 BF16: what a native attention call runs (native_kernels.cpp)
// in place of torch's CPU flash kernel where it applies.
//
// torch's flash kernel runs its products as many small GEMM calls (256 x 512 blocks with an online
// softmax), at about 40% of this CPU's bf16 peak; at FLUX.2's 4608 tokens that was 30% of a forward.
// Here each task takes 24 query rows of one head and the whole key length at once, so the softmax is
// exact (one max and one sum per row, no rescaling) and both products are register-tiled dpbf16 loops
// over operands packed once per head (VNNI pairs), at about 80% of the peak:
//   scores (24 x S, f32) = Q (24 x E) . K^T     tiles of 6 rows x 64 keys, 24 accumulators
//   P = bf16(exp(scores * scale - row max))     the row sums kept in f32
//   O (24 x Ev, f32) = P . V                    tiles of 6 rows x 64 columns, keys in chunks that stay
//                                               in cache while every 6-row tile uses them
//   out = bf16(O / row sum), lse = row max + log(row sum)
// The numerics are the flash kernel's: bf16 products accumulated in f32, the probabilities rounded to
// bf16 before they multiply V, f32 sums; the rounding points differ (one true row max instead of a
// running one), so results agree with the CPU's to bf16 rounding, not bit for bit.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
// GCC 12's AVX-512 headers trip its own uninitialized-value warnings (their _mm512_undefined_*)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "neuron.h"

// A tile's accumulators must live in registers: its row and column loops are unrolled
// (#pragma GCC unroll), which -O2 alone does not do (it keeps them in memory, at half the speed).
#define NEURON_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")))

namespace torch_neuronx {
namespace {

using bf16 = uint16_t;

constexpr int64_t kRowTile = 6;    // rows of one register tile
constexpr int64_t kRows = 24;      // query rows per task (4 register tiles)
constexpr int64_t kKeyTile = 64;   // keys per score tile (4 zmm of 16 floats)
constexpr int64_t kPairChunk = 256;  // key pairs per P.V chunk (64 KB of packed V at Ev = 128)

// Where this kernel is the fast one: AVX-512 BF16 without AMX. With AMX BF16 torch's flash kernel runs
// its products on the tiles, 6-12x this kernel's time (FLUX.2's 24 x 4608 x 128 attention: 0.28 s
// against 1.58 s on a 2-core Xeon with AMX).
bool runs_on_this_cpu() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bf16") && !__builtin_cpu_supports("amx-bf16");
  return has;
}

// exp(x) for 16 floats: 2^n * p(r) with x = n ln2 + r, |r| <= ln2 / 2; relative error about 2e-7.
NEURON_AVX512_BF16 inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
  const __m512 n = _mm512_roundscale_ps(
      _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// scores[6 x 64 keys from j0] = Q[6 x E] . K^T; `kp` is one head's keys as [E/2][s_pad][2].
NEURON_AVX512_BF16 void score_tile(
    const bf16* q, int64_t ldq, const bf16* kp, int64_t s_pad, int64_t E, float* s, int64_t j0) {
  __m512 acc[kRowTile][4];
  #pragma GCC unroll 8
  for (int r = 0; r < kRowTile; r++) {
    #pragma GCC unroll 8
    for (int c = 0; c < 4; c++) {
      acc[r][c] = _mm512_setzero_ps();
    }
  }
  for (int64_t p = 0; p < E / 2; p++) {
    const bf16* b = kp + (p * s_pad + j0) * 2;
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b), b1 = (__m512bh)_mm512_loadu_si512(b + 32),
                   b2 = (__m512bh)_mm512_loadu_si512(b + 64), b3 = (__m512bh)_mm512_loadu_si512(b + 96);
    #pragma GCC unroll 8
    for (int r = 0; r < kRowTile; r++) {
      int32_t pair;
      std::memcpy(&pair, q + r * ldq + 2 * p, sizeof pair);
      const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
      acc[r][2] = _mm512_dpbf16_ps(acc[r][2], a, b2);
      acc[r][3] = _mm512_dpbf16_ps(acc[r][3], a, b3);
    }
  }
  #pragma GCC unroll 8
  for (int r = 0; r < kRowTile; r++) {
    #pragma GCC unroll 8
    for (int c = 0; c < 4; c++) {
      _mm512_storeu_ps(s + r * s_pad + j0 + 16 * c, acc[r][c]);
    }
  }
}

// o[6 x 16*NC columns from c0] (+)= P[6 x key pairs t0..t1] . V; `vp` is one head's values as
// [s_pad/2][Ev][2].
template <int NC>
NEURON_AVX512_BF16 void value_tile(
    const bf16* p, int64_t ldp, const bf16* vp, int64_t Ev, int64_t t0, int64_t t1, float* o, int64_t c0,
    bool add) {
  __m512 acc[kRowTile][NC];
  #pragma GCC unroll 8
  for (int r = 0; r < kRowTile; r++) {
    #pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
      acc[r][c] = add ? _mm512_loadu_ps(o + r * Ev + c0 + 16 * c) : _mm512_setzero_ps();
    }
  }
  for (int64_t t = t0; t < t1; t++) {
    const bf16* b = vp + (t * Ev + c0) * 2;
    __m512bh bv[NC];
    #pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
      bv[c] = (__m512bh)_mm512_loadu_si512(b + 32 * c);
    }
    #pragma GCC unroll 8
    for (int r = 0; r < kRowTile; r++) {
      int32_t pair;
      std::memcpy(&pair, p + r * ldp + 2 * t, sizeof pair);
      const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
      #pragma GCC unroll 8
      for (int c = 0; c < NC; c++) {
        acc[r][c] = _mm512_dpbf16_ps(acc[r][c], a, bv[c]);
      }
    }
  }
  #pragma GCC unroll 8
  for (int r = 0; r < kRowTile; r++) {
    #pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
      _mm512_storeu_ps(o + r * Ev + c0 + 16 * c, acc[r][c]);
    }
  }
}

// One row's probabilities: p[j] = bf16(exp(s[j] * scale - m)) for j < S (0 up to s_pad), m the row's
// largest s[j] * scale; returns the f32 sum of the exponentials and sets *max.
NEURON_AVX512_BF16 float softmax_row(const float* s, int64_t S, int64_t s_pad, float scale, bf16* p, float* max) {
  const __m512 vs = _mm512_set1_ps(scale);
  __m512 mx = _mm512_set1_ps(-INFINITY);
  int64_t j = 0;
  for (; j + 16 <= S; j += 16) {
    mx = _mm512_max_ps(mx, _mm512_mul_ps(_mm512_loadu_ps(s + j), vs));
  }
  const __mmask16 tail = static_cast<__mmask16>((1u << (S - j)) - 1u);
  if (tail) {
    mx = _mm512_mask_max_ps(mx, tail, mx, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, s + j), vs));
  }
  const float m = _mm512_reduce_max_ps(mx);
  if (m == -INFINITY) {  // every key masked: no probability (the caller writes a zero row)
    std::memset(p, 0, s_pad * sizeof(bf16));
    *max = m;
    return 0.0f;
  }
  const __m512 vm = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  for (j = 0; j + 32 <= S; j += 32) {
    const __m512 e0 = exp16(_mm512_fmsub_ps(_mm512_loadu_ps(s + j), vs, vm));
    const __m512 e1 = exp16(_mm512_fmsub_ps(_mm512_loadu_ps(s + j + 16), vs, vm));
    sum = _mm512_add_ps(sum, _mm512_add_ps(e0, e1));
    _mm512_storeu_si512(p + j, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
  }
  for (; j < S; j += 16) {
    const int64_t n = std::min<int64_t>(16, S - j);
    const __mmask16 k = static_cast<__mmask16>((1u << n) - 1u);
    const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, s + j), vs, vm)));
    sum = _mm512_add_ps(sum, e);
    _mm256_mask_storeu_epi16(p + j, k, (__m256i)_mm512_cvtneps_pbh(e));
  }
  std::memset(p + S, 0, (s_pad - S) * sizeof(bf16));  // padded keys: probability 0
  *max = m;
  return _mm512_reduce_add_ps(sum);
}

// A masked row's scores biased in place: s[j] = s[j] * scale + bias[j] for j < S.
NEURON_AVX512_BF16 void bias_row(float* s, const float* bias, int64_t S, float scale) {
  const __m512 vs = _mm512_set1_ps(scale);
  int64_t j = 0;
  for (; j + 16 <= S; j += 16) {
    _mm512_storeu_ps(s + j, _mm512_fmadd_ps(_mm512_loadu_ps(s + j), vs, _mm512_loadu_ps(bias + j)));
  }
  const __mmask16 tail = static_cast<__mmask16>((1u << (S - j)) - 1u);
  if (tail) {
    _mm512_mask_storeu_ps(s + j, tail,
                          _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, s + j), vs, _mm512_maskz_loadu_ps(tail, bias + j)));
  }
}

// out row = bf16(o * inv), 16*k columns at a time (Ev is a multiple of 16).
NEURON_AVX512_BF16 void finish_row(const float* o, int64_t Ev, float inv, bf16* out) {
  const __m512 vi = _mm512_set1_ps(inv);
  for (int64_t c = 0; c < Ev; c += 16) {
    _mm256_storeu_si256((__m256i*)(out + c), (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(o + c), vi)));
  }
}

NEURON_AVX512_BF16 void value_tiles(
    const bf16* p, int64_t ldp, const bf16* vp, int64_t Ev, int64_t t0, int64_t t1, float* o, bool add) {
  int64_t c0 = 0;
  for (; c0 + 64 <= Ev; c0 += 64) {
    value_tile<4>(p, ldp, vp, Ev, t0, t1, o, c0, add);
  }
  switch ((Ev - c0) / 16) {
    case 3: value_tile<3>(p, ldp, vp, Ev, t0, t1, o, c0, add); break;
    case 2: value_tile<2>(p, ldp, vp, Ev, t0, t1, o, c0, add); break;
    case 1: value_tile<1>(p, ldp, vp, Ev, t0, t1, o, c0, add); break;
    default: break;
  }
}

// Packs each (batch, head)'s keys as [E/2][s_pad][2] and values as [s_pad/2][Ev][2] (one 32-bit pair
// per element of the tiles' loads), zeros past S.
void pack(const at::Tensor& k, const at::Tensor& v, int64_t s_pad, bf16* kp, bf16* vp) {
  const int64_t B = k.size(0), H = k.size(1), S = k.size(2), E = k.size(3), Ev = v.size(3);
  const auto* K = reinterpret_cast<const bf16*>(k.data_ptr());
  const auto* V = reinterpret_cast<const bf16*>(v.data_ptr());
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t bh = begin; bh < end; bh++) {
      const int64_t b = bh / H, h = bh % H;
      const bf16* kh = K + b * k.stride(0) + h * k.stride(1);
      const bf16* vh = V + b * v.stride(0) + h * v.stride(1);
      auto* kout = reinterpret_cast<uint32_t*>(kp + bh * s_pad * E);  // [E/2][s_pad] pairs
      auto* vout = reinterpret_cast<uint32_t*>(vp + bh * s_pad * Ev);  // [s_pad/2][Ev] pairs
      for (int64_t j0 = 0; j0 < s_pad; j0 += 16) {  // 16 keys at a time: their rows stay in L1
        for (int64_t p = 0; p < E / 2; p++) {
          for (int64_t j = j0; j < j0 + 16; j++) {
            uint32_t pair = 0;
            if (j < S) {
              std::memcpy(&pair, kh + j * k.stride(2) + 2 * p, sizeof pair);
            }
            kout[p * s_pad + j] = pair;
          }
        }
      }
      for (int64_t t = 0; t < s_pad / 2; t++) {
        const bf16* even = 2 * t < S ? vh + 2 * t * v.stride(2) : nullptr;
        const bf16* odd = 2 * t + 1 < S ? vh + (2 * t + 1) * v.stride(2) : nullptr;
        for (int64_t c = 0; c < Ev; c++) {
          vout[t * Ev + c] = (even ? even[c] : 0u) | (odd ? static_cast<uint32_t>(odd[c]) << 16 : 0u);
        }
      }
    }
  });
}

void run_tasks(
    const at::Tensor& q, int64_t S, int64_t s_pad, const bf16* kp, const bf16* vp, float scale, int64_t Ev,
    const at::Tensor* mask, bf16* out, float* lse) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), E = q.size(3);
  const int64_t blocks = (L + kRows - 1) / kRows;
  const auto* Q = reinterpret_cast<const bf16*>(q.data_ptr());
  const float* M = mask != nullptr ? mask->data_ptr<float>() : nullptr;
  at::parallel_for(0, B * H * blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(kRows * s_pad), o(kRows * Ev);
    std::vector<bf16> probs(kRows * s_pad), padded(kRows * E);
    float sums[kRows], maxes[kRows];
    for (int64_t task = begin; task < end; task++) {
      const int64_t bh = task / blocks, b = bh / H, h = bh % H, i0 = (task % blocks) * kRows;
      const int64_t rows = std::min(kRows, L - i0);
      const bf16* qrows = Q + b * q.stride(0) + h * q.stride(1) + i0 * q.stride(2);
      int64_t ldq = q.stride(2);
      if (rows < kRows) {  // the last block: its rows copied into a zero-padded tile
        std::fill(padded.begin(), padded.end(), 0);
        for (int64_t r = 0; r < rows; r++) {
          std::memcpy(padded.data() + r * E, qrows + r * ldq, E * sizeof(bf16));
        }
        qrows = padded.data();
        ldq = E;
      }
      const bf16* kh = kp + bh * s_pad * E;
      const bf16* vh = vp + bh * s_pad * Ev;
      for (int64_t j0 = 0; j0 < s_pad; j0 += kKeyTile) {
        for (int64_t r = 0; r < kRows; r += kRowTile) {
          score_tile(qrows + r * ldq, ldq, kh, s_pad, E, scores.data() + r * s_pad, j0);
        }
      }
      for (int64_t r = 0; r < kRows; r++) {
        float* row = scores.data() + r * s_pad;
        if (mask != nullptr && r < rows) {  // (the zero rows padding the last block need no mask)
          bias_row(row, M + b * mask->stride(0) + h * mask->stride(1) + (i0 + r) * mask->stride(2), S, scale);
          sums[r] = softmax_row(row, S, s_pad, 1.0f, probs.data() + r * s_pad, &maxes[r]);
        } else {
          sums[r] = softmax_row(row, S, s_pad, scale, probs.data() + r * s_pad, &maxes[r]);
        }
      }
      for (int64_t t0 = 0; t0 < s_pad / 2; t0 += kPairChunk) {
        const int64_t t1 = std::min(t0 + kPairChunk, s_pad / 2);
        for (int64_t r = 0; r < kRows; r += kRowTile) {
          value_tiles(probs.data() + r * s_pad, s_pad, vh, Ev, t0, t1, o.data() + r * Ev, t0 > 0);
        }
      }
      for (int64_t r = 0; r < rows; r++) {
        const int64_t i = i0 + r;
        // a fully masked row is zeros, as the CPU's flash kernel gives
        finish_row(o.data() + r * Ev, Ev, sums[r] > 0.0f ? 1.0f / sums[r] : 0.0f, out + ((b * L + i) * H + h) * Ev);
        lse[(b * H + h) * L + i] = maxes[r] + std::log(sums[r]);
      }
    }
  });
}

}  // namespace

bool bf16_attention_available() {
  return runs_on_this_cpu();
}

bool bf16_attention_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool is_causal) {
  if (is_causal || !runs_on_this_cpu() || q.dim() != 4 || k.dim() != 4 || v.dim() != 4) {
    return false;
  }
  for (const auto* t : {&q, &k, &v}) {
    if (t->scalar_type() != at::kBFloat16 || t->stride(3) != 1) {
      return false;
    }
  }
  const int64_t E = q.size(3), Ev = v.size(3);
  return q.size(2) > 0 && k.size(2) > 0 && E % 2 == 0 && Ev % 16 == 0 && k.size(3) == E &&
      k.sizes().slice(0, 2) == q.sizes().slice(0, 2) && v.sizes().slice(0, 3) == k.sizes().slice(0, 3);
}

void bf16_attention(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& mask,
    double scale, const at::Tensor& out, const at::Tensor& lse) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2), E = q.size(3), Ev = v.size(3);
  at::Tensor bias;  // float32 (B, H, L, S), broadcast dims of stride 0, keys contiguous
  if (mask.has_value()) {
    bias = mask->to(at::kFloat).expand({B, H, L, S});
    if (bias.stride(3) != 1) {
      bias = bias.contiguous();
    }
  }
  TORCH_CHECK(out.is_contiguous() && out.scalar_type() == at::kBFloat16 &&
                  out.sizes() == at::IntArrayRef({B, q.size(2), H, Ev}),
              "bf16 attention: the output must be a contiguous bf16 (B, L, H, Ev) buffer");
  TORCH_CHECK(lse.is_contiguous() && lse.scalar_type() == at::kFloat, "bf16 attention: lse must be contiguous f32");
  const int64_t s_pad = (S + kKeyTile - 1) / kKeyTile * kKeyTile;
  at::Tensor kp = at::empty({B * H * s_pad * E}, at::kBFloat16);
  at::Tensor vp = at::empty({B * H * s_pad * Ev}, at::kBFloat16);
  pack(k, v, s_pad, reinterpret_cast<bf16*>(kp.data_ptr()), reinterpret_cast<bf16*>(vp.data_ptr()));
  run_tasks(q, S, s_pad, reinterpret_cast<const bf16*>(kp.data_ptr()), reinterpret_cast<const bf16*>(vp.data_ptr()),
            static_cast<float>(scale), Ev, mask.has_value() ? &bias : nullptr, reinterpret_cast<bf16*>(out.data_ptr()),
            lse.data_ptr<float>());
}

}  // namespace torch_neuronx
