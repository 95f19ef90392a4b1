"""The package's structure, checked from its source: the layers of ARCHITECTURE.md import only
downwards, only runtime/ talks to jax's device APIs, no package imports another's underscore names,
and no modules import each other in a circle."""
from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "torch_neuronx"
# bottom up; a layer may import the ones before it (the package root's modules sit around them)
LAYERS = ["runtime", "ops", "cache", "eager", "compile", "distributed"]
DEVICE_APIS = {"device_put", "default_device", "block_until_ready", "devices", "local_devices"}
# the shim's extension module, named as torch names its own; runtime/ wraps it for everyone else
SHIM = "torch_neuronx._C"
SHIM_USERS = {"runtime", ""}  # runtime/ and the package root (registration, torch.neuron)


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


MODULES = dict(_modules())


def _package(module: str) -> str:
    """The layer package of a module ('' for the package root's own modules)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (ROOT / parts[1]).is_dir()) else ""


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    is_package = MODULES[module].name == "__init__.py"
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str):
    """(imported module, names imported from it, line) for every import in `module`, at any depth."""
    tree = ast.parse(MODULES[module].read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            if not target.startswith("torch_neuronx"):
                continue
            names = [a.name for a in node.names]
            submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES or f"{target}.{n}" == SHIM]
            if submodules:
                for sub in submodules:
                    yield sub, [], node.lineno
            if len(submodules) < len(names):
                yield target, [n for n in names if f"{target}.{n}" not in submodules], node.lineno
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("torch_neuronx"):
                    yield a.name, [], node.lineno


def test_layers_import_only_downwards():
    bad = []
    for module in MODULES:
        mine = _package(module)
        if mine not in LAYERS:
            continue
        for target, _names, line in _imports(module):
            theirs = _package(target)
            if theirs in LAYERS and LAYERS.index(theirs) > LAYERS.index(mine):
                bad.append(f"{module}:{line} imports {target} (layer {theirs} is above {mine})")
    assert not bad, "\n".join(bad)


def _device_api_uses(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in DEVICE_APIS:
            found.append(f"{node.lineno} uses .{node.attr}")
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("jax"):
            found += [f"{node.lineno} imports {a.name} from {node.module}" for a in node.names if a.name in DEVICE_APIS]
    return found


def test_only_runtime_calls_jax_device_apis():
    bad = [f"{module}:{use}" for module, path in MODULES.items() if _package(module) != "runtime"
           for use in _device_api_uses(path.read_text())]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("source", ["import jax\njax.device_put(x)", "x.block_until_ready()",
                                    "from jax import devices", "with jax.default_device(d): pass"])
def test_the_device_api_check_finds_each_api(source):
    assert _device_api_uses(source)


def test_no_package_imports_another_packages_underscore_names():
    bad = []
    for module in MODULES:
        mine = _package(module)
        for target, names, line in _imports(module):
            if target == SHIM:
                if mine not in SHIM_USERS:
                    bad.append(f"{module}:{line} imports the shim ({SHIM}); runtime/ wraps it")
                continue
            if _package(target) == mine and target.startswith(f"torch_neuronx.{mine}" if mine else "torch_neuronx"):
                if mine or target.count(".") == 1:
                    continue  # within one package
            private = [p for p in target.split(".")[1:] if p.startswith("_")]
            private += [n for n in names if n.startswith("_")]
            if private:
                bad.append(f"{module}:{line} imports {', '.join(private)} from {target}")
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    graph = {m: sorted({t for t, _n, _l in _imports(m) if t in MODULES and t != m}) for m in MODULES}
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for t in graph[m]:
            if _is_package_parent(t, m):
                continue  # a module's own package's __init__ runs first anyway
            if state.get(t) == 1:
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in MODULES:
        if m not in state:
            visit(m)
    assert not cycles, "\n".join(cycles)


def _is_package_parent(target: str, module: str) -> bool:
    return MODULES[target].name == "__init__.py" and module.startswith(target + ".")


def _attribute_names(module: str):
    """(name, line) of every attribute read or written and every bare name in `module`."""
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Attribute):
            yield node.attr, node.lineno
        elif isinstance(node, ast.Name):
            yield node.id, node.lineno


def test_only_runtime_storage_touches_the_buffer_table():
    """The buffer table has one owner: the layers above call runtime.storage's API (buffer,
    buffers_of, set_buffer, set_buffers, replace), never the table itself."""
    owner = "torch_neuronx.runtime.storage"
    bad = [f"{m}:{line}" for m in MODULES if m != owner
           for name, line in _attribute_names(m) if name in ("_buffers", "BUFFERS")]
    assert not bad, f"the buffer table touched outside {owner}: {bad}"


_POSITIONAL_KEY = re.compile(r"\bkey\s*\[\s*(-?\d+|:\s*-?\d+|-?\d+\s*:)\s*\]")


def test_no_key_is_read_by_position():
    """Keys are `cache.Key` values with named fields (namespace, value, device)."""
    bad = [f"{m}:{n + 1}" for m, path in MODULES.items()
           for n, line in enumerate(path.read_text().splitlines()) if _POSITIONAL_KEY.search(line)]
    assert not bad, f"a key read by position: {bad}"


def test_every_compile_goes_through_runtime_executables():
    """One place compiles a lowered program (runtime.executables.compile_lowered: the platform's
    options, the memory given back after a large compile): nobody else calls `.compile()` on one."""
    owner = "torch_neuronx.runtime.executables"
    bad = []
    for m in MODULES:
        if m == owner:
            continue
        for node in ast.walk(ast.parse(MODULES[m].read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "compile"
                    and not (isinstance(node.func.value, ast.Name) and node.func.value.id in ("re", "torch"))):
                bad.append(f"{m}:{node.lineno}")
    assert not bad, f"compiled outside {owner}: {bad}"


@pytest.mark.parametrize("line, positional", [("x = key[1]", True), ("v = entry.key[:-1]", True),
                                                ("d = key[-1]", True), ("v = key.value", False)])
def test_the_positional_key_check_finds_each_form(line, positional):
    assert bool(_POSITIONAL_KEY.search(line)) == positional


CONFIG = "torch_neuronx.runtime.config"


def _environment_reads(path: pathlib.Path):
    """(line, what) for every read of a named environment variable in `path`: os.environ.get(...),
    os.environ[...] (not as an assignment's target), `... in os.environ`, os.getenv(...). A use of the
    whole environment (a child process's copy) names no variable and is not a read."""
    tree = ast.parse(path.read_text())

    def is_environ(node) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
            isinstance(node, ast.Name) and node.id == "environ")

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and is_environ(f.value) and f.attr in ("get", "setdefault", "pop"):
                yield node.lineno, f"environ.{f.attr}"
            elif (isinstance(f, ast.Attribute) and f.attr in ("getenv", "getenvb")) or (
                    isinstance(f, ast.Name) and f.id in ("getenv", "getenvb")):
                yield node.lineno, "getenv"
        elif isinstance(node, ast.Subscript) and is_environ(node.value) and isinstance(node.ctx, ast.Load):
            yield node.lineno, "environ[...]"
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            yield node.lineno, "... in environ"


def test_only_config_reads_environment_variables():
    """Every setting is read through runtime/config.py's table (one parser per type, one table in the docs)."""
    reads = [f"{m}:{line}: {what}" for m, path in MODULES.items() if m != CONFIG
             for line, what in _environment_reads(path)]
    assert not reads, "read these through runtime/config.py's settings:\n" + "\n".join(reads)


def test_one_boolean_parser():
    """The words of a flag are spelled once, in config's parser."""
    copies = [m for m, path in MODULES.items()
              if m != CONFIG and re.search(r"""["']false["']\s*,\s*["']no["']""", path.read_text())]
    assert not copies, f"a boolean parser of their own: {copies}"
