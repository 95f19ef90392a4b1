// Native CPU kernels that XLA executables call: XLA FFI custom calls into the kernels torch itself runs on
// the CPU, for the products where XLA's CPU code is far from the CPU's own speed (bfloat16 and float16
// matrix products, attention and convolutions: XLA converts each operand to a float32 copy first; torch
// runs oneDNN's bf16/fp16 kernels, AMX or AVX-512 BF16 where the CPU has them). runtime/native_kernels.py registers the
// handlers with jax for the CPU platform; ops/native.py emits the calls.
//
// Each handler gets XLA's buffers (row-major, as the custom call declares them) and, per operand, the
// permutation that turns the buffer into the tensor the lowering meant (a transposed weight arrives as the
// weight and (1, 0)), wraps them as CPU tensors without copying, and calls the ATen op the lowering stands
// for, writing into XLA's result buffer. So a product on neuron runs torch's CPU kernel on the same strided
// operands torch's CPU eager gives it: the same numbers, bit for bit.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "neuron.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
namespace py = pybind11;

namespace torch_neuronx {
namespace {

at::ScalarType scalar_type(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::BF16:
      return at::kBFloat16;
    case ffi::DataType::F16:
      return at::kHalf;
    case ffi::DataType::F32:
      return at::kFloat;
    case ffi::DataType::F64:
      return at::kDouble;
    case ffi::DataType::PRED:
      return at::kBool;
    case ffi::DataType::S32:
      return at::kInt;
    case ffi::DataType::S64:
      return at::kLong;
    default:
      TORCH_CHECK(false, "neuron native kernel: unsupported buffer dtype ", static_cast<int>(t));
  }
}

// The buffer as a CPU tensor over XLA's memory (no copy), permuted as the lowering meant it.
at::Tensor tensor(const ffi::AnyBuffer& buf, ffi::Span<const int64_t> perm = {}) {
  auto dims = buf.dimensions();
  std::vector<int64_t> sizes(dims.begin(), dims.end());
  at::Tensor t = at::from_blob(
      buf.untyped_data(), sizes, at::TensorOptions().dtype(scalar_type(buf.element_type())));
  if (perm.size() != 0) {
    TORCH_CHECK(static_cast<int64_t>(perm.size()) == t.dim(), "neuron native kernel: bad permutation");
    t = t.permute(c10::IntArrayRef(perm.begin(), perm.size()));
  }
  return t;
}

// A 0-d buffer's value (the lowering's traced alpha/beta).
at::Scalar scalar(const ffi::AnyBuffer& buf) {
  return tensor(buf).item();
}

// One native kernel at a time: each already runs on every core (torch's OpenMP threads), and XLA may
// run independent custom calls on two of its threads at once.
std::mutex g_kernel_lock;

// Calls and seconds per kernel (metrics.native_kernel_stats): what proves a product took torch's kernel,
// and how much of a program's time it was.
enum Kernel { kMatmul, kAddMatmul, kAttention, kAttentionBackward, kConvolution, kKernels };
constexpr const char* kKernelNames[kKernels] = {"matmul", "addmatmul", "attention", "attention_backward",
                                               "convolution"};
std::atomic<uint64_t> g_calls[kKernels];
std::atomic<uint64_t> g_nanoseconds[kKernels];

template <typename F>
ffi::Error run(Kernel kernel, const char* what, F&& body) {
  g_calls[kernel].fetch_add(1, std::memory_order_relaxed);
  try {
    std::lock_guard<std::mutex> lock(g_kernel_lock);
    const auto start = std::chrono::steady_clock::now();
    {
      c10::InferenceMode inference;
      body();
    }
    const auto took = std::chrono::steady_clock::now() - start;
    g_nanoseconds[kernel].fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(took).count(), std::memory_order_relaxed);
    return ffi::Error::Success();
  } catch (const std::exception& e) {
    return ffi::Error(ffi::ErrorCode::kInternal, std::string(what) + ": " + e.what());
  }
}

// mm (2-d) or bmm (3-d): out = a @ b.
ffi::Error matmul(
    ffi::AnyBuffer a,
    ffi::AnyBuffer b,
    ffi::Result<ffi::AnyBuffer> out,
    ffi::Span<const int64_t> a_perm,
    ffi::Span<const int64_t> b_perm) {
  return run(kMatmul, "neuron native matmul", [&] {
    at::Tensor x = tensor(a, a_perm), y = tensor(b, b_perm), o = tensor(*out);
    if (x.dim() == 2) {
      at::mm_out(o, x, y);
    } else {
      at::bmm_out(o, x, y);
    }
  });
}

