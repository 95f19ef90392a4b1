"""Trainium targets as data: the published figures of each chip, and the logical core a process gets.

`TORCH_NEURONX_TARGET=trn1|trn2|trn3` makes every neuron core behave, where the package can make it,
as one logical NeuronCore of that chip (`NEURON_LOGICAL_NC_CONFIG` physical cores grouped into one, as
AWS's runtime reads it; default: the chip's): its memory capacity (`runtime.devices`), TorchNeuron's
64-bit dtype policy inside executables (`ops.target_policy`, called where every lowering is), and the
roofline the time estimates use (`runtime.costs`). Unset (the default), nothing changes.

Every figure is per chip, as AWS publishes it (SOURCES names where); a logical core gets its share:
`lnc / cores` of the chip's memory, bandwidths and peak rates. `TORCH_NEURONX_TARGET_FIGURES` overrides
any of them (`name=number,...`, per chip, in the units of FIELDS) for what a newer SDK or a measurement
says. Nothing else in the package knows a target's numbers.
"""
from __future__ import annotations

import dataclasses
import functools

from . import config

GiB = 2**30
TFLOPS = 1e12


@dataclasses.dataclass(frozen=True)
class Chip:
    """One Trainium chip's published figures (per chip, not per core)."""

    name: str
    core: str  # the NeuronCore generation
    cores: int  # physical NeuronCores per chip
    lnc_default: int  # NEURON_LOGICAL_NC_CONFIG when unset
    lnc_allowed: tuple  # the logical-core sizes the SDK supports
    hbm_bytes: float  # device memory
    hbm_bandwidth: float  # bytes/s
    dma_bandwidth: float  # bytes/s: what moves data between a chip's cores (their collectives)
    link_bandwidth: float  # bytes/s per chip, NeuronLink chip to chip
    peak_bf16: float  # dense FLOP/s for bf16/fp16/tf32 on the tensor engines
    peak_fp8: float  # dense FLOP/s for fp8
    peak_fp32: float  # dense FLOP/s for fp32
    vector_fp32: float  # FLOP/s of the vector engines (elementwise work), all cores
    launch_seconds: float  # the fixed cost of one executable's launch (an assumption: no published figure)
    collective_seconds: float  # the fixed cost of one collective (an assumption: no published figure)


# Where each figure comes from (AWS Neuron documentation, awsdocs-neuron.readthedocs-hosted.com):
SOURCES = {
    "trn1": ("about-neuron/arch/neuron-hardware/trainium.html (2 NeuronCore-v2; 190 FP16/BF16/cFP8/TF32 TFLOPS, "
             "47.5 FP32; 32 GiB at 820 GiB/s; 1 TB/s DMA) and trn1-arch.html (NeuronLink-v2 384 GiB/s per device "
             "on Trn1.32xlarge); neuron-core-v2.html (vector engine 2.3 FP32 TFLOPS per core); LNC: only 1 "
             "(compiler error NCC_EARG001)"),
    "trn2": ("about-neuron/arch/neuron-hardware/trainium2.html (8 NeuronCore-v3; 667 BF16/FP16/TF32 TFLOPS, "
             "1,299 FP8, 181 FP32; 96 GiB at 2.9 TB/s; 3.5 TB/s DMA; NeuronLink-v3 1.28 TB/s per chip); "
             "neuron-core-v3.html (vector engine 1 FP32 TFLOPS per core, from the Trainium3 page's comparison); "
             "logical-neuroncore-config.html (LNC 1 or 2, 4 logical cores per chip by default)"),
    "trn3": ("about-neuron/arch/neuron-hardware/trainium3.html (8 NeuronCore-v4; 671 BF16/FP16/TF32 TFLOPS, "
             "2,517 MXFP8, 183 FP32; 144 GiB at 4.9 TB/s; 4.9 TB/s DMA; NeuronLink-v4 2.56 TB/s per chip; vector "
             "engines 1.2 FP32 TFLOPS per core); LNC 1 or 2 (nki/get-started/about/lnc.html), default taken as "
             "Trn2's"),
    "launch": "no published figure: an assumed 15 us per executable launch and 10 us per collective",
}

