"""Fork safety, as torch.cuda: a child forked after the device runtime started raises at its first
touch of the device, naming the 'spawn' start method, instead of hanging on jax's missing threads; a
child forked before the runtime started, and forked workers that do CPU work only, are unaffected.

Every child is waited for with a timeout and killed if it is still running, so a hang fails the
test instead of stalling the run."""
from __future__ import annotations

import multiprocessing
import time
import traceback

import pytest
import torch

from helpers import run_python

CHILD_TIMEOUT = 20  # a hung child is killed after this (the error itself must arrive within FAST)
FAST = 5.0

_fork = multiprocessing.get_context("fork")

# jax warns at every fork of a process that started it: here that is the point
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")


@pytest.fixture(scope="module")
def inherited():
    """A neuron tensor made (so the runtime started) before the children below are forked."""
    t = torch.arange(6.0, device="neuron")
    assert (t + 1).cpu().tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    return t


def _touch(kind: str, t: torch.Tensor):
    if kind == "factory":
        torch.ones(3, device="neuron")
    elif kind == "empty":
        torch.empty(3, device="neuron")
    elif kind == "to":
        torch.ones(3).to("neuron")
    elif kind == "op":
        t + t
    elif kind == "read":
        t.cpu()
    elif kind == "item":
        t[1].item()
    elif kind == "synchronize":
        torch.neuron.synchronize()
    elif kind == "compile":
        torch.compile(lambda x: x * 2 + 1, backend="neuron")(t)
    else:
        raise AssertionError(kind)


def _child(kind, t, queue):
    start = time.monotonic()
    try:
        _touch(kind, t)
        outcome = ("no error", "", False)
    except BaseException as e:  # report everything: the parent judges
        outcome = (type(e).__name__, f"{e}\n{traceback.format_exc()}", isinstance(e, RuntimeError))
    queue.put((*outcome, time.monotonic() - start, torch.neuron._is_in_bad_fork()))


def _run_forked(target, *args):
    queue = _fork.Queue()
    p = _fork.Process(target=target, args=(*args, queue))
    p.start()
    p.join(CHILD_TIMEOUT)
    if p.is_alive():
        p.kill()
        p.join()
        pytest.fail(f"the forked child hung (killed after {CHILD_TIMEOUT} s)")
    assert p.exitcode == 0, f"the forked child died with exit code {p.exitcode}"
    return queue.get(timeout=5)


@pytest.mark.parametrize("kind", ["factory", "empty", "to", "op", "read", "item", "synchronize", "compile"])
def test_first_touch_in_a_bad_fork_raises_naming_spawn(inherited, kind):
    result = _run_forked(_child, kind, inherited)
    assert result[0] != "no error", f"{kind}: no error in a child forked after the runtime started"
    name, message, is_runtime_error, elapsed, bad_fork = result
    assert is_runtime_error, f"{kind}: {name} is not a RuntimeError: {message}"
    assert "forked subprocess" in message and "'spawn' start method" in message, message
    assert elapsed < FAST, f"{kind}: the error took {elapsed:.1f} s"
    assert bad_fork is True
    assert torch.neuron._is_in_bad_fork() is False  # the parent is not


# the parent waits for its child with a deadline and kills it if it hangs
_WAIT = (
    "def wait(pid, limit=20):\n"
    "    end = time.monotonic() + limit\n"
    "    while time.monotonic() < end:\n"
    "        done, status = os.waitpid(pid, os.WNOHANG)\n"
    "        if done:\n"
    "            return os.waitstatus_to_exitcode(status)\n"
    "        time.sleep(0.05)\n"
    "    os.kill(pid, signal.SIGKILL); os.waitpid(pid, 0)\n"
    "    return 'hung'\n"
)


def test_a_child_forked_before_the_runtime_started_uses_the_device():
    r = run_python(
        "import os, signal, time, torch\n"
        + _WAIT
        + "x = torch.linspace(-2, 2, 12).reshape(3, 4)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    try:\n"
        "        ok = not torch.neuron._is_in_bad_fork()\n"
        "        y = (x.to('neuron') @ x.t().to('neuron')).sin().cpu()\n"
        "        ok = ok and torch.allclose(y, (x @ x.t()).sin(), atol=1e-5)\n"
        "        torch.neuron.synchronize()\n"
        "    except BaseException:\n"
        "        import traceback; traceback.print_exc(); ok = False\n"
        "    os._exit(0 if ok else 3)\n"
        "print('child', wait(pid), 'parent', torch.neuron._is_in_bad_fork())\n",
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["child", "0", "parent", "False"], r.stdout + r.stderr


def test_a_child_that_frees_inherited_tensors_exits_cleanly(tmp_path):
    """The child drops the tensors it inherited and exits through the interpreter's full shutdown
    (not os._exit): neither the frees nor the shutdown may hang or crash. An empty executable cache
    makes the parent compile, so the child also inherits jax's compile thread pool (whose
    destructor, run at the child's exit, crashed it)."""
    r = run_python(
        "import gc, os, signal, sys, time, torch\n"
        + _WAIT
        + "ts = [torch.randn(64, device='neuron') for _ in range(8)]\n"
        "view = ts[0][2:10]\n"
        "ts[1].resize_(256)\n"
        "torch.neuron.synchronize()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    del ts, view; gc.collect()\n"
        "    sys.exit(0)\n"
        "code = wait(pid)\n"
        "print('child', code, 'parent still works', float((torch.ones(4, device='neuron') * 2).sum()))\n",
        timeout=60,
        TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["child", "0", "parent", "still", "works", "8.0"], r.stdout + r.stderr


class _Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.full((3,), float(i)) ** 2


def test_dataloader_with_forked_cpu_workers_in_a_process_using_neuron(inherited):
    loader = torch.utils.data.DataLoader(
        _Squares(), batch_size=4, num_workers=2, multiprocessing_context="fork", timeout=CHILD_TIMEOUT
    )
    total = torch.zeros(3, device="neuron")
    for batch in loader:
        total += batch.to("neuron").sum(0)
    expected = sum(float(i) ** 2 for i in range(16))
    assert total.cpu().tolist() == [expected] * 3
    assert torch.neuron._is_in_bad_fork() is False
