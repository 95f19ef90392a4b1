"""Every tolerance of the test suite that is not torch's default, with the reason the op may differ
from the CPU by that much: first the lowering and device tests' (tests/test_lowerings_*.py and the
model tests; `tol(name, dtype)`), with the error measured here; then the OpInfo entries'
(`opinfo_tolerance(entry, dtype)`, keyed by op_db entry name, by family).

torch.testing.assert_close's defaults are float32 rtol 1.3e-6 / atol 1e-5, bfloat16 rtol 1.6e-2 /
atol 1e-5, float16 rtol 1e-3 / atol 1e-5, float64 rtol 1e-7 / atol 1e-7. An op with no entry here
(or no entry for a dtype) is held to those. bfloat16 has an 8-bit significand: one rounding is off
by at most 2^-9 relative (half an ulp) and one ulp of v is between 2^-8 |v| and 2^-7 |v|; float16's
ulp is 2^-11..2^-10 |v|; float32's eps is 2^-23 = 1.2e-7.

"Measured" values come from the seeded inputs of the tests (the conftest seeds every test with
torch.manual_seed(0)), as the largest error over every comparison of that family: "abs" is
max |got - want|, "needs atol A" is the smallest atol that passes at the entry's rtol (or torch's
default rtol). Each entry leaves a margin over what was measured (1.4x at the least; the entries say).

Entries: name -> ({dtype: (rtol, atol) or (rtol, atol, atol_scale)}, reason). atol_scale: the
absolute tolerance grows to atol_scale * max|expected| of the compared tensor, for sums of many
terms, where an output that cancels to near zero keeps an error of about an ulp of the partial sums
rather than of itself (the convention of tests/opinfo_support.py's TOLERANCES).
"""
from __future__ import annotations

import torch

F32, F64, BF16, F16 = torch.float32, torch.float64, torch.bfloat16, torch.float16
C64, C128 = torch.complex64, torch.complex128

# bit-for-bit comparisons (indices, counts, copies, ops whose arithmetic is the CPU's step for step)
EXACT = dict(rtol=0, atol=0)

TOLERANCES: dict[str, tuple[dict, str]] = {}


def _entry(names: str, reason: str, **by_dtype):
    table = {{"f32": F32, "f64": F64, "bf16": BF16, "f16": F16}[k]: v for k, v in by_dtype.items()}
    for name in names.split():
        assert name not in TOLERANCES, name
        TOLERANCES[name] = (table, reason)


# ---- sums of many products (accumulation order), float32 and 16-bit

_entry("conv", "convolution (forward and both gradients): XLA's convolution and oneDNN add the kernel-window "
       "and batch products in different orders. Measured float32: abs 1.1e-5 on weight gradients of "
       "magnitude 38 (sums of N*OH*OW = 180 products), needs atol 6.2e-6 at torch's rtol; that is "
       "OpInfo's (1e-5, 1e-5). float16: the CPU's transposed convolution rounds partial sums to float16, "
       "the lowering accumulates in float32: abs 1.2e-2 (one float16 ulp of the largest output, 16), "
       "needs atol 4.3e-3 = 2.7e-4 of max|out|. bfloat16 is bit-exact where torch runs oneDNN's bf16 "
       "kernels (both sides accumulate in float32 and round once); on a CPU without them (AVX2 only) "
       "torch's reference convolution rounds partial sums to bfloat16 as well, and is farther from the "
       "exact result than the lowering (transposed forward: 0.100 against 0.029): measured abs 0.125, "
       "one ulp at max|out| 16.5, needs atol 7.6e-3 of max|out|; atol_scale 2^-6 (2x).",
       f32=(1e-5, 1e-5), f16=(1e-3, 1e-5, 1e-3), bf16=(1.6e-2, 1e-5, 2 ** -6))
