"""Lowerings of index_reduce and put, bool accumulation in index_add / index_put / scatter_reduce
(torch_neuronx/ops/indexing.py), and the unique kernels (eager/kernels.py, data-dependent sizes):
each lowering compared with PyTorch's CPU kernel as a pure jax function (lowering_harness) and
the user-level calls run on the neuron device vs the CPU with no CPU fallback (device_harness)."""
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402

from device_harness import check_device  # noqa: E402
from lowering_harness import check_lowering  # noqa: E402

aten = torch.ops.aten
NAN, INF = float("nan"), float("inf")

warnings.filterwarnings("ignore", message="index_reduce.. is in beta")


# ---------------------------------------------------------------------------------------------
# index_reduce


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.uint8])
def test_index_reduce(dtype):
    x = (torch.randn(5, 4, 3) * 5).to(dtype)
    src = (torch.randn(5, 7, 3) * 3).to(dtype)
    idx = torch.tensor([0, 1, 1, 3, 0, 3, 2])
    for reduce in ("prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            # (bfloat16: the CPU folds duplicate indices in bfloat16, the lowering in float32)
            check_lowering(aten.index_reduce.default, x, 1, idx, src, reduce, include_self=include_self,
                           family="accumulate_16bit")


def test_index_reduce_nan_and_small():
    x = torch.tensor([1.0, NAN, 3.0, 4.0])
    src = torch.tensor([NAN, 2.0, 5.0, 1.0])
    for reduce in ("prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            check_lowering(aten.index_reduce.default, x, 0, torch.tensor([0, 0, 2, 2]), src, reduce,
                           include_self=include_self)
            check_lowering(aten.index_reduce.default, torch.tensor(3.0), 0, torch.tensor([0]), torch.tensor(2.0),
                           reduce, include_self=include_self)
            # int32 index, negative integer means floor
            check_lowering(aten.index_reduce.default, torch.tensor([-7, 5, 3]), 0, torch.tensor([0, 0], dtype=torch.int32),
                           torch.tensor([2, 1]), reduce, include_self=include_self)


def test_device_index_reduce():
    x = torch.randn(5, 4)
    check_device(lambda x, i, s: x.index_reduce(0, i, s, "amax"), x, torch.tensor([0, 0, 4]), torch.randn(3, 4),
                 must_run=["aten.index_reduce.default"])
    check_device(lambda x, i, s: x.clone().index_reduce_(1, i, s, "mean", include_self=False), x,
                 torch.tensor([3, 0, 3]), torch.randn(5, 3), must_run=["aten.index_reduce_.default"])
    d = x.to("neuron")
    with pytest.raises(IndexError, match="index out of range"):
        d.index_reduce(0, torch.tensor([0, 5], device="neuron"), torch.ones(2, 4, device="neuron"), "prod")


# ---------------------------------------------------------------------------------------------
# put


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_put(dtype):
    x = (torch.randn(3, 4) * 3).to(dtype)
    for idx in (torch.tensor([0, 5, -1, 5, -12]), torch.tensor([[1, 2], [2, 11]])):
        src = (torch.randn(idx.shape) * 3).to(dtype)
        for accumulate in (True, False):
            check_lowering(aten.put.default, x, idx, src, accumulate)
    check_lowering(aten.put.default, torch.tensor(2.0).to(dtype), torch.tensor(0), torch.tensor([1.0]).to(dtype), True)
    check_lowering(aten.put.default, x, torch.zeros(0, dtype=torch.long), torch.zeros(0).to(dtype), False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
def test_device_put(dtype):
    x = (torch.randn(3, 4) * 3).to(dtype)
    idx = torch.tensor([[1, 2], [-1, 11]])
    src = (torch.randn(idx.shape) * 3).to(dtype)
    for accumulate in (True, False):
        check_device(lambda x, i, s: x.clone().put_(i, s, accumulate=accumulate), x, idx, src,
                     must_run=["aten.put_.default"])


def test_device_put_out_of_range():
    d = torch.zeros(2, 3, device="neuron")
    for bad in (6, -7):
        with pytest.raises(IndexError, match="out of range"):
            d.put_(torch.tensor([bad], device="neuron"), torch.ones(1, device="neuron"))


# ---------------------------------------------------------------------------------------------
# accumulating into bool tensors: or (sum) and and (prod), as on the CPU


def test_bool_accumulation():
    z = torch.tensor([False, True, False, True])
    idx, src = torch.tensor([0, 0, 1]), torch.tensor([True, True, False])
    check_lowering(aten.index_add.default, z, 0, idx, src)
    check_lowering(aten.index_add.default, z, 0, idx, src, alpha=False)
    check_lowering(aten.index_put.default, z, [idx], src, True)
    check_lowering(aten.index_put.default, z, [torch.tensor([True, False, True, False])], torch.tensor(True), True)
    for reduce in ("sum", "prod", "amax", "amin"):
        for include_self in (True, False):
            check_lowering(aten.scatter_reduce.two, z, 0, torch.tensor([0, 0, 1, 3]),
                           torch.tensor([True, True, False, False]), reduce, include_self=include_self)


def test_device_bool_accumulation():
    z = torch.tensor([False, True, False, True])

    def on(t, v):
        return torch.tensor(v, device=t.device)

    check_device(lambda z: z.clone().index_add_(0, on(z, [0, 0, 1]), on(z, [True, True, False])), z,
                 must_run=["aten.index_add_.default"])
    check_device(lambda z: z.index_add(0, on(z, [0, 2]), on(z, [True, True]), alpha=False), z,
                 must_run=["aten.index_add.default"])
    check_device(lambda z: z.clone().index_put_((on(z, [0, 0, 1]),), on(z, [True, True, False]), accumulate=True), z,
                 must_run=["aten.index_put_.default"])
    check_device(lambda z: z.clone().index_put_((on(z, [True, False, True, False]),), on(z, True), accumulate=True),
                 z, must_run=["aten.index_put_.default"])
    for reduce in ("sum", "prod", "amax", "amin"):
        for include_self in (True, False):
            check_device(lambda z: z.scatter_reduce(0, on(z, [0, 0, 1, 3]), on(z, [True, True, False, False]),
                                                    reduce, include_self=include_self), z,
                         must_run=["aten.scatter_reduce.two"])
    check_device(lambda z: aten._unsafe_masked_index_put_accumulate(
        z, on(z, [True, True, False, True]), (on(z, [0, 1, 2, 3]),), on(z, [True, False, True, False])), z,
        must_run=["aten.index_put.default"])  # (its decomposition: masked_fill, then an accumulating index_put)


# ---------------------------------------------------------------------------------------------
# unique (eager kernels: sort on the device, one host read of the number of groups)

UNIQUE_INPUTS = [
    torch.tensor([3.0, NAN, 1.0, -0.0, 0.0, NAN, 1.0, 3.0]),
    torch.tensor(5.0),
    torch.zeros(0, 3),
    torch.randint(0, 4, (5, 6)).float(),
    torch.randint(0, 3, (7,)).bool(),
    torch.randint(-3, 3, (4, 5, 2)),
    torch.randn(6).bfloat16(),
]


@pytest.mark.parametrize("x", UNIQUE_INPUTS, ids=lambda x: f"{str(x.dtype)[6:]}{list(x.shape)}")
def test_device_unique(x):
    for ri in (True, False):
        for rc in (True, False):
            check_device(lambda x: aten._unique2(x, True, ri, rc), x, must_run=["aten._unique2.default"])
            check_device(lambda x: torch.unique_consecutive(x, return_inverse=ri, return_counts=rc), x,
                         must_run=["aten.unique_consecutive.default"])
    check_device(lambda x: torch.unique(x, sorted=False, return_inverse=True, return_counts=True), x,
                 must_run=["aten._unique2.default"])
    check_device(lambda x: aten._unique(x, True, True), x, must_run=["aten._unique.default"])


def test_device_unique_dim():
    # (NaN-holding slices are left out: the CPU sorts them with a comparator that is no strict order)
    for x in UNIQUE_INPUTS[3:]:
        for d in range(-1, x.dim()):
            check_device(lambda x: torch.unique(x, return_inverse=True, return_counts=True, dim=d), x,
                         must_run=["aten.unique_dim.default"])
            check_device(lambda x: torch.unique_consecutive(x, return_inverse=True, return_counts=True, dim=d), x,
                         must_run=["aten.unique_consecutive.default"])
    # rows wider than 8 elements are ordered by a scan of two-key sorts: many repeated rows here
    check_device(lambda x: torch.unique(x, return_inverse=True, return_counts=True, dim=0),
                 torch.randint(0, 2, (40, 12)), must_run=["aten.unique_dim.default"])
    x = torch.tensor([[1, 2], [1, 2], [0, 5], [1, 2]])
    check_device(lambda x: aten.unique_dim_consecutive(x, 0, True, True), x,
                 must_run=["aten.unique_dim_consecutive.default"])
    check_device(lambda x: torch.unique(x, dim=0, return_inverse=True), torch.zeros(0, 3),
                 must_run=["aten.unique_dim.default"])
    with pytest.raises(RuntimeError, match="0 sized dimensions"):
        torch.unique(torch.zeros(0, 3, device="neuron"), dim=1)
