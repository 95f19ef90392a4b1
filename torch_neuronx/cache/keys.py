"""What names an executable on disk: the value key of the call or graph, behind everything else that
changes what XLA builds (the cache format, this package's code, torch's, jax's and jaxlib's versions,
the platform, its version and device kind, the CPU's instruction-set extensions, the XLA flags and jax
settings that reach a program). Nothing that does
not change the executable is in it: no device index (`ops.protocol.key_bytes` spells every neuron
device alike), no path, no process."""
from __future__ import annotations

import functools
import hashlib
import pathlib
from typing import NamedTuple

from ..ops import value_checks
from ..ops.protocol import key_bytes
from ..runtime import config, executables, native_kernels, targets

FORMAT = 2  # the entry format and the key's own layout: bump when either changes


class Key(NamedTuple):
    """What names an executable (or a record) in the cache: its namespace (the kind: "op", "run",
    "graph", "aot", "plan"), its value key (a tuple of plain values, the same in every process: what
    names it on disk, `entry_key`) and the device index it is loaded on (None: a device-free record).
    The memory layer holds one per device; the disk layer one for every device."""

    namespace: str
    value: tuple
    device: int | None

    def on(self, namespace: str) -> "Key":
        """The same value and device in another namespace (an op's output plan beside its executable)."""
        return tuple.__new__(Key, (namespace, self.value, self.device))

# jax settings that change the program a trace builds
_JAX_SETTINGS = ("jax_enable_x64", "jax_default_matmul_precision", "jax_default_prng_impl",
                 "jax_threefry_partitionable", "jax_numpy_rank_promotion", "jax_numpy_dtype_promotion",
                 "jax_use_shardy_partitioner")
# XLA flags that do not change a single-device executable
_IGNORED_FLAGS = ("--xla_force_host_platform_device_count",)


# the packages whose code shapes an executable or what is stored beside it (the cache's own format
# is FORMAT): editing the command line or the metrics leaves every entry valid
_SHAPING = ("runtime", "ops", "eager", "compile")


@functools.cache
def source_digest() -> str:
    """A digest of the Python sources that build executables: an edited lowering is a new key even
    when the version number did not move."""
    root = pathlib.Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted(p for package in _SHAPING for p in (root / package).rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch-neuronx")
    except PackageNotFoundError:
        return "unknown"


def xla_flags() -> tuple:
    flags = config.settings.xla_flags
    return tuple(sorted(f for f in flags if not f.startswith(_IGNORED_FLAGS)))


@functools.cache
def package_versions() -> tuple:
    """(name, version) of this package (with its source digest), torch, jax and jaxlib."""
    import jax
    import jaxlib
    import torch

    return (("torch_neuronx", package_version(), source_digest()), ("torch", str(torch.__version__)),
            ("jax", str(jax.__version__)), ("jaxlib", str(jaxlib.__version__)))


def jax_settings() -> tuple:
    import jax

    return tuple((name, str(getattr(jax.config, name, None))) for name in _JAX_SETTINGS)


def environment(platform: str, device_kind: str, versions: tuple | None = None) -> tuple:
    """Everything but the value key that an entry's key covers, as a value."""
    return (("format", FORMAT),) + (package_versions() if versions is None else versions) + (
        ("platform", platform), ("device_kind", device_kind)) + executables.built_for() + (
        ("xla_flags", xla_flags()), ("jax", jax_settings()),
        ("native_kernels", native_kernels.key()), ("value_checks", value_checks.ENABLED), ("target", targets.key()),
        ("opt_level", executables.opt_level()))


def entry_key(environment: tuple, namespace: str, value: tuple) -> bytes:
    """The bytes an entry is stored under (its digest names the file; the bytes are in its header):
    `key_bytes((environment, namespace, value))`, with the environment's part spelled once a process
    (a triple is spelled as its parts' spellings in a row, between its header and its end)."""
    return b"".join((b"tuple[3](", _spelled(environment), key_bytes(namespace), key_bytes(value), b");"))


@functools.lru_cache(maxsize=8)
def _spelled(environment: tuple) -> bytes:
    return key_bytes(environment)


def digest(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()
