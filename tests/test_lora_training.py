"""LoRA fine-tuning of FLUX.2-klein as diffusers users do it (train_dreambooth_lora_flux2_klein.py), on
the tiny pipeline of examples/flux2_klein.py, with the loop of examples/train_lora_flux2.py: the frozen
Flux2Transformer2DModel in bfloat16 with a peft LoRA adapter (rank 4, the script's target modules),
AdamW over the LoRA parameters only, bfloat16 autocast, the script's rectified-flow loss.

Default run ~50 s on 2 busy cores (most of it the first neuron step's and pipeline call's compiles).

1. One core: 3 steps on neuron against the same loop on the CPU (same weights, data and draws).
   Tolerance: what bfloat16 itself costs, measured here as the CPU's bfloat16 run against its float32
   run (the largest loss difference over the steps; the relative norm of the difference of the LoRA
   weights' change). Neuron's distance from the CPU's bfloat16 run must be within it.
2. (slow) The same training under `accelerate launch --num_processes 2` (DDP over the `neuron` process
   group), against the same job on the CPU (gloo), within the same measured tolerance; DDP leaves
   identical LoRA weights on both ranks.
3. The adapter trained on neuron, saved with get_peft_model_state_dict + save_lora_weights, loaded with
   `pipe.load_lora_weights(folder)` into the float32 pipeline on neuron: it changes the pipeline's
   output (the denoised latents), which is the CPU pipeline's with the same adapter, within
   tests/test_pipeline.py's float32 bound.
"""
import json
import os
import pathlib
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch

import torch_neuronx

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))
import train_lora_flux2 as lora  # noqa: E402

STEPS = 3
BATCH = 1  # as a DDP rank's batch in the accelerate job
LR = 1e-3  # the script's default is 1e-4; a few steps need a larger one to move the adapter visibly
# tests/test_pipeline.py's float32 bound for the pipeline's output against the CPU's, ||diff|| / ||cpu||
REL_TOL = 1e-5


