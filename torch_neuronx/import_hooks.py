"""Run a function on a module right after it finishes importing, or at once if it has: how the
package adjusts modules it must not import itself (importing torch._dynamo here would add over a
second to `import torch`; safetensors may not be installed)."""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

_waiting: dict[str, list] = {}  # module name -> hooks to run on it once it is imported


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _waiting:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_run(module):
            exec_module(module)
            hooks = _waiting.pop(name, ())
            if not _waiting:
                sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]
            for hook in hooks:
                hook(module)

        spec.loader.exec_module = exec_and_run
        return spec


def after_import(name: str, hook, defined_last: str | None = None) -> None:
    """`hook(module)` once module `name` has finished importing: now if it has (it defines
    `defined_last`, the name its source defines last), else right after its import. A module being
    imported at this moment (an import cycle) is left alone: the caller installs again later."""
    module = sys.modules.get(name)
    if module is not None:
        if defined_last is None or hasattr(module, defined_last):
            hook(module)
        return
    hooks = _waiting.setdefault(name, [])
    if hook not in hooks:  # installing twice waits once
        hooks.append(hook)
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