// addmm (2-d) or baddbmm (3-d): out = beta * self + alpha * (a @ b), self broadcast as ATen does.
ffi::Error addmatmul(
    ffi::AnyBuffer self,
    ffi::AnyBuffer a,
    ffi::AnyBuffer b,
    ffi::AnyBuffer beta,
    ffi::AnyBuffer alpha,
    ffi::Result<ffi::AnyBuffer> out,
    ffi::Span<const int64_t> a_perm,
    ffi::Span<const int64_t> b_perm) {
  return run(kAddMatmul, "neuron native addmm", [&] {
    at::Tensor s = tensor(self), x = tensor(a, a_perm), y = tensor(b, b_perm), o = tensor(*out);
    if (x.dim() == 2) {
      at::addmm_out(o, s, x, y, scalar(beta), scalar(alpha));
    } else {
      at::baddbmm_out(o, s, x, y, scalar(beta), scalar(alpha));
    }
  });
}

// The attention kernels' optional mask (an empty placeholder buffer when there is none) and scale.
std::optional<at::Tensor> attention_mask(const ffi::AnyBuffer& mask, bool has_mask) {
  return has_mask ? std::optional<at::Tensor>(tensor(mask)) : std::nullopt;
}

std::optional<double> attention_scale(bool has_scale, double scale) {
  return has_scale ? std::optional<double>(scale) : std::nullopt;
}

// Attention on 4-d (B, H, L, E) q, k, v, with an additive float32 mask broadcastable to (B, H, L, S) where
// `has_mask` (otherwise the mask buffer is an empty placeholder): bf16_attention.cpp's kernel where it applies
// (bf16 on a CPU with AVX-512 BF16, not causal), torch's CPU flash attention otherwise. `out` is laid out
// (B, L, H, Ev) (the kernel's own output layout; the caller transposes it back for free), `lse` (B, H, L) in
// float32.
ffi::Error attention(
    ffi::AnyBuffer q,
    ffi::AnyBuffer k,
    ffi::AnyBuffer v,
    ffi::AnyBuffer mask,
    ffi::Result<ffi::AnyBuffer> out,
    ffi::Result<ffi::AnyBuffer> lse,
    ffi::Span<const int64_t> q_perm,
    ffi::Span<const int64_t> k_perm,
    ffi::Span<const int64_t> v_perm,
    bool is_causal,
    bool has_scale,
    double scale,
    bool has_mask) {
  return run(kAttention, "neuron native attention", [&] {
    at::Tensor tq = tensor(q, q_perm), tk = tensor(k, k_perm), tv = tensor(v, v_perm);
    const std::optional<at::Tensor> bias = attention_mask(mask, has_mask);
    if (bf16_attention_applies(tq, tk, tv, is_causal)) {
      bf16_attention(tq, tk, tv, bias, has_scale ? scale : 1.0 / std::sqrt(static_cast<double>(tq.size(3))),
                     tensor(*out), tensor(*lse));
      return;
    }
    auto [o, l] = at::_scaled_dot_product_flash_attention_for_cpu(
        tq, tk, tv, 0.0, is_causal, bias, attention_scale(has_scale, scale));
    tensor(*out).copy_(o.transpose(1, 2));
    tensor(*lse).copy_(l);
  });
}

// The gradients of attention (`attention`'s inputs, its output `out` (B, H, L, Ev) and float32 logsumexp `lse`
// (B, H, L), the output's gradient `grad_out`) by torch's CPU flash attention backward, which the CPU runs for
// the same attention. `grad_q`, `grad_k`, `grad_v` are laid out (B, L, H, E) like `attention`'s output (the
// caller transposes them back for free): torch's kernel makes its gradients with its inputs' strides, and
// inputs that are head-transposed (B, L, H, E) tensors, as a model's usually are, then copy straight across.
ffi::Error attention_backward(
    ffi::AnyBuffer grad_out,
    ffi::AnyBuffer q,
    ffi::AnyBuffer k,
    ffi::AnyBuffer v,
    ffi::AnyBuffer out,
    ffi::AnyBuffer lse,
    ffi::AnyBuffer mask,
    ffi::Result<ffi::AnyBuffer> grad_q,
    ffi::Result<ffi::AnyBuffer> grad_k,
    ffi::Result<ffi::AnyBuffer> grad_v,
    ffi::Span<const int64_t> grad_out_perm,
    ffi::Span<const int64_t> q_perm,
    ffi::Span<const int64_t> k_perm,
    ffi::Span<const int64_t> v_perm,
    ffi::Span<const int64_t> out_perm,
    bool is_causal,
    bool has_scale,
    double scale,
    bool has_mask) {
  return run(kAttentionBackward, "neuron native attention backward", [&] {
    auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        tensor(grad_out, grad_out_perm), tensor(q, q_perm), tensor(k, k_perm), tensor(v, v_perm),
        tensor(out, out_perm), tensor(lse), 0.0, is_causal, attention_mask(mask, has_mask),
        attention_scale(has_scale, scale));
    tensor(*grad_q).copy_(dq.transpose(1, 2));
    tensor(*grad_k).copy_(dk.transpose(1, 2));
    tensor(*grad_v).copy_(dv.transpose(1, 2));
  });
}

