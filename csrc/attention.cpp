// scaled_dot_product_attention picks its kernel through a dispatch stub, not through an op, so
// only C++ can route it: neuron tensors go to the fused overrideable op (one lowering, one
// executable for the whole attention) unless dropout is asked for, which that lowering does not
// draw; the math path (matmul/softmax/dropout ops) handles that case.
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>

namespace torch_neuronx {
namespace {

int64_t neuron_fused_sdp_choice(
    const at::Tensor& /*query*/,
    const at::Tensor& /*key*/,
    const at::Tensor& /*value*/,
    const std::optional<at::Tensor>& /*attn_mask*/,
    double dropout_p,
    bool /*is_causal*/,
    std::optional<double> /*scale*/,
    bool /*enable_gqa*/) {
  auto choice = dropout_p > 0.0 ? sdp::SDPBackend::math : sdp::SDPBackend::overrideable;
  return static_cast<int64_t>(choice);
}

}  // namespace
}  // namespace torch_neuronx

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_neuronx::neuron_fused_sdp_choice)
}  // namespace at::native