_entry("matmul", "a float32 matrix product against the exact (float64) product: the float32 sum of K = 256 "
       "products carries K-dependent rounding. Measured abs 1.5e-5 on |out| <= 70, needs atol 7.5e-6 at "
       "torch's rtol; OpInfo's matmul bound (1e-5, 1e-5).",
       f32=(1e-5, 1e-5))
_entry("addbmm", "bfloat16 addbmm: PyTorch's CPU kernel adds the batches one addmm at a time and rounds the "
       "running sum to bfloat16 after each (the lowering sums in float32 and rounds once), so the "
       "result can be an ulp of the running sum off. Measured abs 0.12 = one ulp at |out| 16..32, "
       "needs rtol 1.5e-2 at atol 1e-5; atol_scale 2^-8 (one ulp of max|out|) covers it with 3x margin.",
       bf16=(1.6e-2, 1e-5, 2 ** -8))
_entry("embedding_bag", "embedding_bag sums (or averages) of up to 6 weight rows, per-sample weighted: held tighter "
       "than torch's float32 atol (1e-5) because the values are O(1). Measured abs 3.0e-7 on |out| <= 8.",
       f32=(1e-6, 1e-6))
_entry("upsample_backward", "upsample (nearest, bilinear, bicubic) backward onto a much smaller input: each input "
       "gradient sums up to 400 output gradients (100x140 -> 5x7), with weights of both signs for bicubic; "
       "XLA and the CPU add them in different orders. Measured abs 1.4e-4 on |grad| <= 60, needs atol "
       "7.6e-5 = 1.3e-6 of max|grad| at torch's rtol; atol_scale 4e-6 (3x).",
       f32=(1.3e-6, 1e-5, 4e-6))
_entry("grid_sample_backward", "grid_sampler_2d/3d backward, the grid gradient: a sum over channels and the 4 (8) "
       "corners of input differences times weights, added in another order. Measured abs 1.1e-5 on "
       "|grad| <= 40, needs atol 6.1e-6 at torch's rtol; OpInfo's (1e-5, 1e-5).",
       f32=(1e-5, 1e-5))
_entry("batch_norm", "batch norm forward/backward: mean, variance and the backward's two reductions over "
       "N*H*W = 120 elements are summed in another order. float32 measured: needs atol 7.1e-6 at torch's "
       "rtol; (1e-5, 1e-5). bfloat16 (statistics in float32 on both sides): an output near zero carries "
       "the float32 mean's difference times rstd: measured needs atol 1.1e-4 at rtol 1.6e-2 (|out| <= 4); "
       "atol 1e-3.",
       f32=(1e-5, 1e-5), bf16=(1.6e-2, 1e-3))
_entry("accumulate_16bit", "index_put(accumulate)/index_add/index_reduce/segment_reduce with 16-bit values: the "
       "CPU folds duplicate indices one at a time in bfloat16 (rounding every partial sum or product), the "
       "lowering in float32 and rounds once. Measured: index_put needs atol 1.5e-3 (|out| <= 3), "
       "segment_reduce 1.1e-3 (|out| <= 7), index_reduce 2.7e-3 (|out| <= 400, products); atol 5e-3.",
       bf16=(1.6e-2, 5e-3))
_entry("pool_backward", "pooling backward (max, average, adaptive, adaptive max) in bfloat16: the CPU adds "
       "overlapping windows' gradients in bfloat16, rounding each partial sum; the lowering sums in float32. "
       "Measured: max_pool2d needs atol 6.1e-3 at |grad| <= 4.5, adaptive_max_pool2d 3.9e-3 at 4, "
       "avg/adaptive_avg <= 6.6e-4: atol_scale 2^-8 (one ulp of max|grad|: 1.8e-2 at 4.5).",
       bf16=(1.6e-2, 1e-5, 2 ** -8))

# ---- 16-bit kernels of PyTorch's CPU that round intermediate results

