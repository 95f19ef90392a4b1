"""torch.compile(backend="neuron"): whole graphs compiled with static shapes, against eager on the CPU."""
import copy
import warnings

import numpy as np
import pytest
import torch

import torch_neuronx
import torch_neuronx.compile
from torch_neuronx import neuron_dynamo_backend as ndb
from tolerances import tol
from test_models import _to, flux2_inputs, flux2_transformer, qwen3, qwen3_inputs, rel_err


@pytest.fixture(autouse=True)
def fresh_dynamo(memory_only_cache):
    torch._dynamo.reset()
    torch_neuronx.compile.clear_cache()  # each test counts its own compiles
    torch.neuron.reset_dynamo_metrics()
    torch_neuronx.clear_op_tracking()
    yield
    torch._dynamo.reset()
    ndb.set_model_name(None)


def compiled():
    return torch.neuron.get_dynamo_metrics()["graphs_compiled"]


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)
    )


def test_backend_is_registered_by_entry_point():
    assert "neuron" in torch._dynamo.list_backends()


def test_mlp_matches_cpu_and_reuses_the_executable():
    m = mlp()
    x = torch.randn(3, 8)
    with torch.no_grad():
        want = m(x)
        c = torch.compile(copy.deepcopy(m).to("neuron"), backend="neuron", fullgraph=True, dynamic=False)
        got = c(x.to("neuron"))
        assert compiled() == 1
        again = c(x.to("neuron"))
    assert got.device.type == "neuron"
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(again.cpu(), want, rtol=1e-5, atol=1e-6)
    m = torch.neuron.get_dynamo_metrics()
    assert m["graphs_compiled"] == 1 and list(m["executions"].values()) == [2]
    (g,) = m["graphs"]
    assert g["kind"] == "inference" and g["nodes"] > 4 and g["compile_s"] > 0 and g["fallback_ops"] == []
    # eager ran nothing: the whole forward was one executable
    assert not any(op.startswith("aten.addmm") for op in torch_neuronx.get_executed_ops())
    assert "compiled graph" in torch_neuronx.metrics.report()


def flux2_on_neuron(dtype, compile):
    """The small FLUX.2 transformer's output on the CPU, and on neuron after `compile(model)`."""
    model = flux2_transformer().to(dtype)
    inputs = flux2_inputs(dtype)
    with torch.no_grad():
        want = model(**inputs)[0]
        dev = copy.deepcopy(model).to("neuron")
        compile(dev)
        got = dev(**_to(inputs, "neuron"))[0]
    return got, want


def whole_graph(model):
    model.compile(backend="neuron", fullgraph=True, dynamic=False)


def test_flux2_transformer_fullgraph_matches_cpu():
    got, want = flux2_on_neuron(torch.float32, whole_graph)
    assert got.device.type == "neuron" and got.shape == want.shape
    assert rel_err(got.cpu(), want) < 1e-5
    assert compiled() == 1 and torch_neuronx.get_fallback_ops() == {}


def test_flux2_transformer_bfloat16_matches_cpu():
    got, want = flux2_on_neuron(torch.bfloat16, whole_graph)
    assert got.dtype == torch.bfloat16
    assert rel_err(got.cpu(), want) < 2e-2
    assert compiled() == 1


def test_qwen3_fullgraph_matches_cpu():
    """transformers' model: its cache code makes constants with torch.tensor(..., device=...)."""
    model = qwen3()
    inputs = qwen3_inputs()
    with torch.no_grad():
        want = model(**inputs).logits
        dev = torch.compile(copy.deepcopy(model).to("neuron"), backend="neuron", fullgraph=True, dynamic=False)
        got = dev(**_to(inputs, "neuron")).logits
    assert rel_err(got.cpu(), want) < 1e-5
    assert compiled() == 1


def test_tensor_constants_in_the_graph():
    def f(x):
        return x + torch.tensor([1.0, 2.0], device=x.device)

    x = torch.randn(2)
    got = torch.compile(f, backend="neuron", fullgraph=True)(x.to("neuron"))
    assert torch.equal(got.cpu(), f(x)) and compiled() == 1


