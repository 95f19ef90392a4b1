"""Lowerings of ops/indexing.py (embedding, embedding bags, index.Tensor, index_put, gather, scatter*,
index_add, index_reduce, put, bool accumulation in index_add / index_put / scatter_reduce), and the
unique kernels (eager/kernels.py, data-dependent sizes):
each compared with PyTorch's CPU kernel as a pure jax function (tests/lowering_harness.py) and,
where the op reaches eager, the user-level call run on the neuron device vs the CPU with no CPU
fallback (tests/device_harness.py)."""
import math
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from device_harness import check_device  # noqa: E402
from helpers import randint, randn  # noqa: E402
from lowering_harness import check_lowering, chk, dev, run_lowering, tolerance  # noqa: E402
from tolerances import EXACT  # noqa: E402

warnings.filterwarnings("ignore", message="index_reduce.. is in beta")

aten = torch.ops.aten
NAN, INF = float("nan"), float("inf")


def _perm_index(shape, dim, size):
    """An index without duplicates along `dim` (so scatter's result is deterministic)."""
    n = shape[dim]
    idx = torch.stack([torch.randperm(size)[:n] for _ in range(math.prod(shape) // n)])
    return idx.reshape(*[s for i, s in enumerate(shape) if i != dim], n).movedim(-1, dim).contiguous()


def same(got, want):
    """Bit-exact, same dtype (no cast)."""
    assert got.shape == want.shape, (got.shape, want.shape)
    torch.testing.assert_close(got, want, **EXACT, equal_nan=True)


def _bag_reference(weight, indices, offsets, mode, psw, include_last_offset, padding_idx):
    """(offset2bag, bag_size) the neuron lowering returns: meta's (non-CPU) shapes, CPU values."""
    n = indices.shape[0]
    bags = offsets.shape[0] - (1 if include_last_offset else 0)
    o2b = torch.zeros(n, dtype=torch.int64)
    for b in range(bags):
        o2b[offsets[b]:] = b
    size = torch.zeros(offsets.shape[0], dtype=torch.int64)
    for i in range(n):
        if padding_idx < 0 or indices[i] != padding_idx:
            size[o2b[i]] += 1
    return o2b, size


UNIQUE_INPUTS = [
    torch.tensor([3.0, NAN, 1.0, -0.0, 0.0, NAN, 1.0, 3.0]),
    torch.tensor(5.0),
    torch.zeros(0, 3),
    torch.randint(0, 4, (5, 6)).float(),
    torch.randint(0, 3, (7,)).bool(),
    torch.randint(-3, 3, (4, 5, 2)),
    torch.randn(6).bfloat16(),
]


# ---------------------------------------------------------------------------------------------
# gathers and scatters


def test_embedding():
    w = randn(10, 4)
    idx = torch.tensor([[0, 3, 9], [3, 3, 1]])
    chk(aten.embedding.default, w, idx)
    chk(aten.embedding.default, w, idx, 3)
    chk(aten.embedding.default, w.bfloat16(), idx.int())
    chk(aten.embedding.default, w, torch.tensor(7))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embedding_dense_backward(dtype):
    idx = torch.tensor([[0, 3, 9, 3], [3, 3, 1, 0]])
    g = randn(2, 4, 5, dtype=dtype)
    for padding_idx in (-1, 3):
        for freq in (False, True):
            chk(aten.embedding_dense_backward.default, g, idx, 10, padding_idx, freq, family="accumulate_16bit")


def test_index_tensor():
    x = randn(5, 6, 7)
    i = torch.tensor([4, -1, 0])
    j = torch.tensor([[1], [2]])
    chk(aten.index.Tensor, x, [i])
    chk(aten.index.Tensor, x, [i, torch.tensor([0, 5, 5])])
    chk(aten.index.Tensor, x, [None, i])
    chk(aten.index.Tensor, x, [None, None, torch.tensor([6, 0], dtype=torch.int32)])
    chk(aten.index.Tensor, x, [j, i])  # broadcast index tensors
    chk(aten.index.Tensor, x, [i, None, torch.tensor([1, 2, 3])])  # advanced dims go first
    chk(aten.index.Tensor, x, [None, j, i])
    chk(aten.index.Tensor, randint(4, 4, lo=-10, hi=10, dtype=torch.int64), [torch.tensor(2)])
    chk(aten.index.Tensor, x.bfloat16(), [torch.tensor([[0, 1], [2, 3]])])
    with pytest.raises(NotImplementedError, match="mask"):
        run_lowering(aten.index.Tensor, x, [torch.tensor([True, False, True, False, True])])


def test_index_put():
    x = randn(5, 6)
    i = torch.tensor([4, 0, 2])
    chk(aten.index_put.default, x, [i], randn(3, 6))
    chk(aten.index_put.default, x, [i], randn(6))  # broadcast values
    chk(aten.index_put.default, x, [i, torch.tensor([1, -1, 3])], randn(3))
    chk(aten.index_put.default, x, [None, torch.tensor([5, 0])], randn(5, 2))
    chk(aten.index_put.default, x, [None, torch.tensor([5, 0])], torch.tensor(3.0))
    dup = torch.tensor([1, 1, 3, 1])
    chk(aten.index_put.default, x, [dup], randn(4, 6), True)
    chk(aten.index_put.default, x, [dup, torch.tensor([0, 0, 2, 0])], randn(4), True)
    chk(aten.index_put.default, x.bfloat16(), [dup], randn(4, 6).bfloat16(), True, family="accumulate_16bit")
    chk(aten.index_put.default, randint(5, 6, lo=-10, hi=10, dtype=torch.int64), [i],
        randint(3, 6, lo=-10, hi=10, dtype=torch.int64), True)
    chk(aten.index_put.default, randn(3, 4, 5), [torch.tensor([[0], [2]]), None, torch.tensor([1, 4])], randn(2, 2, 4))


def test_index_put_bool_mask():
    x = randn(4, 5)
    m = x > 0
    k = int(m.sum())
    chk(aten.index_put.default, x, [m], torch.tensor(0.0))
    chk(aten.index_put.default, x, [m], torch.tensor(2.0), True)
    chk(aten.index_put.default, x, [m], randn(k))  # one value per True element
    chk(aten.index_put.default, x, [m], randn(k), True)
    rows = torch.tensor([True, False, True, True])
    chk(aten.index_put.default, x, [rows], randn(5))
    chk(aten.index_put.default, x, [rows], randn(3, 5))
    cols = torch.tensor([False, True, True, False, True])
    chk(aten.index_put.default, x, [None, cols], randn(4, 1))
    chk(aten.index_put.default, x, [None, cols], randn(4, 3), True)
    y = randn(2, 3, 4)
    chk(aten.index_put.default, y, [None, y[0] > 0], torch.tensor(-1.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_gather(dtype):
    x = (randn(4, 5, 6) * 10).to(dtype)
    chk(aten.gather.default, x, 1, torch.randint(0, 5, (4, 3, 6)))
    chk(aten.gather.default, x, -1, torch.randint(0, 6, (2, 5, 9)))  # index smaller in other dims
    chk(aten.gather.default, x, 0, torch.randint(0, 4, (1, 2, 3)))
    chk(aten.gather.default, x, 0, torch.zeros(0, 5, 6, dtype=torch.int64))
    chk(aten.gather.default, torch.tensor(3.0), 0, torch.tensor(0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_scatter(dtype):
    x = (randn(4, 6, 5) * 10).to(dtype)
    idx = _perm_index((4, 3, 5), 1, 6)
    src = (randn(4, 4, 5) * 10).to(dtype)  # larger than index: cut
    chk(aten.scatter.src, x, 1, idx, src)
    chk(aten.scatter.value, x, 1, idx, 2)
    dup = torch.randint(0, 6, (4, 7, 5))
    src2 = (randn(4, 7, 5) * 10).to(dtype)
    chk(aten.scatter_add.default, x, 1, dup, src2)
    small = ((randn(4, 7, 5) * 0.5 + 1).to(dtype) if dtype.is_floating_point
             else randint(4, 7, 5, lo=-2, hi=2, dtype=torch.int64).to(dtype))
    chk(aten.scatter.reduce, x, 1, dup, small, reduce="multiply")
    if dtype == torch.float32:
        chk(aten.scatter.src, x, -1, _perm_index((2, 4, 3), 2, 5), src)
        chk(aten.scatter.src, x, 0, torch.zeros(0, 6, 5, dtype=torch.int64), src)
        chk(aten.scatter.reduce, x, 1, dup, src2, reduce="add")
        chk(aten.scatter.value_reduce, x, 1, dup, 3, reduce="add")
        chk(aten.scatter.value_reduce, x, 1, dup, 2, reduce="multiply")
        chk(aten.scatter.src, torch.tensor(1.0), 0, torch.tensor(0), torch.tensor(5.0))


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce(reduce):
    idx = torch.randint(0, 6, (4, 9))
    idx[:, 0] = 2
    idx[idx == 5] = 4  # column 5 is never hit: it keeps self in every mode
    for dtype, include_self in (
        (torch.float32, True), (torch.float32, False), (torch.bfloat16, False), (torch.int64, False), (torch.int64, True)
    ):
        x = (randn(4, 6) * 5).to(dtype)
        src = (randn(4, 9) * 5).to(dtype)
        if reduce == "prod":
            src = ((randn(4, 9) * 0.5 + 1).to(dtype) if dtype.is_floating_point
                   else randint(4, 9, lo=-3, hi=3, dtype=torch.int64))
        chk(aten.scatter_reduce.two, x, 1, idx, src, reduce, include_self=include_self)
    chk(aten.scatter_reduce.two, x.float(), 0, idx[:3, :6] % 4, src.float(), reduce)


def test_scatter_reduce_nan():
    x = torch.tensor([1.0, 2.0, 3.0])
    idx = torch.tensor([0, 0, 2])
    src = torch.tensor([NAN, 5.0, -1.0])
    for reduce in ("amax", "amin"):
        chk(aten.scatter_reduce.two, x, 0, idx, src, reduce)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_index_add(dtype):
    x = (randn(5, 4, 3) * 5).to(dtype)
    idx = torch.tensor([0, 4, 0, 2])
    chk(aten.index_add.default, x, 0, idx, (randn(4, 4, 3) * 5).to(dtype), family="accumulate_16bit")
    chk(aten.index_add.default, x, -2, torch.tensor([3, 3]), (randn(5, 2, 3) * 5).to(dtype), alpha=2,
        family="accumulate_16bit")
    chk(aten.index_add.default, x, 2, torch.tensor([1], dtype=torch.int32), (randn(5, 4, 1) * 5).to(dtype))
    chk(aten.index_add.default, torch.tensor(1.0).to(dtype), 0, torch.tensor([0]), torch.tensor(2.0).to(dtype))


@pytest.mark.parametrize("case", [
    dict(mode=0), dict(mode=1), dict(mode=2), dict(mode=0, psw=True), dict(mode=1, padding_idx=3),
    dict(mode=2, padding_idx=3), dict(mode=0, include_last_offset=True), dict(mode=1, include_last_offset=True),
    dict(mode=2, include_last_offset=True, padding_idx=1),
])
def test_embedding_bag(case):
    mode = case["mode"]
    include_last = case.get("include_last_offset", False)
    pad = case.get("padding_idx", -1)
    weight = torch.randn(10, 4)
    weight[2, 1] = weight[5, 1]  # a tie for max
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 3, 5, 1])
    offsets = torch.tensor([0, 3, 3, 8, 11]) if include_last else torch.tensor([0, 3, 3, 8])
    psw = torch.randn(indices.shape[0]) if case.get("psw") else None
    ops = [aten._embedding_bag.default] + ([aten._embedding_bag_forward_only.default] if mode == 0 else [])
    for op in ops:
        want = op(weight, indices, offsets, False, mode, False, psw, include_last, pad)
        got = run_lowering(op, weight, indices, offsets, False, mode, False, psw, include_last, pad)
        torch.testing.assert_close(got[0], want[0], **tolerance(want[0], family="embedding_bag"))
        o2b, size = _bag_reference(weight, indices, offsets, mode, psw, include_last, pad)
        same(got[1], o2b)
        same(got[2], size)
        if mode == 2:
            same(got[3], want[3])
        else:
            assert got[3].shape == (0,)
        if want[1].numel():
            same(got[1], want[1])
        if mode != 0:
            same(got[2][: want[2].shape[0]], want[2])
    if case.get("include_last_offset"):
        return
    bf = run_lowering(aten._embedding_bag.default, weight.to(torch.bfloat16), indices, offsets, False, mode, False,
                      None if psw is None else psw.to(torch.bfloat16), include_last, pad)
    want = aten._embedding_bag.default(weight.to(torch.bfloat16), indices, offsets, False, mode, False,
                                       None if psw is None else psw.to(torch.bfloat16), include_last, pad)
    torch.testing.assert_close(bf[0], want[0])


def test_embedding_bag_device():
    weight = torch.randn(20, 6)
    idx = torch.randint(0, 20, (17,))
    off = torch.tensor([0, 4, 4, 10])
    for mode in ("sum", "mean", "max"):
        dev(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode), weight, idx, off,
            must_run="aten._embedding_bag_forward_only.default", family="embedding_bag")
    dev(lambda w, i: F.embedding_bag(i, w, mode="mean"), weight, idx[:16].reshape(4, 4),
        must_run="aten._embedding_bag_forward_only.default", family="embedding_bag")
    dev(lambda w, i, o, p: F.embedding_bag(i, w, o, per_sample_weights=p, mode="sum"), weight, idx, off,
        torch.randn(17), must_run="aten._embedding_bag_forward_only.default", family="embedding_bag")
    dev(lambda w, i, o: F.embedding_bag(i, w, o, mode="mean", padding_idx=idx[0].item()), weight.to(torch.bfloat16),
        idx, off, must_run="aten._embedding_bag_forward_only.default")
    w = weight.clone().requires_grad_(False)
    dev(lambda w, i, o: torch.nn.EmbeddingBag.from_pretrained(w, mode="max")(i, o), w, idx, off,
        must_run="aten._embedding_bag_forward_only.default")
    with pytest.raises(RuntimeError, match="offsets\\[0\\] has to be 0"):
        F.embedding_bag(idx.to("neuron"), weight.to("neuron"), torch.tensor([1, 4]).to("neuron")).cpu()


def test_embedding_bag_training_device():
    weight = torch.randn(12, 3)
    idx = torch.randint(0, 12, (9,))
    off = torch.tensor([0, 2, 7])

    def fwd(w, i, o):
        w = w.clone().requires_grad_(True)
        return F.embedding_bag(i, w, o, mode="mean")

    dev(fwd, weight, idx, off, must_run="aten._embedding_bag.default", allow_fallback=(), family="embedding_bag")


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
