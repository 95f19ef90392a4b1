"""Indexing at PyTorch's edges, each case run on the CPU and on neuron and compared: results, exception
type and message, warnings. In eager mode and compiled (`torch.compile(backend="neuron")`; the CPU
side runs the same function uncompiled).

- index tensors and masks on the host for a device tensor (`x[cpu_mask]`, `x[cpu_index] = v`,
  `index_put_` with host indices), as CUDA takes them (eager/host_indices.py);
- empty index tensors and zero-size dimensions, masks of every rank and mismatch, 0-dim masks, uint8
  masks (the CPU's deprecation warning), negative, out-of-range and wrongly typed indices;
- sparse and quantized tensors: one error naming the layout (eager/unsupported_layouts.py).
"""
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402

from helpers import randn  # noqa: E402

L = torch.long


def _outcome(fn, args, compiled):
    """(result on the CPU, or the exception), warnings' messages."""
    run = torch.compile(fn, backend="neuron", dynamic=False) if compiled else fn
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = run(*args)
            result = result.cpu() if isinstance(result, torch.Tensor) else result
        except Exception as e:  # compared with the CPU's below
            result = e
    # a C++ warning names where it was raised: compared without that
    return result, sorted({str(w.message).split(" (Triggered internally at")[0] for w in caught
                           if w.category is UserWarning and "indexing" in str(w.message)})


def _neuron(arg, host):
    """A tensor argument as the neuron side gets it: on the device, unless it is one of the host ones."""
    return arg if host or not isinstance(arg, torch.Tensor) else arg.to("neuron")


def check(fn, *args, host=(), compiled=False):
    """fn(*args) on the CPU and on neuron (tensor arguments moved there, except positions in `host`):
    the same values, or the same exception type with the CPU's message within neuron's; the same
    indexing warnings."""
    want, want_w = _outcome(fn, [a.clone() if isinstance(a, torch.Tensor) else a for a in args], False)
    got, got_w = _outcome(fn, [_neuron(a, i in host) for i, a in enumerate(args)], compiled)
    if isinstance(want, Exception):
        assert type(got) is type(want), (got, want)
        assert str(want) in str(got), (str(got), str(want))
    else:
        assert not isinstance(got, Exception), got
        assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    if not compiled:  # Dynamo traces the CPU's call once (its warnings) and replays it without them
        assert got_w == want_w, (got_w, want_w)


MODES = [pytest.param(False, id="eager"), pytest.param(True, id="compiled")]
X = randn(4, 3, seed=1)
MASK = torch.tensor([True, False, True, True])
MASK2 = torch.tensor([[True, False, True], [False, False, True], [True, True, True], [False, False, False]])


def get(x, i):
    return x[i]


def put(x, i, v):
    y = x.clone()
    y[i] = v
    return y


def put_acc(x, i, v):
    return x.clone().index_put_((i,), v, accumulate=True)


@pytest.mark.parametrize("compiled", MODES)
@pytest.mark.parametrize("case", [
    (get, (X, torch.tensor([0, 2, -1]))),
    (get, (X, MASK)),
    (get, (X, MASK2)),
    (put, (X, MASK, 0.5)),
    (put, (X, MASK2, torch.tensor(-1.0))),
    (put, (X, torch.tensor([3, 0]), randn(2, 3, seed=2))),
    (put_acc, (X, torch.tensor([1, 1, 0]), randn(3, 3, seed=3))),
    (put_acc, (X, MASK, randn(3, 3, seed=4))),
], ids=["get-index", "get-mask", "get-mask2d", "put-mask", "put-mask2d-0dim-value", "put-index",
        "put-accumulate", "put-accumulate-mask"])
def test_host_indices_for_a_device_tensor(case, compiled):
    fn, args = case  # (compiled, a mask's positions are a data-dependent shape: Dynamo breaks the graph there)
    check(fn, *args, host=(1,), compiled=compiled)


def test_index_put_with_host_indices_in_place():
    x = torch.zeros(5, device="neuron")
    x.index_put_((torch.tensor([4, 1]),), torch.tensor([1.0, 2.0], device="neuron"))
    torch.ops.aten._index_put_impl_(x, [torch.tensor([0])], torch.tensor(3.0), True, False)
    assert x.cpu().tolist() == [3.0, 2.0, 0.0, 0.0, 1.0]


def test_an_index_on_another_device_is_refused():
    x = torch.zeros(3, device="neuron:0")
    with pytest.raises(IndexError, match=r"indices should be either on cpu or on the same device as the "
                                         r"indexed tensor \(neuron:0\)"):
        x[torch.tensor([0], device="neuron:1")]


E = torch.zeros(10, 0, dtype=L)


