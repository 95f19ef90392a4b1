"""Meta kernels PyTorch lacks (the histograms, fractional_max_pool3d_backward, the linalg ones
`ops.linalg_decomp` defines, the fused optimizers' ones `ops.optim` defines): the executor, like
compiled graphs, learns result shapes and dtypes from meta."""
from __future__ import annotations

import torch

from ..ops.linalg_decomp import META_FUNCTIONS as LINALG_META_FUNCTIONS
from ..ops.optim import META_FUNCTIONS as OPTIM_META_FUNCTIONS

aten = torch.ops.aten


def _meta_hist_check(self, op):
    if self.dtype not in (torch.float32, torch.float64):
        raise RuntimeError(f'"{op}" not implemented for \'{str(self.dtype).removeprefix("torch.")}\'')


def _meta_histogram_bin_ct(self, bins=100, *, range=None, weight=None, density=False):
    _meta_hist_check(self, "histogram_cpu")
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    return self.new_empty((bins,)), self.new_empty((bins + 1,))


def _meta_histogram_bins_tensor(self, bins, *, weight=None, density=False):
    _meta_hist_check(self, "histogram_cpu")
    if bins.dim() != 1:
        raise RuntimeError(f"torch.histogram(): bins tensor should have one dimension, but got {bins.dim()} dimensions")
    if bins.numel() <= 0:
        raise RuntimeError("torch.histogram(): bins tensor should have at least 1 element, but got 0 elements")
    return self.new_empty((bins.numel() - 1,)), self.new_empty(bins.shape)


def _into(outs, results):
    """An out= overload's meta result: its out tensors given the shapes of the functional results (the
    executor warns of a resize as the CPU does)."""
    for out, r in zip(outs, results):
        if out.shape != r.shape:
            out.resize_(r.shape)
    return tuple(outs)


def _meta_histogram_bin_ct_out(self, bins=100, *, range=None, weight=None, density=False, hist, bin_edges):
    return _into((hist, bin_edges), _meta_histogram_bin_ct(self, bins, range=range, weight=weight, density=density))


def _meta_histogram_bins_tensor_out(self, bins, *, weight=None, density=False, hist, bin_edges):
    return _into((hist, bin_edges), _meta_histogram_bins_tensor(self, bins, weight=weight, density=density))


def _meta_histogramdd_check(self, bins, range):
    _meta_hist_check(self, "histogramdd")
    n = self.size(-1) if self.dim() else 1
    if len(bins) != n:
        raise RuntimeError("histogramdd: The size of bins must be equal to the innermost dimension of the input.")
    if range is not None and len(range) != 2 * n:
        raise RuntimeError(f"torch.histogramdd: for a {n}-dimensional histogram range should have {2 * n} "
                           f"elements, but got {len(range)}")


def _meta_histogramdd_bin_edges(self, bins, *, range=None, weight=None, density=False):
    _meta_histogramdd_check(self, bins, range)
    return [self.new_empty((int(b) + 1,)) for b in bins]


def _meta_histogramdd_from_bin_cts(self, bins, *, range=None, weight=None, density=False):
    _meta_histogramdd_check(self, bins, range)
    return self.new_empty(tuple(int(b) for b in bins))


def _meta_histogramdd_from_bin_tensors(self, bins, *, weight=None, density=False):
    _meta_hist_check(self, "histogramdd")
    return self.new_empty(tuple(b.numel() - 1 for b in bins))


def _meta_fractional_max_pool3d_backward(grad_output, self, kernel_size, output_size, indices):
    return self.new_empty(self.shape)


META_KERNELS = {
    aten.fractional_max_pool3d_backward.default: _meta_fractional_max_pool3d_backward,
    aten.histogram.bin_ct: _meta_histogram_bin_ct,
    aten.histogram.bins_tensor: _meta_histogram_bins_tensor,
    aten.histogram.bin_ct_out: _meta_histogram_bin_ct_out,
    aten.histogram.bins_tensor_out: _meta_histogram_bins_tensor_out,
    aten._histogramdd_bin_edges.default: _meta_histogramdd_bin_edges,
    aten._histogramdd_from_bin_cts.default: _meta_histogramdd_from_bin_cts,
    aten._histogramdd_from_bin_tensors.default: _meta_histogramdd_from_bin_tensors,
    **LINALG_META_FUNCTIONS,
    **OPTIM_META_FUNCTIONS,
}
