"""diffusers' AWS Trainium page, "Tensor parallelism": the transformer split across NeuronCores.

    torchrun --nproc_per_node=2 examples/tensor_parallel_neuron.py [--model FOLDER_OR_HUB_ID]
        [--prompt ...] [--height 1024 --width 1024] [--steps 4] [--seed 0] [--output output.png]

One process per NeuronCore: under torchrun each process sees the one core LOCAL_RANK, its neuron:0.
Every rank runs the page's code: the process group of backend "neuron", a DeviceMesh on "neuron",
TensorParallelConfig(mesh=mesh) passed to the transformer's from_pretrained (each rank reads only its
slice of every sharded weight), and `device` for the pipeline's other components. Every rank makes
the same image (the same seed, the all-reduces give each rank the whole result); rank 0 saves it.
Without --model every rank loads the tiny FLUX.2-klein that examples/flux2_klein.py builds offline.
diffusers' tensor-parallel from_pretrained needs accelerate (it loads on the meta device).
"""
import page_args

args = page_args.parse(__doc__)

# ---- the page's code
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from diffusers import TensorParallelConfig

dist.init_process_group(backend="neuron")
mesh = DeviceMesh("neuron", list(range(dist.get_world_size())))
device = torch.neuron.current_device()
parallel_config = TensorParallelConfig(mesh=mesh)
# ---- end of the page's code

# "Pass this parallel_config to the transformer's from_pretrained() and use device for the remaining
# pipeline components."
from diffusers import Flux2KleinPipeline, Flux2Transformer2DModel

transformer = Flux2Transformer2DModel.from_pretrained(
    args.model, subfolder="transformer", parallel_config=parallel_config, dtype=torch.bfloat16)
pipe = Flux2KleinPipeline.from_pretrained(args.model, transformer=transformer, dtype=torch.bfloat16)
pipe.to(device)
image = pipe(
    prompt=args.prompt,
    height=args.height,
    width=args.width,
    num_inference_steps=args.steps,
    generator=torch.Generator().manual_seed(args.seed),
).images[0]
if dist.get_rank() == 0:
    image.save(args.output)
    print(f"saved {args.output} (tensor parallel over {dist.get_world_size()} NeuronCores)")
print(page_args.estimate_line(images=1, rank=dist.get_rank()), flush=True)
dist.destroy_process_group()
