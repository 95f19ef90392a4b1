"""Index ops over many index lengths (eager/index_lengths.py): once a call pattern has met more than a
few lengths, new lengths run at buckets. Every case loops over many lengths, compares each step with
the CPU exactly, and counts the executables compiled: bounded by the buckets, not the lengths."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402

from helpers import randn  # noqa: E402
from torch_neuronx import metrics  # noqa: E402
from torch_neuronx.eager import index_lengths  # noqa: E402

DEV = "neuron"
LENGTHS = list(range(1, 13)) + [16, 17, 32, 33, 300, 1025, 1500]
FEW = 4  # TORCH_NEURONX_INDEX_LENGTH_BUCKETS's default
# the executables a loop over LENGTHS may compile: the first FEW exact lengths, then one per bucket
BOUND = FEW + len({index_lengths.bucket(n) for n in LENGTHS})


@pytest.fixture(autouse=True)
def fresh_patterns():
    index_lengths.clear()
    yield
    index_lengths.clear()


def _compiled() -> int:
    """Executables got so far: compiled, or loaded from the disk cache (a warm run's)."""
    kinds = metrics.executables_by_kind()
    return sum(kinds["compiled"].values()) + kinds["loaded"].get("op", 0) + kinds["loaded"].get("run", 0)


def _values(shape, dtype, g):
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(-5, 5, shape, generator=g, dtype=dtype)
    return torch.randn(shape, generator=g).to(dtype)


def test_buckets():
    assert [index_lengths.bucket(n) for n in (1, 16, 17, 33, 1024, 1025, 1088, 1089, 2048, 3000)] == \
        [16, 16, 32, 64, 1024, 1088, 1088, 1152, 2048, 3072]
    for n in range(1, 5000):
        b = index_lengths.bucket(n)
        assert b >= n and (n <= 1024 or b - n < n / 16), n


def _unique_positions(n, sizes, g):
    """Per indexed dimension, n index values naming n distinct positions (about half of them negative,
    counted from the end): set with duplicates is undefined in PyTorch (its CPU and ours may differ)."""
    flat = torch.randperm(int(torch.tensor(sizes).prod()), generator=g)[:n]
    out = []
    for size in reversed(sizes):
        i = flat % size
        out.append(torch.where(torch.rand(n, generator=g) < 0.5, i - size, i))
        flat = flat // size
    return out[::-1]


PUTS = [
    # (name, self shape, where the indices stand (None: a full slice), the indexed sizes, values shape(n))
    ("rows", (2000, 4), (0,), lambda n: (n, 4)),
    ("two indices", (50, 40, 3), (0, 1), lambda n: (n, 3)),
    ("after a slice", (3, 2000), (None, 1), lambda n: (3, n)),
    ("apart", (60, 2, 40), (0, None, 2), lambda n: (n, 2)),
    ("broadcast values", (2000, 4), (0,), lambda n: (4,)),
    ("one value", (2000,), (0,), lambda n: ()),
]


# host indices for every case; device ones (padded through the host) for two
PUT_CASES = [pytest.param(c, a, w, id=f"{w}-{c[0]}-{'accumulate' if a else 'set'}")
             for w in ("host", "device") for c in PUTS for a in (True, False) if w == "host" or c[0] in ("rows", "apart")]


@pytest.mark.parametrize("case,accumulate,where", PUT_CASES)
def test_index_put_over_many_lengths(case, accumulate, where):
    _, shape, places, values_shape = case
    g = torch.Generator().manual_seed(0)
    want = randn(*shape, seed=2)
    got = want.to(DEV)
    before = _compiled()
    tol = dict(rtol=1e-6, atol=1e-5) if accumulate else dict(rtol=0, atol=0)
    for n in LENGTHS:
        positions = iter(_unique_positions(n, [shape[d] for d in places if d is not None], g))
        key = tuple(None if d is None else next(positions) for d in places)
        values = _values(values_shape(n), torch.float32, g)
        torch.ops.aten.index_put_(want, list(key), values, accumulate)
        torch.ops.aten.index_put_(got, [k if k is None or where == "host" else k.to(DEV) for k in key],
                                  values.to(DEV), accumulate)
        if n % 7 == 0:
            torch.testing.assert_close(got.cpu(), want, **tol)
    torch.testing.assert_close(got.cpu(), want, **tol)
    assert _compiled() - before <= BOUND, (_compiled() - before, BOUND)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int32, torch.bool, torch.float16])