@pytest.mark.parametrize("compiled", MODES)
@pytest.mark.parametrize("case", [
    (get, (X, E)),  # an index of shape [10, 0]
    (lambda x, i: x[:, i], (X, E)),
    (lambda x, i: x[i, i], (X, E)),
    (lambda x, i: torch.gather(x, 1, i), (X, E)),
    (lambda x, i: torch.take(x, i), (X, E)),
    (lambda x, i: torch.index_select(x, 1, i), (X, torch.zeros(0, dtype=L))),
    (get, (torch.zeros(0, 3), torch.zeros(0, dtype=L))),  # empty into empty
    (get, (torch.zeros(0, 3), torch.tensor([1]))),  # positions into a dim of size 0: the CPU's IndexError
    (put, (torch.zeros(0, 3), torch.tensor([1]), 1.0)),
    (lambda x, v: x.clone().index_put_((torch.zeros(0, dtype=L, device=x.device),), v, accumulate=True),
     (X, torch.zeros(0, 3))),
    (lambda x: x[[]], (X,)),  # an empty list
    (lambda x: x[[[], []]], (X,)),
], ids=["10x0", "slice-10x0", "two-10x0", "gather", "take", "index_select", "empty-into-empty",
        "into-size-0", "put-into-size-0", "put-empty-accumulate", "empty-list", "empty-lists"])
def test_empty_indices_and_zero_size_dims(case, compiled):
    fn, args = case
    check(fn, *args, compiled=compiled)


@pytest.mark.parametrize("compiled", MODES)
@pytest.mark.parametrize("mask", [
    torch.tensor([True, False]),  # shorter than its dim
    torch.tensor([[True, False, True, False]]),  # [1, 4] over [4, 3]
    torch.zeros(4, 0, dtype=torch.bool),  # a zero-size dim
    torch.zeros(0, dtype=torch.bool),
    torch.zeros(4, 3, dtype=torch.bool),  # nothing selected
    torch.ones(4, 3, 1, dtype=torch.bool),  # more dims than the tensor
    torch.tensor(True), torch.tensor(False),  # 0-dim
], ids=["short", "1x4", "4x0", "0", "none-true", "too-many-dims", "0dim-true", "0dim-false"])
@pytest.mark.parametrize("where", ["device", "host"])
def test_masks_of_every_rank_and_mismatch(mask, where, compiled):
    host = (1,) if where == "host" else ()
    check(get, X, mask, host=host, compiled=compiled)
    check(put, X, mask, -2.0, host=host, compiled=compiled)


@pytest.mark.parametrize("where", ["device", "host"])
def test_uint8_masks_warn_as_on_the_cpu(where):
    host = (1,) if where == "host" else ()
    mask = torch.tensor([1, 0, 1, 1], dtype=torch.uint8)
    check(get, X, mask, host=host)
    check(lambda x, m: x.clone().index_put_((m,), torch.ones(3, 3, device=x.device)), X, mask, host=host)
    # one value on the host and a uint8 mask on the tensor's device: ATen hands the call to masked_fill_,
    # which refuses uint8 (a host mask takes index_put_'s own path on a device, as on CUDA)
    check(lambda x, m: x.clone().index_put_((m,), torch.tensor(1.0)), X, mask)
    check(lambda x, m: x.clone().masked_fill_(m.reshape(4, 1), 1.0), X, mask)


@pytest.mark.parametrize("compiled", MODES)
@pytest.mark.parametrize("case", [
    (get, (X, torch.tensor([-4, 3]))),
    (get, (X, torch.tensor([4]))),
    (get, (X, torch.tensor([-5]))),
    (put, (X, torch.tensor([4]), 1.0)),
    (get, (X, torch.tensor([1.0]))),  # a float index
    (lambda x: x[0, 0, 0], (X,)),
    (get, (X, torch.tensor([0], dtype=torch.int32))),
], ids=["negative", "past-end", "before-start", "put-past-end", "float-index", "too-many", "int32"])
def test_negative_out_of_range_and_mistyped_indices(case, compiled):
    fn, args = case
    check(fn, *args, compiled=compiled)


@pytest.mark.parametrize("make", [
    lambda: torch.eye(3).to_sparse(), lambda: torch.eye(3).to_sparse_csr(), lambda: torch.eye(3).to_sparse_csc(),
    lambda: torch.eye(4).to_sparse_bsr((2, 2)),
    lambda: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8),
], ids=["coo", "csr", "csc", "bsr", "quantized"])
def test_sparse_and_quantized_tensors_raise_one_error_naming_the_layout(make):
    t = make()
    what = "quantized tensors" if t.is_quantized else "sparse"
    with pytest.raises(NotImplementedError, match=f"the neuron device does not hold {what}"):
        t.to("neuron")
    with pytest.raises(NotImplementedError, match="the neuron device does not hold sparse COO"):
        torch.sparse_coo_tensor(torch.tensor([[0, 1]]), torch.ones(2), (3,), device="neuron")
    with pytest.raises(NotImplementedError, match="the neuron device does not hold sparse compressed"):
        torch.eye(3, device="neuron").to_sparse_csr()
    with pytest.raises(NotImplementedError, match="the neuron device does not hold quantized"):
        torch.quantize_per_tensor(torch.ones(3, device="neuron"), 0.1, 0, torch.quint8)
    assert torch.eye(3, device="neuron").sum().item() == 3.0  # the device is fine afterwards
