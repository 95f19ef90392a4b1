"""Worker of tests/test_tensor_parallel.py: diffusers' tensor parallelism, eager, on the neuron backend.

Run under torchrun (tests/distributed_harness.launch) with one argument, the folder of a tiny FLUX.2-klein
pipeline written by examples/flux2_klein.save_pipeline. Every rank, as diffusers' AWS Trainium page says:
`init_process_group(backend="neuron")`, `DeviceMesh("neuron", ranks)`, `TensorParallelConfig(mesh=mesh)`.

For float32 and bfloat16 it reports
- `transformer/<dtype>/cpu`: the single-device CPU transformer's output on fixed inputs (no parallelism);
- `transformer/<dtype>/<path>`: the tensor-parallel transformer's output on neuron, its shard shape and
  the collectives its forward ran on the neuron process group, for both entry points: `from_pretrained`
  (diffusers streams each rank's slice off disk into DTensors) and `enable_parallelism` (the model in
  memory on the CPU, sharded, then moved to the device);
- `pipeline/<dtype>`: the FLUX.2-klein pipeline with the `from_pretrained` tensor-parallel transformer
  and its other components moved to the rank's device: max |diff| and relative error of its image
  against the same pipeline on the CPU, and a digest of the image (every rank must make the same one);
  `pipeline/<dtype>/compiled`: the same after `pipe.transformer.compile(backend="neuron",
  fullgraph=True, dynamic=False)`, and `.../graphs`: how Dynamo's graphs were cut at collectives;
- `example`: examples/tensor_parallel_neuron.py (the page's code, as tests/test_examples.py runs the
  other examples), run first on every rank of this same launch at the pipeline's size, prompt and seed
  (`runpy`, its own argv): what it printed, where it saved its PNG (rank 0), and its image. The example
  makes the process group itself; its `destroy_process_group` at the end is held back until this
  worker ends, and its pipeline, the same as `pipeline/bfloat16`'s (the `from_pretrained`
  tensor-parallel transformer, bfloat16, the other components on the device), is the one that section
  measures and then compiles (its image is 8-bit, as the example makes it: within 1/510 of the float one);
- `fallbacks`: the ops that fell back to the CPU (there must be none).
Each section also reports its seconds and `compiling()`.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import runpy
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

import torch_neuronx
from distributed_harness import report
from torch_neuronx.distributed.process_group import ProcessGroupNeuron

PROMPT = "a golden retriever surfing a wave, photorealistic"
CALL = dict(prompt=PROMPT, height=64, width=64, num_inference_steps=2)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
SHARDED = "transformer_blocks.0.attn.to_q.weight"  # a colwise weight: each rank holds half its rows


def quiet() -> None:
    import diffusers
    import transformers

    diffusers.utils.logging.set_verbosity_error()
    diffusers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


# every c10d method ProcessGroupNeuron serves (the `_..._base` ones are c10d's names for the tensor forms)
COLLECTIVES = (
    "allreduce", "allreduce_coalesced", "reduce", "reduce_scatter", "reduce_scatter_single", "_reduce_scatter_base",
    "reduce_scatter_single_coalesced", "reduce_scatter_tensor_coalesced", "broadcast", "allgather",
    "allgather_coalesced", "all_gather_single", "_allgather_base", "all_gather_single_coalesced",
    "allgather_into_tensor_coalesced", "gather", "scatter", "all_to_all_single", "alltoall_base", "alltoall",
    "send", "recv", "recv_anysource", "barrier",
)
_counts: dict = {}


def count_collectives() -> None:
    """Count each collective ProcessGroupNeuron runs (DTensor's redistributions reach it through c10d;
    a method that serves another, such as allreduce_coalesced, counts both)."""
    def counted(name, method):
        def call(self, *args, **kwargs):
            _counts[name] = _counts.get(name, 0) + 1
            return method(self, *args, **kwargs)
        return call

    for name in COLLECTIVES:
        setattr(ProcessGroupNeuron, name, counted(name, getattr(ProcessGroupNeuron, name)))


def transformer_inputs():
    """The shapes the pipeline's transformer calls take at CALL's size (4x4 latent tokens, the text
    encoder's 512 tokens; so the pipeline reuses the executables these compile): random hidden states,
    a timestep, and position ids (t, h, w, l) built as Flux2KleinPipeline builds them."""
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(1, 16, 32, generator=g)
    text = torch.randn(1, 512, 96, generator=g)
    one = torch.arange(1)
    return dict(
        hidden_states=hidden, encoder_hidden_states=text, timestep=torch.tensor([0.5]),
        img_ids=torch.cartesian_prod(one, torch.arange(4), torch.arange(4), one).unsqueeze(0),
        txt_ids=torch.cartesian_prod(one, one, one, torch.arange(512)).unsqueeze(0),
    )


def forward(model, inputs, device, dtype) -> torch.Tensor:
    moved = {k: v.to(device, dtype) if v.is_floating_point() and k not in ("img_ids", "txt_ids") else v.to(device)
             for k, v in inputs.items()}
    with torch.no_grad():
        return model(**moved, return_dict=False)[0]


def as_list(t: torch.Tensor) -> list:
    return t.detach().to("cpu", torch.float32).tolist()


def check_transformer(folder, mesh, device, name, dtype, inputs) -> None:
    from diffusers import Flux2Transformer2DModel, TensorParallelConfig

    cpu = Flux2Transformer2DModel.from_pretrained(folder, subfolder="transformer", dtype=dtype)
    report(f"transformer/{name}/cpu", as_list(forward(cpu, inputs, "cpu", dtype)))

    for path in ("from_pretrained", "enable_parallelism"):
        start = time.perf_counter()
        config = TensorParallelConfig(mesh=mesh)
        if path == "from_pretrained":
            model = Flux2Transformer2DModel.from_pretrained(folder, subfolder="transformer", dtype=dtype,
                                                            parallel_config=config)
        else:
            model = Flux2Transformer2DModel.from_pretrained(folder, subfolder="transformer", dtype=dtype)
            model.enable_parallelism(config=config)
            model.to(device)
        weight = model.get_parameter(SHARDED)
        _counts.clear()
        out = forward(model, inputs, device, dtype)
        collectives = dict(_counts)
        report(f"transformer/{name}/{path}", {
            "out": as_list(out),
            "out_device": str(out.device),
            "weight_type": type(weight).__name__,
            "local_shape": list(weight.to_local().shape) if isinstance(weight, DTensor) else None,
            "global_shape": list(weight.shape),
            "local_device": str(weight.to_local().device) if isinstance(weight, DTensor) else str(weight.device),
            "collectives": collectives,
            "seconds": time.perf_counter() - start,
            "compiling": compiling(),
        })


def compiling() -> list:
    """So far in this process: [executables compiled, seconds compiling, executables loaded from the
    disk cache, seconds loading them] (for the record: what a section cost cold or warm)."""
    stats = torch_neuronx.metrics.compile_stats().values()
    disk = torch_neuronx.metrics.executable_cache_stats()
    return [sum(n for n, _ in stats), sum(sec for _, sec in stats), disk["disk_hits"], disk["disk_load_s"]]


def image(pipe) -> np.ndarray:
    pipe.set_progress_bar_config(disable=True)
    return pipe(**CALL, generator=torch.Generator().manual_seed(0), output_type="np").images.astype(np.float64)


EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "tensor_parallel_neuron.py")


def run_example(folder, output) -> dict:
    """examples/tensor_parallel_neuron.py on this rank with CALL's size and seed 0 (its prompt is CALL's):
    its globals; its stdout is reported. The process group it makes stays up (for this worker)."""
    argv = [EXAMPLE, "--model", folder, "--height", str(CALL["height"]), "--width", str(CALL["width"]),
            "--steps", str(CALL["num_inference_steps"]), "--seed", "0", "--output", output]
    sys.path.insert(0, os.path.dirname(EXAMPLE))
    old_argv, destroy = sys.argv, dist.destroy_process_group
    sys.argv, dist.destroy_process_group = argv, lambda *a, **k: None
    printed = io.StringIO()
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(printed):
            g = runpy.run_path(EXAMPLE, run_name="__main__")
    finally:
        sys.argv, dist.destroy_process_group = old_argv, destroy
    assert g["args"].prompt == CALL["prompt"]
    report("example", {"stdout": printed.getvalue(), "output": output if dist.get_rank() == 0 else None,
                       "seconds": time.perf_counter() - start, "compiling": compiling()})
    return g


def check_pipeline(folder, mesh, device, name, dtype, example=None) -> None:
    from diffusers import Flux2KleinPipeline, Flux2Transformer2DModel, TensorParallelConfig

    want = image(Flux2KleinPipeline.from_pretrained(folder, dtype=dtype, local_files_only=True))
    if example is not None:  # the example's pipeline and its 8-bit image
        pipe, start = example["pipe"], time.perf_counter()
        got = np.asarray(example["image"], np.float64)[None] / 255
        if dist.get_rank() == 0:  # the PNG it saved holds that image
            from PIL import Image

            report("example/png_is_the_image", bool(np.array_equal(np.asarray(Image.open(example["args"].output)),
                                                                  np.asarray(example["image"]))))
    else:
        start = time.perf_counter()
        transformer = Flux2Transformer2DModel.from_pretrained(
            folder, subfolder="transformer", dtype=dtype, parallel_config=TensorParallelConfig(mesh=mesh))
        pipe = Flux2KleinPipeline.from_pretrained(folder, transformer=transformer, dtype=dtype, local_files_only=True)
        pipe.to(device)
        got = image(pipe)
    report_image(f"pipeline/{name}", got, want, pipe, start)
    # the same pipeline with its tensor-parallel transformer compiled, as the page compiles it
    start = time.perf_counter()
    pipe.transformer.compile(backend="neuron", fullgraph=True, dynamic=False)
    report_image(f"pipeline/{name}/compiled", image(pipe), want, pipe, start)
    report(f"pipeline/{name}/compiled/graphs", torch.neuron.get_dynamo_metrics().get("split_graphs", {}))


def report_image(label, got, want, pipe, start) -> None:
    diff = got - want
    report(label, {
        "shape": list(got.shape),
        "max_abs": float(np.abs(diff).max()),
        "rel": float(np.linalg.norm(diff) / np.linalg.norm(want)),
        "digest": hashlib.sha256(got.tobytes()).hexdigest(),
        "devices": sorted({str(p.device) for p in pipe.text_encoder.parameters()}
                          | {str(p.device) for p in pipe.vae.parameters()}),
        "seconds": time.perf_counter() - start,
        "compiling": compiling(),
    })


def main(folder: str, example_output: str) -> None:
    quiet()
    count_collectives()
    torch_neuronx.clear_op_tracking()
    example = run_example(folder, example_output)  # it makes the process group, as the page says
    quiet()  # the example leaves diffusers' progress bars on
    mesh = DeviceMesh("neuron", list(range(dist.get_world_size())))
    device = torch.neuron.current_device()
    report("device", [device, torch.neuron.device_count()])
    inputs = transformer_inputs()
    for name, dtype in DTYPES.items():
        check_transformer(folder, mesh, device, name, dtype, inputs)
    for name, dtype in DTYPES.items():
        check_pipeline(folder, mesh, device, name, dtype, example if name == "bfloat16" else None)
    report("fallbacks", torch_neuronx.get_fallback_ops())
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
