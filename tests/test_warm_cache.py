"""A warm disk cache (a user's second run of a script): what an executable calls is made ready before it
is loaded (runtime/custom_calls.py), an entry that cannot be made ready is compiled again instead of
run, and the warm pass of tests/warm_cache.py over a slice of the suite (every lowering family, every
executable kind) loads everything the cold pass compiled, compiles nothing and gives the same device
results bit for bit. `bash scripts/test.sh --warm` runs the whole op sweep so."""
from __future__ import annotations

import pathlib

import pytest
import torch
from torch import Tensor

import torch_neuronx
import warm_cache
from helpers import randn, run_python
from torch_neuronx import cache, metrics
from torch_neuronx.eager import fusion
from torch_neuronx.runtime import custom_calls, executables, native_kernels
from torch_neuronx.runtime.lazy_jax import jax, jnp

ROOT = pathlib.Path(__file__).resolve().parent.parent


# ---- what an executable records and what loading checks


def _compiled(fn, *args):
    lowered = jax.jit(fn).lower(*args)
    return executables.compile_lowered(lowered, small=True)


def test_an_executable_records_the_registered_targets_it_calls():
    import numpy as np

    spd = np.eye(3, dtype=np.float32) * 2
    chol = _compiled(jnp.linalg.cholesky, spd)
    assert executables.targets_of(chol) == ("lapack_spotrf_ffi",)
    assert executables.targets_of(_compiled(lambda a: a * 2, spd)) == ()
    # XLA's own custom calls are not in the registry: nothing to prepare for them
    text = 'custom_call_target="lapack_dgetrf_ffi" ... custom_call_target="SomethingXlaRunsItself"'
    assert custom_calls.referenced(text) == ("lapack_dgetrf_ffi",)
    # the record travels with the stored bytes
    loaded = executables.load(executables.serialize(chol), 0)
    assert executables.targets_of(loaded) == ("lapack_spotrf_ffi",)
    np.testing.assert_allclose(np.asarray(loaded(spd)), np.linalg.cholesky(spd), rtol=1e-6)


def test_a_target_that_is_not_registered_is_unready():
    with pytest.raises(custom_calls.Unready, match="no_such_target_for_this_test"):
        custom_calls.prepare(("no_such_target_for_this_test",))
    with pytest.raises(custom_calls.Unready, match="not recorded"):
        custom_calls.prepare(None)
    custom_calls.prepare(())
    custom_calls.prepare(("lapack_dpotrf_ffi",))


def _retarget(path: pathlib.Path, targets: tuple) -> None:
    """Rewrite a stored entry as if its executable called `targets` (as one compiled in a process that
    had them registered would)."""
    import pickle

    from torch_neuronx.cache import store

    info, body = store.decode(path.read_bytes(), path.stem)
    meta, blob = pickle.loads(body)
    fmt, payload, in_tree, out_tree, cost, _targets = pickle.loads(blob)
    blob = pickle.dumps((fmt, payload, in_tree, out_tree, cost, targets))
    path.write_bytes(store.encode(info.name, info.kind, info.key, pickle.dumps((meta, blob))))


def test_an_entry_whose_targets_are_unready_is_compiled_again_and_kept(fresh_cache):
    """Not loaded (its call could crash), not removed (a process that has the target loads it): the
    op is compiled here, and says why once."""
    x = randn(5, 3, seed=1)
    with fusion.disabled():
        first = torch.exp(x.to("neuron")).cpu()
    ops = [p for p in fresh_cache.rglob("*.entry") if b"aten.exp" in p.read_bytes()]
    assert len(ops) == 1
    _retarget(ops[0], ("test_target_nobody_registered",))
    cache.reset()
    before = metrics.executables_by_kind()["compiled"].get("op", 0)
    with pytest.warns(RuntimeWarning, match="compiled again instead of loaded: it calls custom-call target "
                                            "test_target_nobody_registered, not registered in this process"):
        with fusion.disabled():
            again = torch.exp(x.to("neuron")).cpu()
    assert torch.equal(again, first)
    torch.testing.assert_close(again, torch.exp(x))
    assert metrics.executables_by_kind()["compiled"].get("op", 0) == before + 1
    assert metrics.executable_cache_stats()["unready_entries"] == 1
    assert ops[0].exists()  # kept (then stored over by this process's own compile)


# ---- every executable kind, recorded for the warm pass (and checked against the CPU in any run)


@torch_neuronx.nki_op("test_warm::scaled_tanh", mutates_args=(), cpu=lambda x, s: torch.tanh(x) * s,
                      dynamic=("s",))
def scaled_tanh(x: Tensor, s: float) -> Tensor:
    return jnp.tanh(x) * s


def _register_user_target() -> None:
    """A target of the user's own, registered at import as a user's module would: LAPACK's Cholesky
    under another name (a process that loads an executable calling it must have registered it)."""
    import jaxlib.lapack
    import numpy as np

    if "test_warm_user_potrf" in custom_calls.registry():
        return
    (capsule,) = [c for n, c, _ in jaxlib.lapack.registrations()["cpu"] if n == "lapack_spotrf_ffi"]
    jax.ffi.register_ffi_target("test_warm_user_potrf", capsule, platform="cpu", api_version=1)
    jaxlib.lapack.prepare_lapack_call("potrf_ffi", np.float32)  # the user's own initialization