def test_recompiles_once_per_new_shape_and_never_for_steps():
    """The diffusers page's promise: a new height/width compiles once, a seen shape and a changed step
    count reuse the executables. One double and one single block (what is counted is graphs, not
    blocks: the 2 + 4 blocks of flux2_transformer compiled the same two graphs, three times slower);
    each resolution's latents match the same denoising loop on the CPU."""
    from diffusers import Flux2Transformer2DModel, FlowMatchEulerDiscreteScheduler

    torch.manual_seed(0)
    cpu_model = Flux2Transformer2DModel(
        patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=32,
        num_attention_heads=4, joint_attention_dim=64, timestep_guidance_channels=64, axes_dims_rope=(8, 8, 8, 8),
    ).eval()
    model = copy.deepcopy(cpu_model).to("neuron")
    model.compile(backend="neuron", fullgraph=True, dynamic=False)
    scheduler = FlowMatchEulerDiscreteScheduler()

    def denoise(n, steps, device="neuron", net=model):
        inputs = _to(flux2_inputs(torch.float32, n=n), device)
        scheduler.set_timesteps(steps)
        latents = inputs.pop("hidden_states")
        with torch.no_grad():
            for t in scheduler.timesteps:
                inputs["timestep"] = (t / 1000).reshape(1).to(device)
                noise = net(hidden_states=latents, **inputs)[0]
                latents = scheduler.step(noise, t, latents, return_dict=False)[0]
        return latents

    def matches_cpu(got, n, steps):
        torch.testing.assert_close(got.cpu(), denoise(n, steps, "cpu", cpu_model), rtol=1e-4, atol=1e-5)

    denoise(64, 1)
    assert compiled() == 1
    matches_cpu(denoise(64, 2), 64, 2)  # more steps: same graph
    assert compiled() == 1
    matches_cpu(denoise(32, 1), 32, 1)  # a new resolution: one compile, with Dynamo's reason
    assert compiled() == 2
    reasons = torch.neuron.get_dynamo_metrics()["recompiles"]
    assert len(reasons) == 1 and "size mismatch" in reasons[0]["reason"]
    denoise(64, 1)  # seen before: reused
    denoise(32, 2)
    assert compiled() == 2


def test_dynamic_true_is_refused_with_a_fix():
    f = torch.compile(lambda x: x * 2, backend="neuron", dynamic=True)
    with pytest.raises(Exception, match=r"static shapes only.*dynamic=True.*dynamic=False"):
        f(torch.randn(4, device="neuron"))


def test_mark_dynamic_is_refused():
    x = torch.randn(4, 3, device="neuron")
    torch._dynamo.mark_dynamic(x, 0)
    with pytest.raises(Exception, match=r"static shapes only.*marked dynamic"):
        torch.compile(lambda x: x + 1, backend="neuron")(x)


def test_default_dynamic_specializes_each_shape():
    """dynamic=None: Dynamo makes a changed shape symbolic; neuron compiles each concrete shape once."""

    def f(x):
        return torch.sin(x) * 2 + x.sum()

    g = torch.compile(f, backend="neuron")
    for n in (3, 4, 5, 4, 5):
        x = torch.randn(n)
        torch.testing.assert_close(g(x.to("neuron")).cpu(), f(x), rtol=1e-5, atol=1e-5)
    assert compiled() == 3


def test_graph_break_compiles_each_subgraph():
    def f(x):
        y = torch.cos(x) + 1
        torch._dynamo.graph_break()
        return y * x

    x = torch.randn(5)
    got = torch.compile(f, backend="neuron")(x.to("neuron"))
    torch.testing.assert_close(got.cpu(), f(x))
    assert compiled() == 2


def test_cpu_inputs_are_copied_or_refused(monkeypatch):
    f = torch.compile(lambda x: x * 3, backend="neuron")
    out = f(torch.ones(3))
    assert out.device.type == "cpu" and out.tolist() == [3.0, 3.0, 3.0]
    assert compiled() == 1
    torch._dynamo.reset()
    monkeypatch.setenv("TORCH_NEURONX_CPU_INPUTS", "error")
    with pytest.raises(Exception, match=r"is on cpu, not on neuron.*\.to\('neuron'\)"):
        torch.compile(lambda x: x * 3, backend="neuron")(torch.ones(3))


