"""The page's examples (examples/eager.py, compiled.py), run as a user runs them: `python
examples/eager.py ...`, at 64x64 and 2 steps, each writing its output.png. Each image is compared with
the same pipeline (the folder the example loaded, bfloat16 as the page loads it) run on the CPU with
the same seed. The third, tensor_parallel_neuron.py, runs on every rank of tests/test_tensor_parallel.py's
torchrun launch (the same bfloat16 pipeline that file checks: one launch for both), within the same bound.

Metric: the PNG's pixels (0..255) against the CPU's, relative ||neuron - cpu|| / ||cpu||. Bound 2e-2:
bfloat16's own cost on this tiny random-weight pipeline is ~8e-3 (the CPU's bfloat16 image vs its
float32 one), and neuron measures ~8e-3 from the CPU's bfloat16 image (eager, compiled and tensor
parallel alike; see test_pipeline.py for where that comes from).

eager.py runs without --model: it builds the tiny FLUX.2-klein itself (page_args.tiny_model_folder,
under TMPDIR, which the test points at its own folder), as a user's first run does. custom_kernel.py (FLUX.2's
q/k RMSNorm as a jax kernel) runs at a small size and checks itself against the CPU."""
import os
import pathlib
import sys

import numpy as np
import pytest
import torch

from helpers import run_python

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
from page_args import PAGE_PROMPT, tiny_model_folder  # noqa: E402

SIZE = ["--height", "64", "--width", "64", "--steps", "2", "--seed", "3"]
REL_TOL = 2e-2


@pytest.fixture(scope="module")
def tmpdir_env(tmp_path_factory):
    """TMPDIR for the examples and for the test's own tiny_model_folder: the same model folder."""
    tmp = tmp_path_factory.mktemp("examples")
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONUNBUFFERED="1")
    env.pop("NEURON_RT_VISIBLE_CORES", None)
    return tmp, env


def run_example(args, env, cwd):
    """`python *args` (an example and its options) in the folder cwd."""
    proc = run_python(args=args, env=env, cwd=cwd, timeout=400)
    assert proc.returncode == 0, f"{proc.args} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    return proc


def cpu_image(folder) -> np.ndarray:
    from diffusers import Flux2KleinPipeline

    pipe = Flux2KleinPipeline.from_pretrained(folder, dtype=torch.bfloat16, local_files_only=True)
    pipe.set_progress_bar_config(disable=True)
    image = pipe(prompt=PAGE_PROMPT, height=64, width=64, num_inference_steps=2,
                 generator=torch.Generator().manual_seed(3)).images[0]
    return np.asarray(image, np.float64)


def assert_matches_cpu(png, want):
    from PIL import Image

    got = np.asarray(Image.open(png), np.float64)
    assert got.shape == want.shape == (64, 64, 3)
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert rel <= REL_TOL, f"{png}: relative {rel:.2e}"


@pytest.fixture(scope="module")
def eager_run(tmpdir_env):
    tmp, env = tmpdir_env
    out = tmp / "eager"
    out.mkdir()
    proc = run_example([str(EXAMPLES / "eager.py"), *SIZE], env, out)
    return proc, out


@pytest.fixture(scope="module")
def model(tmpdir_env, eager_run):
    """The folder eager.py built under its TMPDIR (asked for again here: it exists, nothing is built)."""
    tmp, _ = tmpdir_env
    root = tmp / "torch-neuronx-examples"
    folder = tiny_model_folder(str(root))
    assert [p.name for p in root.iterdir()] == [pathlib.Path(folder).name]  # eager.py's, and no partial one
    return folder


@pytest.fixture(scope="module")
def reference(model):
    return cpu_image(model)


def test_eager_example_builds_the_tiny_model_and_matches_cpu(eager_run, model, reference):
    proc, out = eager_run
    assert (pathlib.Path(model) / "model_index.json").is_file()
    assert "saved output.png" in proc.stdout
    assert "100%" in proc.stderr  # diffusers' progress bar of the denoising steps is shown
    assert_matches_cpu(out / "output.png", reference)


def test_compiled_example_matches_cpu(tmpdir_env, model, reference):
    tmp, env = tmpdir_env
    out = tmp / "compiled"
    out.mkdir()
    run_example([str(EXAMPLES / "compiled.py"), "--model", model, *SIZE], env, out)
    assert_matches_cpu(out / "output.png", reference)


def test_the_demo_reports_each_mode_and_matches_cpu(tmpdir_env):
    """The README's first command's script, small: it checks neuron against the CPU itself (exit 1 on a
    mismatch or a fallback) and ends with its report."""
    tmp, env = tmpdir_env
    png = tmp / "demo.png"
    proc = run_example([str(EXAMPLES / "demo.py"), "--height", "64", "--width", "64",
                        "--steps", "2", "--output", str(png)], env, tmp)
    out = proc.stdout
    assert "RESULT: neuron matches the CPU (relative tolerance 0.03 in bfloat16)" in out
    report = out[out.index("report: 64x64, 2 steps, bfloat16"):]
    for mode in ("cpu", "eager", "compiled"):
        assert f"\n  {mode} " in report
    assert "fallback ops: none" in report and png.is_file()
    assert "eager, first call: 100%" in proc.stderr  # the denoising steps' progress bar


def test_the_custom_kernel_example_matches_cpu_and_prints_its_table(tmp_path):
    """examples/custom_kernel.py at a small size: FLUX.2's q/k RMSNorm as a jax kernel (nki_op), checked
    against the CPU by the script itself (exit 1 on a mismatch or a fallback), then its timing table."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = run_example([str(EXAMPLES / "custom_kernel.py"), "--tokens", "64", "--heads", "2", "--repeat", "2"],
                       env, tmp_path)
    out = proc.stdout
    assert "RESULT: the custom kernel matches the CPU" in out and "fallback ops: none" in out
    table = out[out.index("FLUX.2 q/k RMSNorm, bfloat16, query and key [1, 64, 2, 128]"):]
    for mode in ("eager", "compiled"):
        assert f"\n{mode} " in table