CHIPS: dict[str, Chip] = {
    "trn1": Chip("trn1", "NeuronCore-v2", 2, 1, (1,), 32 * GiB, 820 * GiB, 1e12, 384 * GiB,
                 190 * TFLOPS, 190 * TFLOPS, 47.5 * TFLOPS, 2 * 2.3 * TFLOPS, 15e-6, 10e-6),
    "trn2": Chip("trn2", "NeuronCore-v3", 8, 2, (1, 2), 96 * GiB, 2.9e12, 3.5e12, 1.28e12,
                 667 * TFLOPS, 1299 * TFLOPS, 181 * TFLOPS, 8 * 1.0 * TFLOPS, 15e-6, 10e-6),
    "trn3": Chip("trn3", "NeuronCore-v4", 8, 2, (1, 2), 144 * GiB, 4.9e12, 4.9e12, 2.56e12,
                 671 * TFLOPS, 2517 * TFLOPS, 183 * TFLOPS, 8 * 1.2 * TFLOPS, 15e-6, 10e-6),
}

# the fields TORCH_NEURONX_TARGET_FIGURES may set, with their units
FIELDS = {
    "cores": "physical cores per chip", "hbm_bytes": "bytes per chip", "hbm_bandwidth": "bytes/s per chip",
    "dma_bandwidth": "bytes/s per chip", "link_bandwidth": "bytes/s per chip", "peak_bf16": "FLOP/s per chip",
    "peak_fp8": "FLOP/s per chip", "peak_fp32": "FLOP/s per chip", "vector_fp32": "FLOP/s per chip",
    "launch_seconds": "seconds", "collective_seconds": "seconds",
}


@dataclasses.dataclass(frozen=True)
class Target:
    """One logical NeuronCore of a chip: what a process's neuron:i is under TORCH_NEURONX_TARGET."""

    chip: Chip
    lnc: int  # physical cores per logical core

    @property
    def name(self) -> str:
        return self.chip.name

    @property
    def share(self) -> float:
        """The logical core's share of the chip."""
        return self.lnc / self.chip.cores

    @property
    def logical_cores(self) -> int:
        return self.chip.cores // self.lnc

    @property
    def memory_bytes(self) -> int:
        return int(self.chip.hbm_bytes * self.share)

    @property
    def hbm_bandwidth(self) -> float:
        return self.chip.hbm_bandwidth * self.share

    @property
    def collective_bandwidth(self) -> float:
        """Bytes/s one logical core moves in a collective with the chip's other cores (its share of the
        chip's DMA bandwidth; between chips NeuronLink is the bound, which a single chip does not see)."""
        return self.chip.dma_bandwidth * self.share

    def peak_flops(self, dtype_name: str) -> float:
        """The tensor engines' dense rate for a product in `dtype_name` (a numpy/jax dtype name)."""
        chip = self.chip
        if dtype_name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3", "float8_e4m3fnuz", "float8_e5m2fnuz"):
            rate = chip.peak_fp8
        elif dtype_name in ("bfloat16", "float16"):
            rate = chip.peak_bf16
        else:  # float32 (and what TorchNeuron narrows to it), integers on the same engines
            rate = chip.peak_fp32
        return rate * self.share

    @property
    def vector_flops(self) -> float:
        return self.chip.vector_fp32 * self.share

    def describe(self) -> str:
        return f"one {self.chip.name.capitalize()} NeuronCore (LNC={self.lnc})"


def current() -> Target | None:
    """The target this process emulates, or None (TORCH_NEURONX_TARGET unset)."""
    s = config.settings
    return _target(s.target, s.logical_nc_config, s.target_figures)


@functools.lru_cache(maxsize=16)
def _target(name: str | None, lnc: int | None, figures: tuple) -> Target | None:
    if name is None:
        return None
    for field, _value in figures:
        if field not in FIELDS:
            raise ValueError(f"TORCH_NEURONX_TARGET_FIGURES: {field!r} is not a target figure (one of {', '.join(FIELDS)})")
    chip = dataclasses.replace(CHIPS[name], **{f: int(v) if f == "cores" else v for f, v in figures})
    lnc = chip.lnc_default if lnc is None else lnc
    if lnc not in chip.lnc_allowed:
        allowed = " or ".join(str(n) for n in chip.lnc_allowed)
        raise ValueError(f"NEURON_LOGICAL_NC_CONFIG={lnc}: {name} supports a logical core of {allowed} physical cores")
    return Target(chip, lnc)


def key() -> tuple:
    """What of the target shapes executables (its 64-bit policy), as a value for their disk keys: the
    figures do not (they only turn cost analyses into times)."""
    target = current()
    return () if target is None else (("target", target.name),)


def target_named(name: str, lnc: int | None = None) -> Target:
    """The target `name` with this process's figure overrides (what estimates use without a target)."""
    return _target(name, lnc, config.settings.target_figures)