def test_other_modes_warn_and_are_ignored():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.compile(lambda x: x + 1, backend="neuron", mode="max-autotune")(torch.ones(2, device="neuron"))
    assert out.cpu().tolist() == [2.0, 2.0]
    assert any("mode='max-autotune' is ignored" in str(w.message) for w in caught)


def test_input_and_buffer_mutations_are_written_back():
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(2))

        def forward(self, x):
            self.count.add_(1)
            x.mul_(2)
            return x + self.count

    m = Counter().to("neuron")
    c = torch.compile(m, backend="neuron", fullgraph=True)
    x = torch.ones(2, device="neuron")
    param_key = torch_neuronx._C._storage_key(m.count)
    with torch.no_grad():
        out = c(x)
        out = c(x)
    assert x.cpu().tolist() == [4.0, 4.0]
    assert m.count.cpu().tolist() == [2.0, 2.0]
    assert out.cpu().tolist() == [6.0, 6.0]
    assert torch_neuronx._C._storage_key(m.count) == param_key  # updated in place, same storage


def test_weights_enter_without_copies():
    m = mlp().to("neuron")
    c = torch.compile(m, backend="neuron", fullgraph=True, dynamic=False)
    with torch.no_grad():
        x = torch.randn(2, 8, device="neuron")
        c(x)
        torch_neuronx.clear_op_tracking()
        c(x)
    # a second call launches the graph's executable only: no eager clone/copy of any parameter
    assert torch_neuronx.get_executed_ops() == {}
    assert list(torch.neuron.get_dynamo_metrics()["executions"].values()) == [2]


def test_training_three_steps_match_cpu():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    mc, mn = copy.deepcopy(m), copy.deepcopy(m).to("neuron")
    x, y = torch.randn(5, 8), torch.randn(5, 4)
    opt_c = torch.optim.AdamW(mc.parameters(), lr=0.05)
    opt_n = torch.optim.AdamW(mn.parameters(), lr=0.05)
    cm = torch.compile(mn, backend="neuron", dynamic=False)
    for _ in range(3):
        for model, opt, xx, yy in ((mc, opt_c, x, y), (cm, opt_n, x.to("neuron"), y.to("neuron"))):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xx), yy)
            loss.backward()
            opt.step()
    for a, b in zip(mc.parameters(), mn.parameters()):
        torch.testing.assert_close(b.cpu(), a, **tol("compiled_training", torch.float32))
    kinds = sorted(g["kind"] for g in torch.neuron.get_dynamo_metrics()["graphs"])
    assert kinds == ["backward", "forward"]


def test_regional_compilation_compiles_each_block_class_once():
    got, want = flux2_on_neuron(
        torch.float32, lambda m: m.compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)
    )
    assert rel_err(got.cpu(), want) < 1e-5
    m = torch.neuron.get_dynamo_metrics()
    # 2 double-stream and 4 single-stream blocks: one graph per block class, run for every block
    assert m["graphs_compiled"] == 2
    assert sorted(m["executions"].values()) == [2, 4]