@torch_neuronx.nki_op("test_warm::user_cholesky", mutates_args=(), cpu=lambda a: torch.linalg.cholesky(a))
def user_cholesky(a: Tensor) -> Tensor:
    import numpy as np

    out, _info = jax.ffi.ffi_call("test_warm_user_potrf", (jax.ShapeDtypeStruct(a.shape, a.dtype),
                                  jax.ShapeDtypeStruct((), jnp.int32)), input_output_aliases={0: 0})(a, uplo=np.uint8(ord("L")))
    return jnp.triu(out).T  # LAPACK's column-major lower factor, read row-major (a is symmetric)


def _check(got, want, **tol):
    warm_cache.record(got)
    torch.testing.assert_close(got.cpu(), want, **tol)


_LAPACK_OPS = {  # the nine of the warm-cache crash (s: symmetric positive definite, a: square, b: right side)
    "cholesky": lambda s, a, b: torch.linalg.cholesky(s),
    "inv": lambda s, a, b: torch.linalg.inv(a),
    "solve": lambda s, a, b: torch.linalg.solve(a, b),
    "svd": lambda s, a, b: torch.linalg.svd(a)[1],
    "qr": lambda s, a, b: torch.linalg.qr(a)[1].abs(),
    "eigh": lambda s, a, b: torch.linalg.eigh(s)[0],
    "det": lambda s, a, b: torch.linalg.det(a),
    "lu_factor": lambda s, a, b: torch.linalg.lu_factor(a)[0],
    "solve_triangular": lambda s, a, b: torch.linalg.solve_triangular(torch.linalg.cholesky(s), b, upper=False),
}


def test_every_executable_kind():
    """An eager op on its own, a fused run, a compiled graph (and its AOTAutograd record), custom kernels
    (one calling a custom-call target of the user's), the native kernels (attention and its backward, a
    16-bit product), a reduction over unit dims, a cat along the last dim, a
    data-dependent op (unique), and the nine LAPACK-backed ops of the warm-cache crash in eager mode and
    in graphs: each against the CPU. Under tests/warm_cache.py's warm pass (the slice below) each must
    load from the disk cache and give the cold pass's bits, and the cost analyses the loaded executables
    carry must be the ones the cold pass computed."""
    x, w = randn(8, 16, seed=1), randn(16, 16, seed=2)
    dx, dw = x.to("neuron"), w.to("neuron")
    with fusion.disabled():  # kind "op"
        _check(torch.relu(dx @ dw), torch.relu(x @ w), rtol=1e-4, atol=1e-4)
    _check((dx * 2 + 1).sin().sum(0), (x * 2 + 1).sin().sum(0), rtol=1e-4, atol=1e-4)  # a fused run
    with fusion.disabled():  # the same signatures, traced under fusion above, now each on its own: "op"
        _check((dx * 2 + 1).sin().sum(0), (x * 2 + 1).sin().sum(0), rtol=1e-4, atol=1e-4)

    def block(a, b):
        return torch.nn.functional.gelu(a @ b).softmax(-1)

    def with_constant(a):  # a device constant the graph holds (made by torch.tensor while Dynamo traces)
        return torch.where(a > 0, a, torch.tensor(0.5, device=a.device)).sum(0)

    with torch.no_grad():  # inference graphs: their AOTAutograd results are recorded on disk too
        _check(torch.compile(block, backend="neuron", dynamic=False)(dx, dw), block(x, w), rtol=1e-4, atol=1e-4)
        _check(torch.compile(with_constant, backend="neuron", dynamic=False)(dx), with_constant(x))
    _check(torch.ops.test_warm.scaled_tanh(dx, 0.5), torch.tanh(x) * 0.5, rtol=1e-5, atol=1e-5)  # custom kernel
    _register_user_target()
    spd = x.T @ x + torch.eye(16)
    _check(torch.ops.test_warm.user_cholesky(spd.to("neuron")), torch.linalg.cholesky(spd), rtol=1e-4, atol=1e-4)
    q, k, v = (randn(1, 2, 8, 16, seed=s, dtype=torch.bfloat16) for s in (3, 4, 5))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    _check(sdpa(q.to("neuron"), k.to("neuron"), v.to("neuron")), sdpa(q, k, v), rtol=2e-2, atol=2e-2)  # native
    leaves = [[t.clone().to(dev).requires_grad_() for t in (q, k, v)] for dev in ("neuron", "cpu")]
    for qkv in leaves:  # the native attention backward
        sdpa(*qkv).float().square().sum().backward()
    for got, want in zip(*leaves):
        _check(got.grad, want.grad, rtol=2e-2, atol=2e-2)
    x3, g3 = x.reshape(1, 8, 16), w[:8].reshape(1, 8, 16)  # a reduction over unit dims, a cat of 16-wide runs
    _check((x3.to("neuron") * g3.to("neuron")).sum(-1), (x3 * g3).sum(-1), rtol=1e-5, atol=1e-5)
    _check(torch.cat([dx, dw[:8]], -1), torch.cat([x, w[:8]], -1))
    xb, wb = x.to(torch.bfloat16), w.to(torch.bfloat16)
    calls = metrics.native_kernel_calls().get("matmul", 0)
    _check(xb.to("neuron") @ wb.to("neuron"), xb @ wb, rtol=2e-2, atol=2e-2)  # native where products are
    if native_kernels.uses(native_kernels.PRODUCTS, "bfloat16"):  # (the slice's passes: on every CPU)
        assert metrics.native_kernel_calls()["matmul"] == calls + 1
    values = torch.tensor([3, 1, 2, 3, 1, 5, 5, 0])
    for got, want in zip(torch.unique(values.to("neuron"), return_inverse=True, return_counts=True),
                         torch.unique(values, return_inverse=True, return_counts=True)):
        _check(got, want)  # kind "dynamic"
    a, b = randn(6, 6, seed=6), randn(6, 2, seed=7)
    s = a @ a.T + 6 * torch.eye(6)
    args = (s.to("neuron"), a.to("neuron"), b.to("neuron"))
    for name, f in _LAPACK_OPS.items():
        want = f(s, a, b)
        _check(f(*args), want, rtol=1e-4, atol=1e-4)
        _check(torch.compile(f, backend="neuron", dynamic=False)(*args), want, rtol=1e-4, atol=1e-4)
    # each executable's cost analysis (the Trainium estimate's input) travels with it: the warm pass's
    # loaded graphs and runs must count what the cold pass's compiled ones did (the eager ops AOTAutograd
    # runs while it compiles a graph, the cold pass's alone, left out; a graph by its kind alone: its name
    # numbers the graphs its process compiled before it)
    launched = sorted((r["name"].split()[0], r["launches"], r["flops"], sorted(r["products"].items()))
                      for r in metrics.estimates() if r["name"].startswith(("graph ", "a fused run")))
    assert sum(r[2] for r in launched) > 0, launched
    warm_cache.record(repr(launched))


