"""diffusers' AWS Trainium page, "Compiled mode": the transformer compiled whole, static shapes.

    python examples/compiled.py [--model FOLDER_OR_HUB_ID] [--prompt ...] [--height 1024 --width 1024]
                                [--steps 4] [--seed 0] [--output output.png]

The warmup call compiles the transformer's graph (the text encoder and the VAE run eagerly, each op
compiled on first use); the second call, with the same shapes, reuses it. A new height or width
compiles again; another number of steps does not. Executables go to the disk cache
(TORCH_NEURONX_NEFF_CACHE_DIR), so a new process loads them instead of compiling. Without --model it
runs the tiny FLUX.2-klein that examples/flux2_klein.py builds offline. The lines between the page's
markers are the page's code, with the command line's values in place of the page's and a generator
seeded with --seed.
"""
import page_args

args = page_args.parse(__doc__)

# ---- the page's code
import torch
from diffusers import Flux2KleinPipeline

pipe = Flux2KleinPipeline.from_pretrained(args.model, dtype=torch.bfloat16)
pipe.to("neuron")
pipe.transformer.compile(backend="neuron", fullgraph=True, dynamic=False)
# Warmup — triggers static graph compilation.
pipe(prompt="warmup", height=args.height, width=args.width, num_inference_steps=args.steps)
# Later calls with the same shapes reuse the compiled graph.
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
print(page_args.estimate_line(images=2))  # the warmup and the call: two images