_entry("softmax", "bfloat16 log_softmax: PyTorch's CPU kernel is not correctly rounded (it rounds intermediates "
       "to bfloat16: -8.0 for the exact -8.0345, where the lowering's float32 result rounds to -8.0625), so "
       "results near 0 are off by up to the rounding of the log-sum. Measured needs atol 3.2e-3 at rtol "
       "1.6e-2; atol 2^-7 = 7.8e-3 (one ulp of the log-sum's binade [1, 2)).",
       bf16=(1.6e-2, 2 ** -7))
_entry("logit", "bfloat16 logit: the CPU rounds x / (1 - x) to bfloat16 before the log, the lowering computes "
       "log(x / (1 - x)) in float32 and rounds once; near x = 0.5 (logit ~ 0) that intermediate rounding is "
       "an absolute error. Measured needs atol 2.6e-3 at rtol 1.6e-2; atol 2^-7.",
       bf16=(1.6e-2, 2 ** -7))
_entry("add_alpha", "bfloat16 add/sub with alpha on a small tensor: the CPU's scalar loop (tensors shorter than "
       "a vector, and loop tails) rounds alpha * other to bfloat16 before adding; its vectorized loop, like the "
       "lowering, adds in float32 and rounds once (bit-exact: test_low_precision_scalar_operands_rounded_like_"
       "the_cpu). The difference is up to half an ulp of |alpha * other|, visible where the sum cancels: "
       "measured abs 3.9e-3 (|alpha * other| < 4), needs atol 2.9e-3 at rtol 1.6e-2; atol 2^-7 = 7.8e-3.",
       bf16=(1.6e-2, 2 ** -7))

# ---- values computed by a different but correct path

_entry("bf16_rounding", "a bfloat16 result against the exact (float64) value: one rounding to bfloat16 is off by "
       "at most 2^-9 relative, so rtol 2^-8 bounds it with a factor 2 (measured 3.4e-3 relative for "
       "matrix_exp computed in float32 and rounded once).",
       f64=(2 ** -8, 1e-5))
_entry("attention_bf16", "scaled_dot_product_attention backward with bfloat16 inputs against float64 autograd: "
       "the forward's out and logsumexp reach the backward rounded to bfloat16, and the gradients are "
       "rounded once more. Measured abs 6.9e-3 on |grad| <= 3, needs atol 6.9e-3 at rtol 1.6e-2: atol 2e-2.",
       bf16=(1.6e-2, 2e-2))
_entry("attention_bf16_kernel", "bfloat16 attention by the shim's own kernel (csrc/bf16_attention.cpp) against the "
       "CPU's flash kernel: both round the probabilities to bfloat16 before they multiply V and the output once, "
       "at different points (one true row max against a running one per 512 keys), so either may be an ulp "
       "of the largest output from the exact value. Measured abs 1.95e-3 at max|out| 0.32 (6.1e-3 of it): "
       "atol_scale 2^-6 (1.6e-2), rtol bfloat16's default.",
       bf16=(1.6e-2, 1e-5, 2 ** -6))
_entry("linalg", "float64 decompositions and solvers (LAPACK on both sides; solves and inverses on diagonally "
       "shifted inputs, randn + 3I or A A^T + nI): held tighter than torch's float64 default so that a float32 "
       "path would fail. float32 takes torch's defaults: measured needs atol 1.6e-6 at torch's rtol. "
       "Measured abs <= 1.6e-14 on |values| <= 20.",
       f64=(1e-10, 1e-10))
_entry("matrix_exp", "float64 (and complex128) matrix_exp: Taylor degrees up to 18 with scaling and squaring of "
       "matrices of norm up to 30 * ||randn(4, 4)||: values up to 3e34, measured relative 1.3e-14 (complex "
       "10 * crandn(3, 3): 1.2e-14 on values up to 2.4e11); the entry is relative. float32: torch's defaults "
       "(measured abs 1.9e-6 on |out| <= 21).",
       f64=(1e-10, 1e-12))

