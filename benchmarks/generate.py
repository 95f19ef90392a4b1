"""transformers `generate()` (greedy) on neuron vs the CPU, both KV caches, side by side in one run.

    python benchmarks/generate.py [--new-tokens N] [--repeats R] [--layers L] [--hidden H]

A small Llama (random weights, the real architecture) generates N tokens from a prompt with the
default dynamic cache and with `cache_implementation="static"` (transformers compiles the decode
step with the `neuron` backend on neuron; the CPU runs it eagerly). Per device and cache:

- cold ms/tok: the first `generate` in the process, compiles included (executables are kept in a
  fresh cache folder, so nothing comes from an earlier run);
- new len ms/tok: a `generate` from a prompt 5 tokens longer, not seen before (what a user's next
  prompt costs): its prefill shapes and its last 5 sequence lengths are new, and the static cache
  is longer (a new graph);
- cold, disk warm ms/tok: the same first `generate` in a second process sharing that cache folder
  (executables load from disk instead of compiling; neuron only);
- first tok ms: `generate(max_new_tokens=1)` (prefill and one token), steady state;
- decode ms/tok: (T(N) - T(1)) / (N - 1) in steady state (a repeated prompt: every shape seen);
  steady-state times are the best of R repeats (the machine may be shared);
- per token in the steady state: eager ops launched, compiled-graph runs, host reads, executables
  compiled, ops that fell back to the CPU.

The CPU runs under torch's default threading. Tokens are checked against the CPU's.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from child_process import last_json, run_child

# a fresh executable cache, so "cold" is cold (set before torch_neuronx reads it); removed at exit
if "TORCH_NEURONX_NEFF_CACHE_DIR" not in os.environ:
    import atexit
    import shutil

    os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = tempfile.mkdtemp(prefix="generate_bench_")
    atexit.register(shutil.rmtree, os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"], ignore_errors=True)

import torch


def build(layers, hidden):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=512, hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        bos_token_id=1, eos_token_id=None, pad_token_id=0,
    )
    model = LlamaForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def _generate(model, ids, n, cache):
    kw = {"max_new_tokens": n, "do_sample": False}
    if cache == "static":
        kw["cache_implementation"] = "static"
    out = model.generate(ids, **kw)
    return out.cpu()  # the host read ends the timing


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def measure(model, device, cache, prompt, new_prompt, n, repeats):
    from torch_neuronx import metrics

    ids, ids2 = prompt.to(device), new_prompt.to(device)
    # transformers sizes a static cache to the longest one this model has used (no recompiles): the
    # other device's runs would change the shapes this device's cold run compiles
    if hasattr(model, "_previous_max_cache_length"):
        del model._previous_max_cache_length
    row = {}
    metrics.clear_op_tracking()
    t, tokens = _timed(lambda: _generate(model, ids, n, cache))
    row["cold"] = t / n * 1e3
    row["cold_compiles"] = sum(c for c, _ in metrics.compile_stats().values())
    row["cold_graphs"] = torch.neuron.get_dynamo_metrics()["graphs_compiled"] if device != "cpu" else 0
    t, _ = _timed(lambda: _generate(model, ids2, n, cache))
    row["new_len"] = t / n * 1e3
    firsts, fulls = [], []
    for _ in range(repeats):
        firsts.append(_timed(lambda: _generate(model, ids, 1, cache))[0])
        metrics.clear_op_tracking()
        graph_runs0 = sum(torch.neuron.get_dynamo_metrics()["executions"].values())
        fulls.append(_timed(lambda: _generate(model, ids, n, cache))[0])
    first, full = min(firsts), min(fulls)
    row["first"] = first * 1e3
    row["decode"] = (full - first) / (n - 1) * 1e3
    if device != "cpu":  # counters of the last steady-state generate
        row["ops"] = sum(metrics.get_executed_ops().values()) / n
        row["graph_runs"] = (sum(torch.neuron.get_dynamo_metrics()["executions"].values()) - graph_runs0) / n
        row["host_reads"] = metrics.host_reads()["reads"] / n
        row["compiles"] = sum(c for c, _ in metrics.compile_stats().values())
        row["fallbacks"] = sum(metrics.get_fallback_ops().values())
    return row, tokens


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--cold-only", action="store_true", help="print the neuron cold figures as JSON (the child)")
    args = parser.parse_args()
    import transformers

    transformers.logging.set_verbosity_error()
    model = build(args.layers, args.hidden)
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(2, 512, (1, args.prompt), generator=g)
    new_prompt = torch.randint(2, 512, (1, args.prompt + 5), generator=g)
    if args.cold_only:
        model.to("neuron")
        cold = {}
        with torch.no_grad():
            for cache in ("dynamic", "static"):
                t, _ = _timed(lambda: _generate(model, prompt.to("neuron"), args.new_tokens, cache))
                cold[cache] = t / args.new_tokens * 1e3
        from torch_neuronx import metrics

        cold["disk_loads"] = metrics.executable_cache_stats()["disk_hits"]
        dynamo = torch.neuron.get_dynamo_metrics()
        cold["graphs_compiled"] = dynamo["graphs_compiled"]
        cold["graphs_loaded"] = sum(dynamo["loaded_from_disk"].values())
        print(json.dumps(cold))
        return
    rows = {}
    with torch.no_grad():
        for device in ("cpu", "neuron"):
            model.to(device)
            for cache in ("dynamic", "static"):
                rows[device, cache] = measure(model, device, cache, prompt, new_prompt, args.new_tokens, args.repeats)
    warm = last_json(run_child([__file__, "--cold-only", *sys.argv[1:]], label="--cold-only").stdout)
    print(f"Llama, {args.layers} layers, hidden {args.hidden}; prompt {args.prompt} tokens, {args.new_tokens} new "
          f"(greedy); torch threads {torch.get_num_threads()}, neuron platform {torch.neuron.platform()}")
    head = ("cache", "metric", "cpu", "neuron", "neuron/cpu")
    lines = [head]
    for cache in ("dynamic", "static"):
        (cpu, cpu_tok), (dev, dev_tok) = rows["cpu", cache], rows["neuron", cache]
        for key, name in (("cold", "cold ms/tok"), ("new_len", "new len ms/tok"), ("first", "first tok ms"),
                          ("decode", "decode ms/tok")):
            lines.append((cache, name, f"{cpu[key]:.2f}", f"{dev[key]:.2f}", f"{dev[key] / cpu[key]:.1f}x"))
        lines.append((cache, "cold, disk warm ms/tok", "", f"{warm[cache]:.2f}", f"{warm[cache] / cpu['cold']:.1f}x"))
        lines.append((cache, "tokens match cpu", "", str(torch.equal(cpu_tok, dev_tok)), ""))
        lines.append((cache, "cold: op compiles/graphs", "", f"{dev['cold_compiles']}/{dev['cold_graphs']}", ""))
        for key, name in (("ops", "eager ops/tok"), ("graph_runs", "graph runs/tok"), ("host_reads", "host reads/tok")):
            lines.append((cache, name, "", f"{dev[key]:.1f}", ""))
        lines.append((cache, "steady compiles, fallbacks", "", f"{dev['compiles']}, {dev['fallbacks']}", ""))
    lines.append(("", "2nd process: disk loads, graphs compiled/loaded", "",
                  f"{warm['disk_loads']}, {warm['graphs_compiled']}/{warm['graphs_loaded']}", ""))
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    for i, r in enumerate(lines):
        print("  ".join(c.ljust(w) if j < 2 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))))
        if i == 0:
            print("-" * (sum(widths) + 2 * (len(widths) - 1)))


if __name__ == "__main__":
    main()
