"""Random state: a neuron generator's (seed, offset) as the words a program turns into a PRNG key.

Every random op (eager) or random graph (compiled) takes one draw: the generator's seed and its
offset, which the draw advances by one. Inside the traced program `prng_key` makes the threefry key
of those words, so the same (seed, offset) gives the same numbers in eager and compiled mode.
"""
from __future__ import annotations

import numpy as np
import torch

from .lazy_jax import jax

# what a draw looks like while a program is traced (its values do not matter)
PROBE_WORDS = np.zeros(4, np.uint32)


def draw(generator, device: int) -> np.ndarray:
    """Advance `generator` (None: neuron:device's default) by one draw and return its words:
    seed hi, seed lo, offset hi, offset lo."""
    gen = generator if generator is not None else torch.neuron.default_generators[device]
    offset = gen.get_offset()
    gen.set_offset(offset + 1)
    seed = gen.initial_seed() & 0xFFFFFFFFFFFFFFFF
    return np.array([seed >> 32, seed & 0xFFFFFFFF, offset >> 32, offset & 0xFFFFFFFF], np.uint32)


def prng_key(words):
    """The PRNG key of a draw's words, inside a traced program."""
    key = jax.random.wrap_key_data(words[:2], impl="threefry2x32")
    return jax.random.fold_in(jax.random.fold_in(key, words[2]), words[3])