# ---- special functions: float32 arithmetic as ATen's, but XLA's exp/log/sin/cos differ from glibc's
# by an ulp for a few percent of inputs (amplified by cancellation near a function's zeros). These are
# held relatively (small atol) because their values span many decades.

_SPECIAL = ("same float32 algorithm as ATen's; XLA's exp/log are an ulp off glibc's for a few percent of "
            "inputs. Values span many decades, so the comparison is relative with a small atol. Measured: ")
_entry("special_erfcx", _SPECIAL + "abs 4.8e-7 at |out| ~ 1 (values up to 3e35), relative <= 1.6e-7.",
       f32=(2e-6, 1e-6))
_entry("special_i1", _SPECIAL + "relative 1.6e-7 (values up to 9e8).", f32=(2e-6, 1e-5))
_entry("cephes_unary", _SPECIAL + "airy_ai and Bessel J0/J1/Y0/Y1: abs <= 3e-8 on |out| <= 1 (cancellation near "
       "their zeros makes the relative error large there, so rtol 1e-5 with atol 1e-6, tighter than torch's atol).",
       f32=(1e-5, 1e-6))
_entry("cephes_modified_bessel", _SPECIAL + "relative <= 1.2e-7 on values 1e-20..1e16 (atol 0: tiny values count).",
       f32=(1e-6, 0.0))
_entry("chebyshev", "Chebyshev polynomials: the trigonometric forms (n past 4..8) differ by XLA's cos/acos "
       "rounding times n. Measured abs 6.2e-6 on values up to 4e7, needs atol 1.6e-6 at torch's rtol.",
       f32=(2e-6, 1e-5))
_entry("polynomials_large_n", "orthogonal polynomials at n up to 513 (slow test): the Chebyshev forms multiply an "
       "acos that differs from glibc's by an ulp by n (an error of n * 6e-8 * |dT/dtheta|); the recurrences "
       "(Hermite, Laguerre, Legendre) are ATen's operation for operation and bit-exact. Measured float32: abs "
       "1.4e-4 (needs atol 1.4e-4 at torch's rtol, rtol 1.7e-3 at its atol): (1e-4, 3e-4). float64: abs 3e-13.",
       f32=(1e-4, 3e-4), f64=(1e-10, 1e-10))
_entry("polygamma", _SPECIAL + "relative <= 1e-7 (digamma's reflection in float64, Hurwitz zeta accumulated in "
       "float64; values up to 1e20, so atol 1e-30).",
       f32=(1e-6, 1e-30), f64=(1e-14, 0.0))
_entry("zeta", _SPECIAL + "relative <= 1e-7 on values spanning 1e-30..1e20 (atol 0); float64 4.9e-16.",
       f32=(1e-6, 0.0), f64=(1e-14, 0.0))
_entry("igamma", "igamma/igammac: Cephes' series and continued fractions in float32 as ATen's; XLA's exp/log "
       "ulps. Measured abs 2.4e-7 on values <= 1 (needs atol 1.8e-8 at torch's rtol).",
       f32=(2e-6, 2e-6))
_entry("cephes_float64", "float64 Cephes functions (slow test): ATen's algorithm in float64, libm ulps. Measured "
       "relative 3.1e-16, abs 8.9e-16 on |out| <= 10.",
       f64=(1e-12, 1e-14))

# ---- for tests outside the lowering files (tests/test_autograd.py, tests/test_compile.py), measured
# with a one-off script: a Linear(32,64)-LayerNorm-GELU-Linear(64,10) MLP, MSE loss, 5 seeds, eager
# autograd; and test_compile.py's 3-step AdamW training of Linear(8,16)-Tanh-Linear(16,4), 4 seeds.

