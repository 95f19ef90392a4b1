"""The distributions of op_db's random entries on neuron (machinery: opinfo_support.py, RANDOM_CHECKS).

Their OpInfo samples can only be compared by shape and dtype (the device draws from its own
generator); here each entry, in float32 and bfloat16, draws a large sample on the device from inputs
of its own and is checked against closed-form values of its distribution or against the CPU's own
draws: support, mean and variance, a Kolmogorov-Smirnov statistic or the frequencies (see
RANDOM_CHECKS for what each entry's check is). Each check must also reject the same op with its
results replaced by a constant: a check that cannot fail would prove nothing.
"""
from __future__ import annotations

import pytest
import torch

import opinfo_support as S


def _cases():
    by_name = S.entries_by_name()
    return [pytest.param(name, dtype, id=f"{name}-{S.DTYPE_NAMES[dtype]}")
            for name in S.RANDOM_OPS for dtype in S.sweep_dtypes(by_name[name], S.DISTRIBUTION_DTYPES)]


@pytest.mark.parametrize("name, dtype", _cases())
def test_distribution(name, dtype):
    S.check_distribution(S.entries_by_name()[name], dtype)


def test_every_random_entry_has_a_check():
    assert set(S.RANDOM_CHECKS) == set(S.RANDOM_OPS)


def _constant_like(x):
    if isinstance(x, torch.Tensor):
        return torch.full_like(x, x.flatten()[0].item()) if x.numel() else x
    if isinstance(x, (list, tuple)):
        return type(x)(_constant_like(v) for v in x)
    return x


class _Constant:
    """The entry's op, each tensor of its result replaced by its first element everywhere (right
    shape, dtype and device, wrong distribution)."""

    def __init__(self, op):
        self.op = op

    def __call__(self, *args, **kwargs):
        return _constant_like(self.op(*args, **kwargs))


@pytest.mark.parametrize("name", list(S.RANDOM_OPS))
def test_check_rejects_a_constant(name):
    op = S.entries_by_name()[name]
    with pytest.raises(S.Mismatch):
        S.check_distribution(_Constant(op), torch.float32, name)


def test_check_rejects_a_wrong_distribution():
    """Not only constants: uniform_ drawing from [a, (a + b) / 2), normal_ with the wrong std, dropout
    zeroing with the wrong probability, fractional max pooling with the same windows for every plane
    (valid poolings, but not random ones)."""
    by_name = S.entries_by_name()
    with pytest.raises(S.Mismatch, match="support|mean|Kolmogorov"):
        S.check_distribution(lambda x, a, b: x.uniform_(a, (a + b) / 2), torch.float32, "uniform")
    with pytest.raises(S.Mismatch, match="variance|Kolmogorov"):
        S.check_distribution(lambda x, m, s: x.normal_(m, 1.2 * s), torch.float32, "normal.in_place")
    dropout = by_name["nn.functional.dropout"]
    with pytest.raises(S.Mismatch, match="fraction dropped|support"):
        S.check_distribution(lambda x, p, training: dropout(x, p=p * 1.2 if training and p else p, training=training),
                             torch.float32, "nn.functional.dropout")
    pool = by_name["nn.functional.fractional_max_pool2d"]

    def fixed_windows(x, k, **kwargs):
        if "_random_samples" not in kwargs:
            kwargs["_random_samples"] = torch.full((x.shape[0], x.shape[1], 2), 0.5, dtype=x.dtype, device=x.device)
        return pool(x, k, **kwargs)

    with pytest.raises(S.Mismatch, match="frequency of a window sequence"):
        S.check_distribution(fixed_windows, torch.float32, "nn.functional.fractional_max_pool2d")