// out[n][j][i] = in[n][i][j] for (N, R, S) arrays of 2-byte elements, in 32 x 32 blocks that stay in L1.
// (torch's copy of a channels-last bf16 tensor into a contiguous one runs about 9x slower.)
void transpose_16bit(const uint16_t* in, uint16_t* out, int64_t N, int64_t R, int64_t S) {
  constexpr int64_t kBlock = 32;
  const int64_t blocks = (S + kBlock - 1) / kBlock;
  at::parallel_for(0, N * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; task++) {
      const int64_t n = task / blocks, j0 = (task % blocks) * kBlock, j1 = std::min(j0 + kBlock, S);
      const uint16_t* src = in + n * R * S;
      uint16_t* dst = out + n * R * S;
      for (int64_t i0 = 0; i0 < R; i0 += kBlock) {
        const int64_t i1 = std::min(i0 + kBlock, R);
        for (int64_t j = j0; j < j1; j++) {
          for (int64_t i = i0; i < i1; i++) {
            dst[j * R + i] = src[i * S + j];
          }
        }
      }
    }
  });
}

// On a CPU with AMX a 16-bit 2-d convolution runs channels-last: oneDNN's AMX convolutions compute in that
// layout, and handed an NCHW input torch reorders around them at several times the product's cost (a
// 3x3, 128-channel layer at 1024x1024 in bf16: 1.40 s, of which the product is 0.23 s, on a 2-core Xeon).
// The handler transposes the input to channels-last and the channels-last result back into `out`
// (transpose_16bit: 0.11 s each there; torch's own copies take 0.12-0.26 s and 0.93 s). Without AMX
// (AVX-512 BF16 on a Zen 4: 300-400 GFLOP/s from NCHW, benchmarks/conv_kernels.py) the call stays NCHW:
// the layout was not measured to pay there.
bool convolves_channels_last(const at::Tensor& x) {
  static const bool amx = __builtin_cpu_supports("amx-bf16");
  return amx && x.dim() == 4 && x.element_size() == 2;
}

// convolution (any spatial rank, transposed or not, groups), bias optional (`has_bias`; otherwise the
// bias buffer is an empty placeholder), channels-last where convolves_channels_last says. The result is
// written row-major into `out` whatever memory format torch's kernel chose for it.
ffi::Error convolution(
    ffi::AnyBuffer input,
    ffi::AnyBuffer weight,
    ffi::AnyBuffer bias,
    ffi::Result<ffi::AnyBuffer> out,
    ffi::Span<const int64_t> input_perm,
    ffi::Span<const int64_t> stride,
    ffi::Span<const int64_t> padding,
    ffi::Span<const int64_t> dilation,
    bool transposed,
    ffi::Span<const int64_t> output_padding,
    int64_t groups,
    bool has_bias) {
  return run(kConvolution, "neuron native convolution", [&] {
    auto ref = [](ffi::Span<const int64_t> s) { return c10::IntArrayRef(s.begin(), s.size()); };
    std::optional<at::Tensor> b;
    if (has_bias) {
      b = tensor(bias);
    }
    at::Tensor x = tensor(input, input_perm), o = tensor(*out);
    const bool channels_last = convolves_channels_last(x);
    if (channels_last && x.is_contiguous() && x.size(1) > 1) {
      at::Tensor cl = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::ChannelsLast));
      transpose_16bit(reinterpret_cast<const uint16_t*>(x.data_ptr()), reinterpret_cast<uint16_t*>(cl.data_ptr()),
                      x.size(0), x.size(1), x.size(2) * x.size(3));
      x = cl;
    } else if (channels_last) {
      x = x.contiguous(at::MemoryFormat::ChannelsLast);
    }
    at::Tensor y = at::convolution(
        x, tensor(weight), b, ref(stride), ref(padding), ref(dilation), transposed, ref(output_padding), groups);
    if (channels_last && y.is_contiguous(at::MemoryFormat::ChannelsLast) && y.size(1) > 1) {
      // y is (N, H, W, C) in memory: out (N, C, H * W) is its transpose
      transpose_16bit(reinterpret_cast<const uint16_t*>(y.data_ptr()), reinterpret_cast<uint16_t*>(o.data_ptr()),
                      y.size(0), y.size(2) * y.size(3), y.size(1));
    } else {
      o.copy_(y);
    }
  });
}

}  // namespace