def test_index_put_accumulate_in_every_kind_of_dtype(dtype, monkeypatch):
    """Bucketed, the result is the exact path's bit for bit (16-bit floats add in float32 and round once
    on both, where the CPU rounds at each duplicate: within the dtype's tolerance of it)."""
    def loop():
        g = torch.Generator().manual_seed(1)
        want = _values((300, 2), dtype, g)
        got = want.to(DEV)
        for n in range(1, 16):
            idx = torch.randint(0, 300, (n,), generator=g)
            v = _values((n, 2), dtype, g)
            want.index_put_((idx,), v, accumulate=True)
            got.index_put_((idx.to(DEV),), v.to(DEV), accumulate=True)
        return got.cpu(), want

    got, want = loop()
    torch.testing.assert_close(got, want, **(dict(rtol=1.6e-2, atol=3e-2) if dtype.is_floating_point else dict(rtol=0, atol=0)))
    monkeypatch.setenv("TORCH_NEURONX_INDEX_LENGTH_BUCKETS", "0")
    exact, _ = loop()
    assert torch.equal(got, exact)


def test_padding_keeps_negative_zero_and_nan():
    """The accumulating pad adds -0.0: a -0.0 the padding's index lands on stays -0.0."""
    want = torch.full((8,), -0.0)
    want[3] = float("nan")
    got = want.to(DEV)
    for n in range(1, 12):
        idx = torch.full((n,), 5)  # the padding repeats index 5
        v = torch.full((n,), -0.0)
        want.index_put_((idx,), v, accumulate=True)
        got.index_put_((idx.to(DEV),), v.to(DEV), accumulate=True)
    out = got.cpu()
    assert torch.equal(torch.signbit(out), torch.signbit(want)) and torch.isnan(out[3])


def test_padding_repeats_a_set_s_last_write():
    """Set with distinct indices: the padding writes the last value again, where it was written."""
    want = torch.zeros(3000)
    got = want.to(DEV)
    g = torch.Generator().manual_seed(9)
    for n in range(1, 40):
        idx = torch.randperm(3000, generator=g)[:n]
        v = torch.randn(n, generator=g)
        want[idx] = v
        got[idx.to(DEV)] = v.to(DEV)
        assert torch.equal(got.cpu(), want), n


@pytest.mark.parametrize("case", ["rows", "two indices", "apart", "after a slice"])
def test_index_over_many_lengths(case):
    g = torch.Generator().manual_seed(3)
    x = randn(60, 5, 70, seed=4)
    dx = x.to(DEV)
    before = _compiled()
    # (after a slice, the index axis is the result's second: a narrowed bucket would not be contiguous as
    # the CPU's result is, so those run exact: a few lengths checked)
    for n in LENGTHS if case != "after a slice" else range(1, 8):
        i = torch.randint(-60, 60, (n,), generator=g)
        j = torch.randint(0, 70, (n,), generator=g)
        key = {"rows": (i,), "two indices": (i, torch.randint(0, 5, (n,), generator=g)), "apart": (i, slice(None), j),
               "after a slice": (slice(None), torch.randint(0, 5, (n,), generator=g))}[case]
        want = x[key]
        got = dx[tuple(k if isinstance(k, slice) else k.to(DEV) for k in key)]
        assert got.shape == want.shape and got.is_contiguous() == want.is_contiguous()
        assert torch.equal(got.cpu(), want), n
    if case != "after a slice":
        assert _compiled() - before <= BOUND, _compiled() - before


def test_index_results_count_as_the_cpu_s_then_bucket():
    g = torch.Generator().manual_seed(5)
    x = randn(500, 8, seed=6)
    dx = x.to(DEV)
    before = _compiled()
    for n in LENGTHS:
        i = torch.randint(0, 500, (n,), generator=g)
        got = dx[i]  # host indices: padded on the host, no device read
        assert torch.equal(got.cpu(), x[i]) and torch.equal((got * 2).cpu(), x[i] * 2)  # a view's reads
    assert _compiled() - before <= BOUND + len(LENGTHS)  # (the product: one per length)


def test_masks_and_nonzero_over_many_counts():
    """x[mask], masked_select and nonzero with a new count each step: once the pattern buckets, a step
    whose count falls in a bucket met before compiles nothing."""
    g = torch.Generator().manual_seed(7)
    x = randn(40, 30, seed=8)
    dx = x.to(DEV)
    met = set()
    for step in range(16):
        before = _compiled()
        mask = torch.rand(40, 30, generator=g) < (step + 1) / 17
        dmask = mask.to(DEV)
        assert torch.equal(dx[dmask].cpu(), x[mask])
        assert torch.equal(torch.masked_select(dx, dmask).cpu(), torch.masked_select(x, mask))
        nz, want = torch.nonzero(dmask), torch.nonzero(mask)
        assert nz.shape == want.shape and nz.is_contiguous() == want.is_contiguous()  # (column-major on both)
        assert torch.equal(nz.cpu(), want)
        size = index_lengths.bucket(int(mask.sum()))
        if step > FEW and size in met:
            assert _compiled() == before, step
        met.add(size)


