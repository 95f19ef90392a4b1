"""A real diffusers pipeline end to end: the tiny FLUX.2-klein of examples/flux2_klein.py
(Flux2KleinPipeline: Flux2Transformer2DModel, AutoencoderKLFlux2, Qwen3 text encoder, Qwen2 tokenizer,
flow-matching scheduler; random weights), written with save_pretrained to a folder of the test's own
and loaded with Flux2KleinPipeline.from_pretrained, run as diffusers' Trainium page does
(`pipe.to("neuron")`; then `pipe.transformer.compile(backend="neuron", fullgraph=True, dynamic=False)`)
at 64x64 (the 8x VAE gives 8x8 latents, 4x4 = 16 image tokens), 2 steps, float32.

Metric: the decoded image (output_type="np", values in [0, 1]) on neuron vs the same loaded pipeline on
the CPU, same CPU generator seed: max |diff| <= 1e-4 and ||diff|| / ||cpu|| <= 1e-5 (the demo measures ~3e-6
and ~6e-7). No op may fall back to the CPU."""
import os
import sys

import numpy as np
import pytest
import torch

import torch_neuronx

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from flux2_klein import build_pipeline, load_pipeline, save_pipeline  # noqa: E402

pytest.importorskip("diffusers")

MAX_ABS_TOL = 1e-4
REL_TOL = 1e-5
CALL = dict(prompt="a golden retriever surfing a wave, photorealistic", height=64, width=64, num_inference_steps=2)


def run(pipe, prompt=None):
    kw = dict(CALL, prompt=prompt or CALL["prompt"])
    return pipe(**kw, generator=torch.Generator().manual_seed(0), output_type="np").images


def assert_close(got: np.ndarray, want: np.ndarray):
    assert got.shape == want.shape == (1, 64, 64, 3)
    got, want = got.astype(np.float64), want.astype(np.float64)
    max_abs = np.abs(got - want).max()
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert max_abs <= MAX_ABS_TOL and rel <= REL_TOL, f"max |diff| {max_abs:.2e}, relative {rel:.2e}"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    import diffusers
    import transformers

    diffusers.utils.logging.set_verbosity_error()
    diffusers.utils.logging.disable_progress_bar()
    transformers.utils.logging.disable_progress_bar()
    return save_pipeline(tmp_path_factory.mktemp("flux2-klein"))


@pytest.fixture(scope="module")
def reference(folder):
    """The loaded pipeline's image on the CPU."""
    return run(load_pipeline(folder))


def test_from_pretrained_round_trip_cpu(folder, reference):
    """What from_pretrained loads is what build_pipeline made: same classes, tokens, weights (bit for
    bit) and image. The image within float32 rounding, not bit for bit: the CPU's kernels may take
    another path for the loaded (memory-mapped) weights and differ in the last bit."""
    from diffusers import Flux2KleinPipeline

    built, loaded = build_pipeline(), Flux2KleinPipeline.from_pretrained(folder, local_files_only=True)
    assert type(loaded.tokenizer).__name__ == "Qwen2Tokenizer"  # transformers' Qwen2TokenizerFast
    messages = [{"role": "user", "content": CALL["prompt"]}]
    texts = [
        t.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
        for t in (built.tokenizer, loaded.tokenizer)
    ]
    assert texts[0] == texts[1] and texts[0].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert built.tokenizer(texts[0])["input_ids"] == loaded.tokenizer(texts[1])["input_ids"]
    for name in ("transformer", "vae", "text_encoder"):
        want, got = getattr(built, name).state_dict(), getattr(loaded, name).state_dict()
        assert list(got) == list(want), name
        assert all(torch.equal(got[k], want[k]) for k in want), name
    built.set_progress_bar_config(disable=True)
    np.testing.assert_allclose(run(built), reference, rtol=1e-5, atol=1e-6)


def test_eager_matches_cpu(folder, reference):
    pipe = load_pipeline(folder).to("neuron")
    for name in ("transformer", "vae", "text_encoder"):
        assert getattr(pipe, name).device.type == "neuron"
    torch_neuronx.clear_op_tracking()
    first = run(pipe)
    again = run(pipe)
    assert torch_neuronx.get_fallback_ops() == {}
    assert_close(first, reference)
    np.testing.assert_array_equal(again, first)


def test_compiled_transformer_matches_cpu(folder, reference, memory_only_cache):
    pipe = load_pipeline(folder).to("neuron")
    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    torch_neuronx.clear_op_tracking()
    try:
        pipe.transformer.compile(backend="neuron", fullgraph=True, dynamic=False)
        run(pipe, "warmup")  # compiles the transformer's graph
        image = run(pipe)  # same shapes: reuses it
        metrics = torch.neuron.get_dynamo_metrics()
        assert metrics["graphs_compiled"] == 1 and metrics["recompiles"] == []
        assert metrics["graphs"][0]["fallback_ops"] == []
        assert sum(metrics["executions"].values()) == 2 * CALL["num_inference_steps"]
        assert torch_neuronx.get_fallback_ops() == {}
        assert_close(image, reference)
    finally:
        torch._dynamo.reset()
        torch.neuron.reset_dynamo_metrics()