_entry("autograd_mlp", "parameter gradients of a small MLP (Linear, LayerNorm, GELU) on neuron vs the CPU: the "
       "matmuls' and LayerNorm's sums in another order. Measured float32: abs <= 3.0e-8 on gradients of "
       "magnitude <= 0.17 (5 seeds), so (1.3e-6, 1e-6) has a 30x margin. bfloat16 (bfloat16 weights and "
       "activations): abs <= 9.8e-4 = one bfloat16 ulp of the largest gradient (0.16); atol_scale 2^-6 "
       "(two ulps of max|grad|: 2.5e-3 at 0.16).",
       f32=(1.3e-6, 1e-6), bf16=(1.6e-2, 1e-5, 2 ** -6))
_entry("compiled_training", "parameters after 3 AdamW steps of Linear-Tanh-Linear compiled with "
       "torch.compile(backend='neuron') vs eager on the CPU: the gradients' summation order, amplified by "
       "Adam's m / sqrt(v). Measured abs <= 2.1e-7 on parameters of magnitude <= 0.5 (4 seeds): (1.3e-6, 1e-6).",
       f32=(1.3e-6, 1e-6))

_entry("pinv", "linalg.pinv of the hermitian 4x4 batch of tests/test_compile_ops.py (eigh, then 1/eigenvalue): "
       "cond = 155, so float32 rounding of the eigendecomposition is amplified to about cond * eps = 1.9e-5 "
       "of max|pinv|. Measured abs 1.3e-4 = 1.0e-5 of max|pinv| (13.4): atol_scale 2e-5 (2x).",
       f32=(1.3e-6, 1e-5, 2e-5))
_entry("attention_grad", "scaled_dot_product_attention's output and q/k/v gradients (float32, is_causal and a float "
       "mask; tests/test_autograd.py): two matmuls and a softmax per gradient, summed in another order. "
       "Measured abs <= 1.6e-6 on values of magnitude <= 12.6, some gradients near 0 (so rtol alone "
       "cannot carry them): OpInfo's attention bound (1e-5, 1e-5).",
       f32=(1e-5, 1e-5))

# complex results take their real dtype's entry
_REAL = {C64: F32, C128: F64}


def tol(name: str, dtype: torch.dtype, expected: torch.Tensor | None = None) -> dict:
    """rtol/atol for torch.testing.assert_close: the table's entry for `name` at `dtype` (complex dtypes
    use their real dtype's), else torch's defaults for the dtype (an empty dict). With `expected`, an
    entry's atol_scale widens atol to atol_scale * max|expected|."""
    table, _ = TOLERANCES[name]
    t = table.get(_REAL.get(dtype, dtype))
    if t is None:
        return {}
    rtol, atol = t[0], t[1]
    if len(t) > 2 and expected is not None and expected.numel():
        finite = expected[torch.isfinite(expected)] if expected.is_floating_point() or expected.is_complex() else expected
        if finite.numel():
            atol = max(atol, t[2] * finite.abs().max().item())
    return dict(rtol=rtol, atol=atol)


def needs_expected(name: str, dtype: torch.dtype) -> bool:
    """Whether `name`'s entry at `dtype` scales with the expected values (has an atol_scale)."""
    t = TOLERANCES[name][0].get(_REAL.get(dtype, dtype))
    return t is not None and len(t) > 2


# ---- OpInfo entries (tests/opinfo_support.py), keyed by op_db entry name: where the device legitimately
# differs from the CPU by more than torch's defaults (float32: rtol 1.3e-6, atol 1e-5; bfloat16: rtol 1.6e-2, atol 1e-5).
# name -> ({dtype or None: dict(rtol=, atol=)}, reason)
_MATMUL = "matmul-based: XLA's dot accumulates in a different order (and blocks differently) from the CPU's BLAS"
_TRANSCENDENTAL = "XLA's vectorized polynomial approximations of transcendental functions differ from libm by a few ulp"
_REDUCE = "reduction: XLA sums in a different (tree) order from the CPU"
OPINFO_TOLERANCES: dict[str, tuple[dict, str]] = {}