def relative(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def lora_change(final: dict, initial: dict) -> torch.Tensor:
    """Every LoRA weight's change in training, flattened into one float32 vector."""
    assert final.keys() == initial.keys()
    return torch.cat([(final[k].float() - initial[k].float()).flatten() for k in sorted(final)])


def change_distance(a: dict, b: dict, initial_a: dict, initial_b: dict) -> float:
    """||change_a - change_b|| / ||change_b||: how far run a's training moved the adapter from run b's."""
    da, db = lora_change(a, initial_a), lora_change(b, initial_b)
    return float((da - db).norm() / db.norm())


@pytest.fixture(scope="module")
def pipe():
    return lora.pipeline()


@pytest.fixture(scope="module")
def runs(pipe):
    """The single-core loop three times: CPU float32 (no autocast), CPU bfloat16 and neuron bfloat16
    (the script's mixed precision: weights in bfloat16, autocast). Each: the losses, the adapter's
    weights before and after, the model itself."""
    data = lora.training_data(pipe, STEPS * BATCH)
    scheduler = lora.training_scheduler(pipe)
    out = {}
    for name, device, dtype in [("cpu_f32", "cpu", torch.float32), ("cpu_bf16", "cpu", torch.bfloat16),
                                ("neuron", "neuron", torch.bfloat16)]:
        model = lora.lora_model(pipe, dtype)
        initial = lora.lora_state(model)
        frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
        with pytest.MonkeyPatch.context() as mp:  # no op may fall back to the CPU
            mp.setenv("TORCH_NEURONX_CPU_FALLBACK", "error")
            torch_neuronx.clear_op_tracking()
            losses = lora.train(model, data, scheduler, device, steps=STEPS, batch_size=BATCH, lr=LR,
                                autocast=dtype == torch.bfloat16)
            fallback = dict(torch_neuronx.get_fallback_ops())
        out[name] = dict(losses=losses, initial=initial, final=lora.lora_state(model), model=model,
                         frozen=frozen, fallback=fallback)
    return out


def test_only_the_lora_parameters_train(runs):
    model = runs["neuron"]["model"]
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    # the script's targets: 4 projections in each double-stream block, 2 in each single-stream block
    assert len(trainable) == 2 * (4 * 2 + 2 * 3)
    assert all(p.device.type == "neuron" and p.dtype == torch.bfloat16 for p in model.parameters())
    for n, p in model.named_parameters():  # the frozen weights did not move
        if not p.requires_grad:
            assert torch.equal(p.detach().cpu(), runs["neuron"]["frozen"][n]), n
    assert runs["neuron"]["fallback"] == {}
    # the training moved every B (peft starts it at zero)
    assert all(v.abs().max() > 0 for k, v in runs["neuron"]["final"].items() if "lora_B" in k)


def test_losses_match_the_cpu_within_bfloat16s_cost(runs):
    f32, bf16, neuron = (torch.tensor(runs[k]["losses"]) for k in ("cpu_f32", "cpu_bf16", "neuron"))
    tolerance = (bf16 - f32).abs().max().item()
    distance = (neuron - bf16).abs().max().item()
    print(f"losses: neuron {neuron.tolist()}, CPU bf16 {bf16.tolist()}, CPU f32 {f32.tolist()}; "
          f"|neuron - CPU bf16| {distance:.2e}, bf16's own cost {tolerance:.2e}")
    assert 0 < tolerance < 1e-2  # bfloat16 changes the loss by a rounding error, not a different training
    assert distance <= tolerance


def test_lora_weights_match_the_cpu_within_bfloat16s_cost(runs):
    r = runs
    tolerance = change_distance(r["cpu_bf16"]["final"], r["cpu_f32"]["final"], r["cpu_bf16"]["initial"],
                                r["cpu_f32"]["initial"])
    distance = change_distance(r["neuron"]["final"], r["cpu_bf16"]["final"], r["neuron"]["initial"],
                               r["cpu_bf16"]["initial"])
    print(f"LoRA weights' change: neuron vs CPU bf16 {distance:.2e}, CPU bf16 vs f32 {tolerance:.2e}")
    for k in r["neuron"]["initial"]:  # the same starting adapter on both
        assert torch.equal(r["neuron"]["initial"][k], r["cpu_bf16"]["initial"][k])
    assert distance <= tolerance


def test_the_saved_adapter_changes_the_pipelines_output_as_on_the_cpu(runs, pipe, tmp_path):
    """The script's save (get_peft_model_state_dict + Flux2KleinPipeline.save_lora_weights) of the
    adapter trained on neuron, loaded with load_lora_weights into the float32 pipeline on neuron and on
    the CPU. The pipeline runs whole (text encoder, transformer, scheduler) up to the denoised latents
    (output_type="latent"): the adapter changes only the transformer, and the VAE's decoding of the
    latents, which tests/test_pipeline.py checks, would double this test's compile time."""
    folder = lora.save_adapter(runs["neuron"]["model"], str(tmp_path / "adapter"))
    assert os.path.isfile(os.path.join(folder, "pytorch_lora_weights.safetensors"))

    cpu_plain = lora.generate(pipe, output_type="latent")
    pipe.load_lora_weights(folder)
    cpu_lora = lora.generate(pipe, output_type="latent")
    pipe.unload_lora_weights()

    neuron_pipe = lora.pipeline().to("neuron")
    neuron_pipe.load_lora_weights(folder)  # onto the pipeline on neuron, as the script's validation does
    assert all(p.device.type == "neuron" for p in neuron_pipe.transformer.parameters())
    neuron_lora = lora.generate(neuron_pipe, output_type="latent")

    distance, effect = relative(neuron_lora, cpu_lora), relative(neuron_lora, cpu_plain)
    print(f"latents: neuron vs CPU, both with the adapter {distance:.2e}; with vs without it {effect:.2e}")
    assert neuron_lora.shape == cpu_lora.shape
    assert distance <= REL_TOL
    # the adapter changes the output, well past the bound and far past neuron's distance from the CPU
    # (without it: the CPU's output, which tests/test_pipeline.py shows neuron's is)
    assert relative(cpu_lora, cpu_plain) > 10 * REL_TOL
    assert effect > 10 * REL_TOL and effect > 100 * distance


# ---- accelerate launch --num_processes 2

WORKER = HERE / "dist_workers" / "lora_training_accelerate.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accelerate_launch(out: pathlib.Path, *, cpu: bool, mixed_precision: str) -> dict:
    """`accelerate launch --num_processes 2 [--multi_gpu] --mixed_precision MP worker OUT [--cpu]`;
    {rank: what it reported}. Neuron: accelerate counts the cores itself (2) and launches one process
    per core; ACCELERATE_BYPASS_DEVICE_MAP=true has it wrap the model in DDP without device_ids (it would
    name the local rank's index, and each process's core is its neuron:0). CPU: the same job without the
    neuron package loaded (accelerate's gloo barrier would otherwise name the neuron device), so
    --multi_gpu asks for the processes and Accelerator(cpu=True) for the CPU and gloo."""
    out.mkdir(parents=True)
    env = dict(os.environ, NEURON_DIST_RESULTS=str(out), PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    env.pop("NEURON_RT_VISIBLE_CORES", None)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", mixed_precision, "--dynamo_backend", "no", "--main_process_port", str(free_port())]
    if cpu:
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
        cmd.append("--multi_gpu")
    else:
        env["ACCELERATE_BYPASS_DEVICE_MAP"] = "true"
        env["TORCH_NEURONX_CPU_FALLBACK"] = "error"  # no op may fall back to the CPU
    cmd += [str(WORKER), str(out), "--steps", str(STEPS), "--lr", str(LR), "--mixed-precision", mixed_precision]
    if cpu:
        cmd.append("--cpu")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=500)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-8000:]}"
    results = {r: json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)}
    assert all(results[r].get("done") for r in (0, 1)), results
    return results


