// scaled_dot_product_attention picks its kernel through a dispatch stub, not through an op, so
// only C++ can route it: neuron tensors go to the fused overrideable op (one lowering, one
// executable for the whole attention) unless dropout is asked for, which that lowering does not
// draw, or the inputs only broadcast together; the math path (matmul/softmax/dropout ops) handles
// those cases.
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>

namespace torch_neuronx {
namespace {

// The fused lowering takes 3-d or 4-d q/k/v of one rank and batch (grouped heads allowed);
// inputs that only broadcast against each other take the math path, which broadcasts.
bool fused_shapes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const auto n = q.dim();
  if ((n != 3 && n != 4) || k.dim() != n || v.dim() != n) {
    return false;
  }
  if (k.size(0) != q.size(0) || v.size(0) != q.size(0) || k.size(-2) != v.size(-2)) {
    return false;
  }
  if (n == 4 && (k.size(1) != v.size(1) || k.size(1) == 0 || q.size(1) % k.size(1) != 0)) {
    return false;
  }
  return true;
}

int64_t neuron_fused_sdp_choice(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& /*attn_mask*/,
    double dropout_p,
    bool /*is_causal*/,
    std::optional<double> /*scale*/,
    bool /*enable_gqa*/) {
  const bool fused = dropout_p <= 0.0 && fused_shapes(query, key, value);
  auto choice = fused ? sdp::SDPBackend::overrideable : sdp::SDPBackend::math;
  return static_cast<int64_t>(choice);
}

}  // namespace
}  // namespace torch_neuronx

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_neuronx::neuron_fused_sdp_choice)
}  // namespace at::native
