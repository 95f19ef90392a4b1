"""LoRA training of the tiny FLUX.2-klein transformer under `accelerate launch --num_processes 2`, the
way diffusers' DreamBooth LoRA script drives accelerate: Accelerator(mixed_precision=...,
kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)]),
`prepare(model, optimizer, dataloader)`, `accumulate`, `backward`, `clip_grad_norm_`, the adapter saved by
the main process with Flux2KleinPipeline.save_lora_weights.

    accelerate launch --num_processes 2 lora_training_accelerate.py OUT [--cpu] [--mixed-precision bf16|no]

accelerate picks the device and the process group itself: `neuron` and backend "neuron" when
torch_neuronx is installed, or with --cpu (Accelerator(cpu=True)) the CPU and gloo. On neuron the launch
needs ACCELERATE_BYPASS_DEVICE_MAP=true (accelerate would give DDP device_ids=[local rank], and each
process's core is its neuron:0); on the CPU, TORCH_DEVICE_BACKEND_AUTOLOAD=0 (accelerate's barrier would
name the neuron device to gloo) and `--multi_gpu` for the two processes. tests/test_lora_training.py
launches it so. Each rank reports (distributed_harness.report, into NEURON_DIST_RESULTS) what accelerate
chose and its per-step losses, and writes its LoRA weights to OUT/lora_rank{RANK}.safetensors."""
import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
import train_lora_flux2 as lora  # noqa: E402
from distributed_harness import report  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--cpu", action="store_true")
ap.add_argument("--mixed-precision", default="bf16")
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--lr", type=float, default=1e-3)
args = ap.parse_args()

from accelerate import Accelerator  # noqa: E402
from accelerate.utils import DistributedDataParallelKwargs  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

accelerator = Accelerator(mixed_precision=args.mixed_precision, cpu=args.cpu,
                          kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])
report("device", str(accelerator.device))
report("distributed_type", str(accelerator.distributed_type))
report("backend", torch.distributed.get_backend())
report("num_processes", accelerator.num_processes)

# the script's weight_dtype: the frozen model (and so the adapter) in the mixed-precision dtype
weight_dtype = torch.bfloat16 if accelerator.mixed_precision == "bf16" else torch.float32
pipe = lora.pipeline()
# the same samples on every rank; the prepared dataloader gives each rank its share of every global batch
data = lora.training_data(pipe, args.steps * accelerator.num_processes)
scheduler = lora.training_scheduler(pipe)
transformer = lora.lora_model(pipe, weight_dtype).to(accelerator.device)
optimizer = lora.optimizer_for(transformer, args.lr)
loader = torch.utils.data.DataLoader(data, batch_size=1, shuffle=False, collate_fn=lora.collate)
transformer, optimizer, loader = accelerator.prepare(transformer, optimizer, loader)
report("wrapped_in", type(transformer).__name__)

transformer.train()
losses = []
for batch in loader:
    with accelerator.accumulate(transformer):
        loss = lora.flow_matching_loss(transformer, batch, scheduler, accelerator.device, weight_dtype)
        accelerator.backward(loss)
        if accelerator.sync_gradients:
            accelerator.clip_grad_norm_(transformer.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
    losses.append(loss.detach().item())
report("losses", losses)
if accelerator.device.type == "neuron":  # what the ranks compiled, and what they found in the disk cache
    import torch_neuronx

    report("fallback", dict(torch_neuronx.get_fallback_ops()))
    stats = torch_neuronx.metrics.executable_cache_stats()
    report("cache", {k: stats[k] for k in ("disk_hits", "disk_misses")})

model = accelerator.unwrap_model(transformer)
report("trainable", sorted(n for n, p in model.named_parameters() if p.requires_grad))
out = pathlib.Path(args.out)
save_file(lora.lora_state(model), str(out / f"lora_rank{accelerator.process_index}.safetensors"))
if accelerator.is_main_process:
    lora.save_adapter(model, str(out / "adapter"))
accelerator.wait_for_everyone()
accelerator.end_training()
report("done", True)
