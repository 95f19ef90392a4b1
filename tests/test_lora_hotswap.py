"""diffusers' LoRA hot-swap on a FLUX.2 transformer compiled for neuron, as diffusers' own test does it
(`LoraHotSwappingForModelTesterMixin._check_model_hotswap`): `enable_lora_hotswap(target_rank=...)`,
the first adapter loaded from its folder, `torch.compile(model, mode="reduce-overhead", dynamic=False)`
with no backend named (the default backend sends the neuron graph to `neuron`), then
`load_lora_adapter(..., hotswap=True)` of adapters of other ranks and alphas under
`error_on_recompile`. peft pads every adapter to the target rank and keeps each scaling as a 0-d
tensor on the device, so a swap only writes parameter and buffer values: the graph and its executable
stay. Each swap's output is compared with a CPU model that loaded the same adapter from its folder.

diffusers' FLUX.2 hot-swap class sets `different_shapes_for_compilation`, which makes every one of its
compiled tests call `dynamic=True`: a real request for dynamic shapes, refused with its fix (last test)."""
import os

import pytest
import torch

import torch_neuronx
import torch_neuronx.compile
from test_models import _to, flux2_inputs

TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]
# (rank, alpha) of each adapter: ranks below and at the target rank, scalings 2, 0.5, 1 and 2
ADAPTERS = [(4, 8), (8, 4), (2, 2), (6, 12)]
TARGET_RANK = 8


@pytest.fixture(autouse=True)
def fresh_dynamo(memory_only_cache):
    torch._dynamo.reset()
    torch_neuronx.compile.clear_cache()  # each test counts its own compiles
    torch.neuron.reset_dynamo_metrics()
    yield
    torch.compiler.reset()  # diffusers' teardown: the compiled model's frames go


def flux2_small():
    from diffusers import Flux2Transformer2DModel

    torch.manual_seed(0)
    return Flux2Transformer2DModel(
        patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=32,
        num_attention_heads=4, joint_attention_dim=64, timestep_guidance_channels=64, axes_dims_rope=(8, 8, 8, 8),
    ).eval()


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    """Each adapter saved to a folder of its own (random non-zero LoRA B: every adapter changes the
    output, each differently), and the CPU's output of a model that loaded it from there."""
    from peft import LoraConfig

    folder = tmp_path_factory.mktemp("lora")
    inputs = flux2_inputs(torch.float32)
    model = flux2_small()
    torch.manual_seed(1)
    paths = []
    for i, (rank, alpha) in enumerate(ADAPTERS):
        config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=TARGETS, init_lora_weights=False)
        model.add_adapter(config, adapter_name=f"a{i}")
        with torch.no_grad():  # peft's random B is small: a larger one tells the adapters further apart
            for name, p in model.named_parameters():
                if f"lora_B.a{i}." in name:
                    p.normal_(0, 1.0)
        path = os.path.join(folder, f"a{i}")
        model.save_lora_adapter(path, adapter_name=f"a{i}")
        paths.append(path)
    expected = []
    with torch.no_grad():
        base = flux2_small()(**inputs)[0]
        for path in paths:
            cpu = flux2_small()
            cpu.load_lora_adapter(path, adapter_name="reference", use_safetensors=True, prefix=None)
            expected.append(cpu(**inputs)[0])
    for i, out in enumerate(expected):  # every adapter changes the output, and each differently
        assert (out - base).abs().max() > 1e-2
        assert all((out - other).abs().max() > 1e-2 for other in expected[:i])
    return paths, expected


def compiled_with_first_adapter(paths, dynamic=False):
    model = flux2_small().to("neuron")
    model.enable_lora_hotswap(target_rank=TARGET_RANK)
    model.load_lora_adapter(paths[0], adapter_name="adapter0", use_safetensors=True, prefix=None)
    return torch.compile(model, mode="reduce-overhead", dynamic=dynamic)


def run(model):
    with torch.inference_mode():
        return model(**_to(flux2_inputs(torch.float32), "neuron"))[0].cpu()


def assert_matches(got, want):
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dynamic", [False, None], ids=["dynamic_false", "dynamic_default"])
def test_a_hot_swapped_adapter_matches_the_cpu_without_a_recompile(adapters, dynamic):
    paths, expected = adapters
    model = compiled_with_first_adapter(paths, dynamic)
    with torch._dynamo.config.patch(error_on_recompile=True):
        assert_matches(run(model), expected[0])
        model.load_lora_adapter(paths[1], adapter_name="adapter0", hotswap=True, use_safetensors=True, prefix=None)
        assert_matches(run(model), expected[1])
    assert torch.neuron.get_dynamo_metrics()["graphs_compiled"] == 1
    with pytest.raises(ValueError, match="no existing adapter by that name"):  # diffusers' own check
        model.load_lora_adapter(paths[1], adapter_name="does-not-exist", hotswap=True, use_safetensors=True,
                                prefix=None)


def test_three_hot_swaps_compile_no_new_graph(adapters):
    from torch._dynamo.utils import counters

    paths, expected = adapters
    model = compiled_with_first_adapter(paths)
    assert_matches(run(model), expected[0])
    frames = counters["stats"]["unique_graphs"]
    assert torch.neuron.get_dynamo_metrics()["graphs_compiled"] == 1
    with torch._dynamo.config.patch(error_on_recompile=True):
        for path, want in zip(paths[1:], expected[1:]):  # ranks 8, 2 and 6 into rank-8 padding
            model.load_lora_adapter(path, adapter_name="adapter0", hotswap=True, use_safetensors=True, prefix=None)
            assert_matches(run(model), want)
    metrics = torch.neuron.get_dynamo_metrics()
    assert metrics["graphs_compiled"] == 1 and metrics["recompiles"] == []
    assert counters["stats"]["unique_graphs"] == frames  # Dynamo traced nothing again
    assert sum(metrics["executions"].values()) == 4


def test_dynamic_true_and_mark_dynamic_are_still_refused(adapters):
    paths, _ = adapters
    # diffusers' FLUX.2 class compiles with dynamic=True (it lists different shapes): refused with the fix
    model = compiled_with_first_adapter(paths, dynamic=True)
    with pytest.raises(Exception, match=r"static shapes only, and torch.compile\(\.\.\., dynamic=True\) was "
                                        r"requested.*dynamic=False"):
        run(model)
    torch.compiler.reset()
    model = compiled_with_first_adapter(paths, dynamic=False)
    inputs = _to(flux2_inputs(torch.float32), "neuron")
    torch._dynamo.mark_dynamic(inputs["hidden_states"], 1)
    with pytest.raises(Exception, match=r"static shapes only, and dimensions were marked dynamic \(\w*hidden_states"
                                        r"\w* dims \[1\]\)"):
        with torch.inference_mode():
            model(**inputs)
    assert torch.neuron.get_dynamo_metrics()["graphs_compiled"] == 0


def test_a_callers_dynamic_true_is_named_when_it_reaches_a_static_module():
    """A module compiled with dynamic=False but called by a function compiled with dynamic=True is
    traced inside the caller's frames, with the caller's settings: the refusal names the caller."""
    torch.manual_seed(0)
    inner = torch.compile(torch.nn.Linear(4, 4).to("neuron"), dynamic=False)

    def outer(x):
        return inner(x * 2)

    with pytest.raises(Exception, match=r"dynamic=True\) was requested \(by this compiled function, or by a "
                                        r"compiled function that calls it"):
        torch.compile(outer, dynamic=True)(torch.randn(3, 4, device="neuron"))
