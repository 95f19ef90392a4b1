"""Tensor parallelism on neuron, as diffusers' AWS Trainium page shows it, on the tiny FLUX.2-klein of
flux2_klein.py (random weights, built in code: nothing is downloaded).

    torchrun --nproc_per_node=2 examples/tensor_parallel_neuron.py [--dtype float32] [--folder DIR]

One process per NeuronCore: under torchrun each process sees the one core LOCAL_RANK
(NEURON_RT_VISIBLE_CORES), its neuron:0. Rank 0 writes the pipeline to a folder (save_pretrained) while
the other ranks wait; then every rank runs the page's code: the process group of backend "neuron", a
DeviceMesh on "neuron", TensorParallelConfig(mesh=mesh) passed to the transformer's from_pretrained
(each rank reads only its slice of every sharded weight), the pipeline built with that transformer and
its other components moved to `device`. Rank 0 saves the image and prints how far it is from the
image of the same pipeline on one device (its own NeuronCore, no parallelism) and on the CPU.

diffusers' tensor-parallel from_pretrained needs accelerate (it loads on the meta device).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is built here: never reach for the Hub
import diffusers  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import transformers  # noqa: E402
from diffusers import Flux2KleinPipeline, Flux2Transformer2DModel, TensorParallelConfig  # noqa: E402
from torch.distributed.device_mesh import DeviceMesh  # noqa: E402

from flux2_klein import save_pipeline  # noqa: E402

PROMPT = "a golden retriever surfing a wave, photorealistic"


def run(pipe, args) -> np.ndarray:
    pipe.set_progress_bar_config(disable=True)
    return pipe(prompt=PROMPT, height=args.size, width=args.size, num_inference_steps=args.steps,
                generator=torch.Generator().manual_seed(0), output_type="np").images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--folder", default=os.path.join(tempfile.gettempdir(), "flux2-klein-tiny"),
                        help="where rank 0 writes the pipeline (every rank reads it)")
    parser.add_argument("--size", type=int, default=128, help="image height and width")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--output", default="output.png")
    args = parser.parse_args()
    if importlib.util.find_spec("accelerate") is None:
        raise SystemExit("diffusers' tensor-parallel from_pretrained needs accelerate: pip install accelerate")
    dtype = getattr(torch, args.dtype)
    diffusers.utils.logging.set_verbosity_error()  # the tiny pipeline's build and load warnings
    diffusers.utils.logging.disable_progress_bar()
    transformers.utils.logging.disable_progress_bar()

    # the page's code
    dist.init_process_group(backend="neuron")
    mesh = DeviceMesh("neuron", list(range(dist.get_world_size())))
    device = torch.neuron.current_device()
    parallel_config = TensorParallelConfig(mesh=mesh)

    rank = dist.get_rank()
    if rank == 0:
        save_pipeline(args.folder, dtype)
    dist.barrier()  # the other ranks read the folder once rank 0 has written it

    start = time.perf_counter()
    transformer = Flux2Transformer2DModel.from_pretrained(
        args.folder, subfolder="transformer", parallel_config=parallel_config, dtype=dtype)
    pipe = Flux2KleinPipeline.from_pretrained(args.folder, transformer=transformer, dtype=dtype)
    pipe.to(device)
    images = run(pipe, args)
    print(f"rank {rank}: tensor-parallel image on neuron:{device} of {dist.get_world_size()} ranks "
          f"in {time.perf_counter() - start:.1f} s", flush=True)

    if rank == 0:
        pipe.numpy_to_pil(images)[0].save(args.output)
        print(f"saved {args.output}")
        single = run(Flux2KleinPipeline.from_pretrained(args.folder, dtype=dtype).to(device), args)
        cpu = run(Flux2KleinPipeline.from_pretrained(args.folder, dtype=dtype), args)
        for name, ref in (("one NeuronCore", single), ("the CPU", cpu)):
            diff = np.abs(images.astype(np.float64) - ref).max()
            print(f"max |difference| from the {args.dtype} image on {name}: {diff:.3g}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