// A binding of `Args` buffer operands then `Rets` buffer results (every kernel here takes AnyBuffers), to which
// each handler adds its attributes; in the handler macros it goes in parentheses, for its comma. (A binding
// cannot be returned as it is, only made by a call: the last result ends the recursion.)
template <int Args, int Rets, typename Binding>
auto with_buffers(Binding binding) {
  static_assert(Rets >= 1, "every kernel has a result");
  if constexpr (Args > 0) {
    return with_buffers<Args - 1, Rets>(std::move(binding).template Arg<ffi::AnyBuffer>());
  } else if constexpr (Rets > 1) {
    return with_buffers<0, Rets - 1>(std::move(binding).template Ret<ffi::AnyBuffer>());
  } else {
    return std::move(binding).template Ret<ffi::AnyBuffer>();
  }
}

template <int Args, int Rets>
auto buffers() {
  return with_buffers<Args, Rets>(ffi::Ffi::Bind());
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    torch_neuronx_ffi_matmul,
    matmul,
    (buffers<2, 1>())
        .Attr<ffi::Span<const int64_t>>("a_perm")
        .Attr<ffi::Span<const int64_t>>("b_perm"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    torch_neuronx_ffi_addmatmul,
    addmatmul,
    (buffers<5, 1>())
        .Attr<ffi::Span<const int64_t>>("a_perm")
        .Attr<ffi::Span<const int64_t>>("b_perm"));

// The attributes both attention kernels take after their operands' permutations.
template <typename Binding>
auto with_attention_options(Binding binding) {
  return std::move(binding).template Attr<bool>("is_causal")
      .template Attr<bool>("has_scale")
      .template Attr<double>("scale")
      .template Attr<bool>("has_mask");
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    torch_neuronx_ffi_attention,
    attention,
    with_attention_options((buffers<4, 2>())
        .Attr<ffi::Span<const int64_t>>("q_perm")
        .Attr<ffi::Span<const int64_t>>("k_perm")
        .Attr<ffi::Span<const int64_t>>("v_perm")));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    torch_neuronx_ffi_attention_backward,
    attention_backward,
    with_attention_options((buffers<7, 3>())
        .Attr<ffi::Span<const int64_t>>("grad_out_perm")
        .Attr<ffi::Span<const int64_t>>("q_perm")
        .Attr<ffi::Span<const int64_t>>("k_perm")
        .Attr<ffi::Span<const int64_t>>("v_perm")
        .Attr<ffi::Span<const int64_t>>("out_perm")));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    torch_neuronx_ffi_convolution,
    convolution,
    (buffers<3, 1>())
        .Attr<ffi::Span<const int64_t>>("input_perm")
        .Attr<ffi::Span<const int64_t>>("stride")
        .Attr<ffi::Span<const int64_t>>("padding")
        .Attr<ffi::Span<const int64_t>>("dilation")
        .Attr<bool>("transposed")
        .Attr<ffi::Span<const int64_t>>("output_padding")
        .Attr<int64_t>("groups")
        .Attr<bool>("has_bias"));

// name -> PyCapsule of the handler, what jax.ffi.register_ffi_target takes.
py::dict native_kernel_handlers() {
  py::dict out;
  auto add = [&](const char* name, XLA_FFI_Handler* fn) {
    out[name] = py::capsule(reinterpret_cast<void*>(fn));
  };
  add("torch_neuronx_matmul", torch_neuronx_ffi_matmul);
  add("torch_neuronx_addmatmul", torch_neuronx_ffi_addmatmul);
  add("torch_neuronx_attention", torch_neuronx_ffi_attention);
  add("torch_neuronx_attention_backward", torch_neuronx_ffi_attention_backward);
  add("torch_neuronx_convolution", torch_neuronx_ffi_convolution);
  return out;
}

// kernel -> (calls, seconds inside the kernel) so far in this process.
py::dict native_kernel_stats() {
  py::dict out;
  for (int k = 0; k < kKernels; ++k) {
    out[kKernelNames[k]] = py::make_tuple(
        g_calls[k].load(std::memory_order_relaxed), g_nanoseconds[k].load(std::memory_order_relaxed) * 1e-9);
  }
  return out;
}

}  // namespace torch_neuronx
