"""This package's compiled-graph entries as PyTorch cache artifacts: `torch.compiler.save_cache_artifacts()`
carries every graph executable (and stored AOTAutograd graph) this process wrote or loaded, and `load_cache_artifacts()` in
another process (on another machine of the same platform and versions) writes them into its cache
folder, where the first call of the same compiled model finds them. Eager per-op entries are many and
small; they travel by copying the cache folder (entries hold no paths)."""
from __future__ import annotations

import dataclasses

from torch.compiler._cache import CacheArtifact, CacheArtifactFactory, CacheArtifactManager

TYPE = "neuron_executable"


@CacheArtifactFactory.register
@dataclasses.dataclass(frozen=True)
class NeuronExecutableArtifact(CacheArtifact):
    """key: the entry's digest; content: the whole entry (header, key, body), checked on import."""

    def populate_cache(self) -> None:
        from . import executable_cache  # the package imports this module: import it at call time

        executable_cache().import_entry(self.key, self.content)

    @staticmethod
    def type() -> str:
        return TYPE


def record(digest: str, data: bytes) -> None:
    CacheArtifactManager.record_artifact(TYPE, digest, data)