# ---- the warm pass of a slice of the suite

# one test per lowering family, in eager and in compiled mode, and the kinds above (the whole op sweep,
# OpInfo included: `bash scripts/test.sh --warm`)
_FAMILY_TESTS = [
    "conv.py::test_convolution[2d0-{}]", "distance.py::test_cdist_pdist[{}]", "elementwise.py::test_acosh[{}]",
    "factory.py::test_arange[{}]", "fft.py::test_fft_lowerings[{}]", "histogram.py::test_histc[dtype0-{}]",
    "indexing.py::test_index_put[{}]", "linalg.py::test_mm_bmm_mv_dot[dtype0-{}]",
    "linalg_decomp.py::test_inv[shape1-dtype0-{}]", "norm.py::test_native_layer_norm[dtype1-{}]",
    "pooling.py::test_max_pool2d_with_indices[cfg0-{}]", "random.py::test_native_dropout_backward[{}]",
    "reduction.py::test_sum[dtype0-{}]", "resample.py::test_upsample_nearest2d[dtype0-{}]",
    "shape.py::test_cat[{}]", "sorting.py::test_sort[dtype0-{}]", "special.py::test_polygamma[1-{}]",
    "views.py::test_views_basic[{}]",
]
# the families whose device tests have no modes: their device test (attention's lowering alone; its device
# path is in the kinds test; promotion has no device test)
_DEVICE_TESTS = ["attention.py::test_sdpa_overrideable_forward[0-dtype0]", "loss.py::test_device_ctc_loss",
                 "random.py::test_device_rrelu[dtype0]"]
SLICE = (["tests/test_warm_cache.py::test_every_executable_kind"]
         + [f"tests/test_lowerings_{t}" for t in _DEVICE_TESTS]
         + [f"tests/test_lowerings_{t.format(mode)}" for t in _FAMILY_TESTS for mode in ("eager", "compiled")])


def test_the_warm_pass_of_a_slice_loads_everything_and_matches(tmp_path):
    top = tmp_path / "warm"
    # torch's CPU kernels for every 16-bit product (not only where oneDNN takes them): the native kind
    # is in both passes on any CPU
    proc = run_python(args=[str(ROOT / "tests" / "warm_cache.py"), "--keep", str(top), "-p", "no:xdist", *SLICE],
                      timeout=1200, cwd=str(ROOT), TORCH_NEURONX_NATIVE_KERNELS="1")
    s = warm_cache.summary(str(top))
    detail = f"{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
    assert proc.returncode == 0, detail
    assert s["warm_tests"] == s["cold_tests"] >= len(SLICE), detail
    assert s["warm_xla"] == 0 and not s["mismatches"] and not s["not_run_warm"], s
    for kind in ("op", "run", "graph", "dynamic"):  # every kind the cold pass stored came back from disk
        assert s["cold_compiled"].get(kind, 0) > 0 and s["warm_loaded"].get(kind, 0) > 0, (kind, s)
    assert s["outputs"] >= 100, s
