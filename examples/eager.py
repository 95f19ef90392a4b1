"""diffusers' AWS Trainium page, "Eager mode": the whole FLUX.2-klein pipeline on one NeuronCore.

    python examples/eager.py [--model FOLDER_OR_HUB_ID] [--prompt ...] [--height 1024 --width 1024]
                             [--steps 4] [--seed 0] [--output output.png]

Each op compiles the first time it runs (its executable goes to the disk cache,
TORCH_NEURONX_NEFF_CACHE_DIR); later calls reuse them. Without --model it runs the tiny FLUX.2-klein
that examples/flux2_klein.py builds offline (random weights: the image is noise, the code path is
the real one). The lines between the page's markers are the page's code, with the command line's
values in place of the page's and a generator seeded with --seed.
"""
import page_args

args = page_args.parse(__doc__)

# ---- the page's code
import torch
from diffusers import Flux2KleinPipeline

pipe = Flux2KleinPipeline.from_pretrained(args.model, dtype=torch.bfloat16)
pipe.to("neuron")
image = pipe(
    prompt=args.prompt,
    height=args.height,
    width=args.width,
    num_inference_steps=args.steps,
    generator=torch.Generator().manual_seed(args.seed),
).images[0]
image.save(args.output)
# ---- end of the page's code

print(f"saved {args.output}")
print(page_args.estimate_line(images=1))