def _opinfo(names, f32=None, bf16=None, reason=""):
    """f32/bf16: (rtol, atol) or (rtol, atol, atol_scale). atol_scale: the absolute tolerance grows to
    atol_scale * max|expected| (for sums of many products rounded to a short mantissa: an element that
    cancels to near zero keeps an error of about one ulp of the partial sums, not of itself)."""
    for name in names.split():
        table = {}
        for dtype, t in ((torch.float32, f32), (torch.bfloat16, bf16)):
            if t is not None:
                table[dtype] = dict(rtol=t[0], atol=t[1], **({"atol_scale": t[2]} if len(t) > 2 else {}))
        OPINFO_TOLERANCES[name] = (table, reason)


_opinfo("matmul mm bmm addmm addmm.decomposed addmv addbmm baddbmm addr mv dot vdot inner outer tensordot einsum "
     "nn.functional.linear nn.functional.bilinear linalg.multi_dot linalg.vecdot __rmatmul__ kron "
     "bmm.triton_optimized cdist linalg.matrix_power",
     f32=(1e-5, 1e-5), bf16=(1.6e-2, 1e-2, 8e-3), reason=_MATMUL)
_opinfo("nn.functional.conv1d nn.functional.conv2d nn.functional.conv3d nn.functional.conv_transpose1d "
     "nn.functional.conv_transpose2d nn.functional.conv_transpose3d",
     f32=(1e-5, 1e-5), bf16=(1.6e-2, 1e-2, 8e-3), reason="convolution: accumulation order differs from oneDNN's")
_opinfo("nn.functional.scaled_dot_product_attention nn.functional.multi_head_attention_forward",
     f32=(1e-5, 1e-5), bf16=(1.6e-2, 1e-2, 8e-3), reason=_MATMUL)
_opinfo("sum nansum mean nanmean cumsum cumprod logcumsumexp logsumexp prod var var.unbiased std std.unbiased var_mean "
     "var_mean.unbiased std_mean std_mean.unbiased masked.sum masked.mean masked.var masked.std masked.logsumexp "
     "masked.cumsum masked.cumprod masked.prod norm norm.fro linalg.vector_norm linalg.norm linalg.matrix_norm "
     "nn.functional.normalize nn.functional.cosine_similarity nn.functional.pairwise_distance nn.functional.pdist "
     "dist trace trapz trapezoid cumulative_trapezoid sum_to_size nn.functional.mse_loss nn.functional.l1_loss "
     "nn.functional.huber_loss nn.functional.smooth_l1_loss nn.functional.kl_div nn.functional.cross_entropy "
     "nn.functional.nll_loss nn.functional.binary_cross_entropy nn.functional.binary_cross_entropy_with_logits "
     "nn.functional.poisson_nll_loss nn.functional.gaussian_nll_loss nn.functional.soft_margin_loss "
     "nn.functional.margin_ranking_loss nn.functional.hinge_embedding_loss nn.functional.cosine_embedding_loss "
     "nn.functional.multilabel_soft_margin_loss nn.functional.triplet_margin_loss "
     "nn.functional.triplet_margin_with_distance_loss nn.functional.multi_margin_loss",
     f32=(1e-5, 1e-5), bf16=(1.6e-2, 1e-2), reason=_REDUCE)
_opinfo("nn.functional.layer_norm native_layer_norm nn.functional.rms_norm nn.functional.group_norm native_group_norm "
     "nn.functional.batch_norm nn.functional.batch_norm.without_cudnn native_batch_norm _native_batch_norm_legit "
     "_batch_norm_with_update nn.functional.instance_norm nn.functional.local_response_norm softmax "
     "softmax.with_dtype log_softmax log_softmax.with_dtype nn.functional.softmin nn.functional.softmin.with_dtype "
     "masked.softmax masked.log_softmax masked.softmin masked.normalize _softmax_backward_data "
     "torch.ops.aten._safe_softmax.default",
     f32=(1e-5, 1e-5), bf16=(1.6e-2, 1e-2), reason=_REDUCE + "; normalization statistics")
