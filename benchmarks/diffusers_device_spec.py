"""diffusers' device spec for `neuron` (DIFFUSERS_TEST_DEVICE_SPEC, read by diffusers' tests/testing_utils.py):
the backend functions its tests call. diffusers' own table gives neuron a constant 0 for
max_memory_allocated and no peak reset, so its memory tests cannot pass without the real ones."""
import torch

DEVICE_NAME = "neuron"
MANUAL_SEED_FN = torch.manual_seed
EMPTY_CACHE_FN = torch.neuron.empty_cache
DEVICE_COUNT_FN = torch.neuron.device_count
SUPPORTS_TRAINING = True
RESET_PEAK_MEMORY_STATS_FN = torch.neuron.reset_peak_memory_stats
RESET_MAX_MEMORY_ALLOCATED_FN = torch.neuron.reset_max_memory_allocated
MAX_MEMORY_ALLOCATED_FN = torch.neuron.max_memory_allocated