def rank_weights(out: pathlib.Path, rank: int) -> dict:
    from safetensors.torch import load_file

    return load_file(str(out / f"lora_rank{rank}.safetensors"))


@pytest.mark.slow
def test_accelerate_two_processes_match_the_cpu_job(pipe, tmp_path):
    jobs = {
        "neuron": accelerate_launch(tmp_path / "neuron", cpu=False, mixed_precision="bf16"),
        "cpu_bf16": accelerate_launch(tmp_path / "cpu_bf16", cpu=True, mixed_precision="bf16"),
        "cpu_f32": accelerate_launch(tmp_path / "cpu_f32", cpu=True, mixed_precision="no"),
    }
    for r in (0, 1):  # what accelerate chose by itself
        assert jobs["neuron"][r]["device"] == "neuron:0"
        assert jobs["neuron"][r]["distributed_type"] == "DistributedType.MULTI_NEURON"
        assert jobs["neuron"][r]["backend"] == "neuron"
        assert jobs["neuron"][r]["fallback"] == {}
        assert jobs["cpu_bf16"][r]["distributed_type"] == "DistributedType.MULTI_CPU"
        assert jobs["cpu_bf16"][r]["backend"] == "gloo"
        for job in jobs.values():
            assert job[r]["num_processes"] == 2 and job[r]["wrapped_in"] == "DistributedDataParallel"
            assert all(".lora_A." in n or ".lora_B." in n for n in job[r]["trainable"])

    losses = {k: torch.tensor([job[r]["losses"] for r in (0, 1)]) for k, job in jobs.items()}
    tolerance = (losses["cpu_bf16"] - losses["cpu_f32"]).abs().max().item()
    distance = (losses["neuron"] - losses["cpu_bf16"]).abs().max().item()
    print(f"neuron ranks' executable cache: {[jobs['neuron'][r]['cache'] for r in (0, 1)]}")
    print(f"losses per rank: neuron {losses['neuron'].tolist()}, CPU bf16 {losses['cpu_bf16'].tolist()}; "
          f"|neuron - CPU bf16| {distance:.2e}, bf16's own cost {tolerance:.2e}")
    assert 0 < tolerance < 1e-2
    assert distance <= tolerance

    weights = {k: [rank_weights(tmp_path / k, r) for r in (0, 1)] for k in jobs}
    for k, (w0, w1) in weights.items():  # DDP averaged the gradients: both ranks hold the same adapter
        assert w0.keys() == w1.keys() and all(torch.equal(w0[n], w1[n]) for n in w0), k
    # the adapter every run started from (the same seed on every rank), in the run's dtype
    initial = {dtype: lora.lora_state(lora.lora_model(pipe, dtype)) for dtype in (torch.bfloat16, torch.float32)}
    tolerance = change_distance(weights["cpu_bf16"][0], weights["cpu_f32"][0], initial[torch.bfloat16],
                                initial[torch.float32])
    distance = change_distance(weights["neuron"][0], weights["cpu_bf16"][0], initial[torch.bfloat16],
                               initial[torch.bfloat16])
    print(f"LoRA weights' change: neuron vs CPU bf16 {distance:.2e}, CPU bf16 vs f32 {tolerance:.2e}")
    assert distance <= tolerance
    # rank 0 saved the adapter as the script does (save_lora_weights: keys under "transformer.")
    from safetensors.torch import load_file

    saved = load_file(str(tmp_path / "neuron" / "adapter" / "pytorch_lora_weights.safetensors"))
    saved = {k.removeprefix("transformer."): v for k, v in saved.items()}
    assert saved.keys() == weights["neuron"][0].keys()
    assert all(torch.equal(saved[k], weights["neuron"][0][k]) for k in saved)


@pytest.mark.slow
def test_the_example_runs_as_a_user_runs_it(tmp_path):
    """`python examples/train_lora_flux2.py`: trains on neuron, saves, reloads into the pipeline."""
    from helpers import run_python

    env = dict(os.environ, TORCH_NEURONX_CPU_FALLBACK="error")
    env.pop("NEURON_RT_VISIBLE_CORES", None)
    proc = run_python(args=[str(HERE.parent / "examples" / "train_lora_flux2.py"), "--steps", "2",
                            "--output", str(tmp_path / "adapter")], env=env, cwd=tmp_path, timeout=400)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0] for line in lines if line.startswith("step ")] == ["step 0", "step 1"]
    assert os.path.isfile(tmp_path / "adapter" / "pytorch_lora_weights.safetensors")
    effect = float(lines[-1].rsplit(" ", 1)[1])
    assert lines[-1].startswith("image with the adapter vs without") and effect > 0