def test_an_out_of_range_index_in_a_bucketed_call_raises_the_cpu_s_error():
    x = torch.zeros(10, device=DEV)
    for n in range(1, 8):
        x.index_put_((torch.arange(n) % 10,), torch.ones(n, device=DEV), accumulate=True)
    bad = torch.tensor([1, 2, 12])
    with pytest.raises(IndexError, match="index 12 is out of bounds for dimension 0 with size 10"):
        x.index_put_((bad,), torch.ones(3, device=DEV), accumulate=True)
        x.cpu()
    with pytest.raises(IndexError, match="index -11 is out of bounds for dimension 0 with size 10"):
        x[torch.tensor([0, -11])].cpu()
    with pytest.raises(RuntimeError, match="shape mismatch"):  # values that do not broadcast: the exact path
        x.index_put_((torch.arange(5),), torch.ones(3, device=DEV))


def test_zero_turns_buckets_off(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_INDEX_LENGTH_BUCKETS", "0")
    x = torch.zeros(100, device=DEV)
    before = _compiled()
    for n in range(1, 12):
        x.index_put_((torch.arange(n),), torch.ones(n, device=DEV), accumulate=True)
    assert _compiled() - before >= 11
    assert torch.equal(x.cpu()[:11], torch.arange(11, 0, -1, dtype=torch.float32))


def test_index_select_over_many_lengths():
    g = torch.Generator().manual_seed(10)
    x = randn(300, 6, seed=11)
    dx = x.to(DEV)
    before = _compiled()
    for n in LENGTHS:
        i = torch.randint(0, 300, (n,), generator=g)
        got, want = dx.index_select(0, i.to(DEV)), x.index_select(0, i)
        assert got.shape == want.shape and got.is_contiguous() and torch.equal(got.cpu(), want), n
        assert torch.equal(dx.index_select(1, i[:2].remainder(6).to(DEV)).cpu(), x.index_select(1, i[:2] % 6))
    assert _compiled() - before <= BOUND + 3


@pytest.mark.parametrize("dtype,alpha", [(torch.float32, -2.0), (torch.float32, 0.5), (torch.int64, 3),
                                         (torch.bfloat16, 1)])
def test_index_add_over_many_lengths(dtype, alpha, monkeypatch):
    """Along a middle dimension; a negative alpha's padding still adds -0.0 (a -0.0 stays); bucketed
    results are the exact path's bit for bit."""
    def loop():
        index_lengths.clear()
        g = torch.Generator().manual_seed(12)
        want = _values((3, 200, 2), dtype, g)
        if dtype.is_floating_point:
            want[:, -1] = -0.0  # the padding's index lands on the last position of some steps
        got = want.to(DEV)
        for n in range(1, 16):
            i = torch.randint(0, 200, (n - 1,), generator=g)
            i = torch.cat([i, torch.tensor([199])])
            src = _values((3, n, 2), dtype, g)
            if dtype.is_floating_point:
                src[:, -1] = -0.0
            want.index_add_(1, i, src, alpha=alpha)
            got.index_add_(1, i.to(DEV), src.to(DEV), alpha=alpha)
        return got.cpu(), want

    got, want = loop()
    torch.testing.assert_close(got, want, **{torch.int64: dict(rtol=0, atol=0), torch.bfloat16: dict(rtol=1.6e-2, atol=3e-2)}
                               .get(dtype, {}))
    if dtype.is_floating_point:
        assert torch.equal(torch.signbit(got[:, -1]), torch.signbit(want[:, -1]))
    monkeypatch.setenv("TORCH_NEURONX_INDEX_LENGTH_BUCKETS", "0")
    exact, _ = loop()
    assert torch.equal(got, exact)


def test_a_non_finite_alpha_runs_exact():
    x = torch.zeros(5, 40)
    dx = x.to(DEV)
    for n in range(1, 10):
        i, src = torch.arange(n), torch.ones(5, n)
        x.index_add_(1, i, src, alpha=float("inf"))
        dx.index_add_(1, i.to(DEV), src.to(DEV), alpha=float("inf"))
    assert torch.equal(dx.cpu(), x)  # (padding zeros times inf would have made NaN)


def test_bucketed_calls_are_counted():
    metrics.clear_op_tracking()
    x = torch.zeros(100, device=DEV)
    for n in range(1, 9):
        x.index_put_((torch.arange(n),), torch.ones(n, device=DEV), accumulate=True)
    assert metrics.index_buckets() == {"aten.index_put_.default": 8 - FEW}
    assert f"aten.index_put_.default {8 - FEW} calls" in metrics.report()