def test_model_name_names_graphs_and_artifacts(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "1")
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(tmp_path))
    ndb.set_model_name("tiny")
    assert ndb.get_model_name() == "tiny"
    torch.compile(lambda x: torch.relu(x) * 2, backend="neuron")(torch.randn(3, device="neuron"))
    (g,) = torch.neuron.get_dynamo_metrics()["graphs"]
    assert g["graph"].startswith("tiny_")
    files = sorted(p.name for p in tmp_path.iterdir())
    assert any(f.endswith(".fx.py") for f in files) and any(f.endswith(".stablehlo.mlir") for f in files)
    hlo = next(p for p in tmp_path.iterdir() if p.name.endswith(".stablehlo.mlir")).read_text()
    assert "stablehlo" in hlo and "func.func public @main" in hlo
    assert "HloModule" in next(p for p in tmp_path.iterdir() if p.name.endswith(".hlo.txt")).read_text()
    # the executable, as TorchNeuron keeps the NEFF: it loads and computes the graph
    from torch_neuronx.runtime import executables

    blob = next(p for p in tmp_path.iterdir() if p.name.endswith(".executable")).read_bytes()
    x = torch.tensor([-1.0, 2.0, 3.0])
    (out,) = executables.load(blob, 0)(x.numpy(), np.zeros(1, np.int64))  # the storage, the view's offset
    assert torch.equal(torch.from_numpy(np.asarray(out)), torch.relu(x) * 2)
    assert all(f.startswith("tiny_") for f in files)


# An operator nothing lowers: a custom op with a CPU kernel and a fake (shape) kernel only
@torch.library.custom_op("neuron_test::shifted_cumsum", mutates_args=())
def shifted_cumsum(x: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(x, 0) + 1


@shifted_cumsum.register_fake
def _(x):
    return torch.empty_like(x)


@pytest.mark.cpu_fallback
def test_unlowered_op_error_names_graph_and_op(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_CPU_FALLBACK", "error")
    ndb.set_model_name("m")
    f = torch.compile(lambda x: shifted_cumsum(x * 2) - 1, backend="neuron")
    with pytest.raises(ndb.NEFFCompilationError, match=r"graph m_\d+_inference: op neuron_test\.shifted_cumsum.*no neuron lowering"):
        f(torch.arange(4.0, device="neuron"))
    assert torch_neuronx.metrics.get_refused_fallbacks() == {"neuron_test.shifted_cumsum.default": 1}
    assert torch_neuronx.get_fallback_ops() == {}


@pytest.mark.cpu_fallback
def test_unlowered_op_runs_on_host_inside_the_graph():
    x = torch.arange(6.0)
    want = shifted_cumsum(x * 2) - 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.compile(lambda x: shifted_cumsum(x * 2) - 1, backend="neuron")(x.to("neuron"))
    assert got.cpu().tolist() == want.tolist()
    assert torch_neuronx.get_fallback_ops() == {"neuron_test.shifted_cumsum.default": 1}
    (g,) = torch.neuron.get_dynamo_metrics()["graphs"]
    assert g["fallback_ops"] == ["neuron_test.shifted_cumsum.default"]


def test_out_of_range_index_raises_execution_error():
    f = torch.compile(lambda t, i: torch.index_select(t, 0, i), backend="neuron")
    t = torch.randn(4, 2, device="neuron")
    assert f(t, torch.tensor([0, 3], device="neuron")).shape == (2, 2)
    with pytest.raises(ndb.NEFFExecutionError, match=r"graph .*: op aten\.index_select.*IndexError.*out of range"):
        f(t, torch.tensor([0, 4], device="neuron"))


def test_random_ops_draw_from_the_device_generator():
    def f(x):
        return torch.nn.functional.dropout(x, 0.5, training=True) + torch.randn_like(x) * 0 + torch.rand(x.shape, device=x.device) * 0

    c = torch.compile(f, backend="neuron", fullgraph=True)
    x = torch.ones(4000, device="neuron")
    torch.manual_seed(5)
    a = c(x).cpu()
    b = c(x).cpu()
    torch.manual_seed(5)
    a2 = c(x).cpu()
    assert torch.equal(a, a2) and not torch.equal(a, b)  # seeded, and a new draw per call
    assert set(a.unique().tolist()) == {0.0, 2.0} and abs((a == 0).float().mean().item() - 0.5) < 0.05
    assert torch_neuronx.get_fallback_ops() == {} and compiled() == 1


def test_conv_batchnorm_training_updates_running_stats():
    torch.manual_seed(0)
    m = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 2),
    )
    mc, mn = copy.deepcopy(m), copy.deepcopy(m).to("neuron")
    x = torch.randn(4, 3, 8, 8)
    opt_c, opt_n = torch.optim.SGD(mc.parameters(), lr=0.1), torch.optim.SGD(mn.parameters(), lr=0.1)
    cm = torch.compile(mn, backend="neuron")
    for _ in range(3):
        for model, opt, xx in ((mc, opt_c, x), (cm, opt_n, x.to("neuron"))):
            opt.zero_grad()
            model(xx).square().mean().backward()
            opt.step()
    for (name, a), b in zip(mc.state_dict().items(), mn.state_dict().values()):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-5, atol=1e-6, msg=name)
    assert int(mn[1].num_batches_tracked.item()) == 3
    mc.eval(), mn.eval()
    with torch.no_grad():
        torch.testing.assert_close(cm(x.to("neuron")).cpu(), mc(x), rtol=1e-5, atol=1e-6)
    assert torch_neuronx.get_fallback_ops() == {}