_opinfo("exp exp2 expm1 log log10 log1p log2 sin cos tan sinh cosh tanh asin acos atan atan2 asinh acosh atanh "
     "sigmoid logit erf erfc erfinv rsqrt sqrt pow __rpow__ float_power nn.functional.gelu nn.functional.silu "
     "nn.functional.mish nn.functional.softplus nn.functional.elu nn.functional.celu nn.functional.selu "
     "nn.functional.logsigmoid nn.functional.tanhshrink nn.functional.glu nn.functional.hardswish "
     "nn.functional.hardsigmoid logaddexp logaddexp2 xlogy special.xlog1py special.entr sinc lgamma digamma "
     "polygamma.polygamma_n_0 polygamma.polygamma_n_1 polygamma.polygamma_n_2 polygamma.polygamma_n_3 "
     "polygamma.polygamma_n_4 special.polygamma.special_polygamma_n_0 mvlgamma.mvlgamma_p_1 mvlgamma.mvlgamma_p_3 mvlgamma.mvlgamma_p_5 "
     "special.ndtr special.log_ndtr special.ndtri special.erfcx special.i0e special.i1 special.i1e i0 "
     "reciprocal div.no_rounding_mode true_divide __rdiv__ hypot lerp addcdiv angle polar sgn "
     "nn.functional.interpolate.bilinear nn.functional.interpolate.bicubic nn.functional.interpolate.trilinear "
     "nn.functional.interpolate.linear nn.functional.interpolate.area nn.functional.upsample_bilinear "
     "nn.functional.grid_sample grid_sampler_2d grid_sampler_3d _upsample_bilinear2d_aa "
     "nn.functional.avg_pool1d nn.functional.avg_pool2d nn.functional.avg_pool3d "
     "nn.functional.adaptive_avg_pool1d nn.functional.adaptive_avg_pool2d nn.functional.adaptive_avg_pool3d "
     "linspace logspace linspace.tensor_overload logspace.tensor_overload signal.windows.gaussian "
     "signal.windows.exponential signal.windows.kaiser signal.windows.hann signal.windows.hamming "
     "signal.windows.blackman signal.windows.nuttall signal.windows.general_cosine signal.windows.general_hamming "
     "signal.windows.cosine signal.windows.bartlett",
     f32=(1e-5, 1e-5), bf16=(1.6e-2, 1e-2), reason=_TRANSCENDENTAL)

_opinfo("fft.fft fft.fft2 fft.fftn fft.hfft fft.hfft2 fft.hfftn fft.ifft fft.ifft2 fft.ifftn fft.ihfft fft.ihfft2 "
     "fft.ihfftn fft.irfft fft.irfft2 fft.irfftn fft.rfft fft.rfft2 fft.rfftn stft istft",
     f32=(1e-5, 2e-5), bf16=(1.6e-2, 1e-2, 8e-3),
     reason="FFT: XLA's FFT library and PocketFFT/MKL combine the terms in different orders")
_opinfo("matrix_exp", f32=(1e-5, 1e-5, 2e-6),
     reason="matrix_exp: squarings of a degree-18 Taylor polynomial; " + _MATMUL + " (errors of about one ulp "
            "of the largest element, both sides)")


def opinfo_tolerance(name: str, dtype: torch.dtype) -> dict:
    """rtol/atol for assert_close: the table's entry, else torch's defaults for the dtype (empty dict).
    Integer and bool samples use the float32 entry: where a tolerance matters their results are
    float32 (exp of an int64 tensor), and integer results are exact under any atol below 1."""
    table, _ = OPINFO_TOLERANCES.get(name, ({}, ""))
    if not (dtype.is_floating_point or dtype.is_complex):
        dtype = torch.float32
    return dict(table.get(dtype, {}))