def test_linalg_error_checks_raise_pytorchs_message():
    """AOTAutograd orders `_linalg_check_errors` with effect tokens; its info codes leave the
    executable and PyTorch's own check raises on the host."""
    f = torch.compile(lambda a: torch.linalg.cholesky(a), backend="neuron")
    a = torch.randn(4, 4)
    a = a @ a.T + 4 * torch.eye(4)
    torch.testing.assert_close(f(a.to("neuron")).cpu(), torch.linalg.cholesky(a), rtol=1e-5, atol=1e-5)
    with pytest.raises(ndb.NEFFExecutionError, match=r"leading minor of order 1 is not positive-definite"):
        f(-torch.eye(4, device="neuron"))


def test_data_dependent_op_breaks_the_graph_and_runs_eagerly():
    """linalg.lstsq has a data-dependent output for Dynamo: the graph breaks and the op runs as an
    eager neuron op inside the compiled region (Dynamo must not trace the backend's own code)."""
    a, b = torch.randn(6, 4), torch.randn(6, 2)
    f = torch.compile(lambda a, b: torch.linalg.lstsq(a, b).solution * 2, backend="neuron")
    # a well-conditioned system (cond(a) ~ 5): float32 rounding, measured at most 1e-6
    torch.testing.assert_close(f(a.to("neuron"), b.to("neuron")).cpu(), torch.linalg.lstsq(a, b).solution * 2,
                               rtol=1e-5, atol=1e-5)
    assert "aten.linalg_lstsq.default" in torch_neuronx.get_executed_ops()


def test_device_module_calls_break_the_graph_cleanly():
    def f(x):
        y = x * 2
        torch.neuron.synchronize()
        return y + torch.neuron.current_device()

    x = torch.randn(3)
    torch.testing.assert_close(torch.compile(f, backend="neuron")(x.to("neuron")).cpu(), x * 2)
    assert compiled() == 2


def test_as_strided_of_a_strided_view_indexes_the_storage():
    """as_strided reads its input's storage (strides, offset), not its row-major values."""

    def transposed(x):
        return torch.as_strided(x.t(), (2, 2), (1, 3), 1) * 1

    def offset_scatter(x):
        return torch.as_strided_scatter(x[1:], torch.ones(2, device=x.device), (2,), (2,), 5) + 0

    x = torch.arange(12.0).reshape(3, 4)
    for fn in (transposed, offset_scatter):
        torch._dynamo.reset()
        got = torch.compile(fn, backend="neuron", fullgraph=True)(x.to("neuron"))
        assert torch.equal(got.cpu(), fn(x)), fn.__name__


def test_autocast_inside_a_compiled_region():
    torch.manual_seed(0)
    m = torch.nn.Linear(8, 8)
    mn = copy.deepcopy(m).to("neuron")
    x = torch.randn(4, 8)

    def f(model, x):
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            y = model(x)
        return y.dtype == torch.bfloat16, y.float().softmax(-1)

    with torch.no_grad():
        is_bf16, got = torch.compile(lambda x: f(mn, x), backend="neuron", fullgraph=True)(x.to("neuron"))
        _, want = f(m, x)
    assert is_bf16
    torch.testing.assert_close(got.cpu(), want)  # measured identical: one bfloat16 rounding on both sides
