"""Loading as users load: FLUX.2-klein-4B's whole pipeline at its real size, from a folder `save_pretrained`
wrote, to the CPU and to the neuron device, each side in a fresh process of its own.

    PYTHONPATH=. python benchmarks/pipeline_loading.py [--text-layers 36] [--blocks 5 20] [--folder DIR]
                                                      [--sides torch neuron-to neuron-device-map]
                                                      [--timeout SECONDS]

The pipeline is benchmarks/flux_pipeline_real.py's `build_pipeline(spec, torch.bfloat16, "cpu")`, imported from
there (its docstring says where each configuration value comes from): diffusers' `Flux2KleinPipeline`
(is_distilled=True) with the transformer `Flux2Transformer2DModel(**KLEIN_4B)` (flux_real.py's configuration,
from diffusers' scripts/convert_flux2_to_diffusers.py "klein-4b": 5 double + 20 single blocks; `--blocks D S`
cuts its depth), the text encoder transformers' `Qwen3ForCausalLM` with Qwen/Qwen3-4B's config.json
(flux_pipeline_real.py's `QWEN3_4B`: 36 layers, hidden 2560, vocabulary 151936, tied embeddings;
`--text-layers N` cuts its depth, the vocabulary stays), the VAE `AutoencoderKLFlux2()` (its default
configuration is FLUX.2's), examples/flux2_klein.py's offline tokenizer and FLUX.2's scheduler. Weights are
drawn there from seeded generators, in bfloat16. One process (the backend's autoload off) builds it on the CPU
and writes it once with `pipe.save_pretrained(folder)` (safetensors, bf16; the tied LM head is not written);
`--folder DIR` keeps that folder and reuses it on a later run (its depths are checked against the options),
else it is a temporary folder removed at the end.

Sides, one fresh process each (`--sides`, default all three), each loading the same folder:
  torch              `Flux2KleinPipeline.from_pretrained(folder, torch_dtype=torch.bfloat16)`: the CPU, the
                     backend's autoload off (no torch_neuronx in the process)
  neuron-to          the same, then `.to("neuron")`
  neuron-device-map  `Flux2KleinPipeline.from_pretrained(folder, torch_dtype=torch.bfloat16, device_map="neuron")`.
                     diffusers 0.42.1 takes a pipeline-level device_map only as a string, one of
                     `SUPPORTED_DEVICE_MAP = ["balanced", get_device(), "cpu"]` (pipelines/pipeline_utils.py), and
                     its `get_device()` (utils/torch_utils.py) answers "neuron" when torch_neuronx is loaded and
                     `torch.neuron.is_available()`; a device string is passed on as each component's own
                     `from_pretrained(..., device_map="neuron")` (diffusers' ModelMixin for the transformer and
                     the VAE, transformers' for the text encoder: pipeline_loading_utils.py `load_sub_model`),
                     and `pipe.hf_device_map` is "neuron" (a device, so `pipe.to()` stays allowed).
                     Not "neuron:0" or "auto" (not in that list: NotImplementedError "neuron:0 not supported.
                     Supported strategies are: balanced, neuron, cpu"), nor a dict or a torch.device (ValueError
                     "`device_map` must be a string."). "balanced" alone loads everything on the CPU
                     (`hf_device_map` None: accelerate's get_max_memory counts no neuron memory); with
                     `max_memory={0: ..., 1: ...}` it spreads whole components over neuron:0 and neuron:1
                     (accelerate warns "Device 0 is not available, available devices are []")
Every process runs with HF_HUB_OFFLINE=1. Before the baseline each side imports diffusers, transformers and the component classes and (neuron sides)
starts the device runtime (`torch.neuron.synchronize()`), so neither is counted as loading.

The torch side's parameters are the safetensors files' memory mapping (bf16 asked of bf16 files: no copy), so
its `from_pretrained` returns before reading them and its first image pays for the reads; the row "torch, weights
read" is the same process once it has read one byte of every 4 KiB page of every parameter and buffer (its load s
is both, its RSS what that left resident): the weights in the CPU's memory, as the neuron rows' are in the device's.

Columns, per side:
  load s           `from_pretrained` (then `.to("neuron")`) to `torch.neuron.synchronize()` returning (neuron
                   sides): the weights where they belong;  vs torch: that / torch's load s;  vs read: that /
                   "torch, weights read"'s
  peak RSS GB      the process's peak resident memory during the load above its resident memory just before it
                   (VmHWM reset to VmRSS by /proc/self/clear_refs, as benchmarks/flux_real.py's loading rows);
                   vs torch, vs read: that / those rows';  x weights: that / weights GB
  RSS after GB     resident memory after the load above the same baseline
  device GB        torch.neuron.memory_allocated() after the load; device peak GB: torch.neuron.max_memory_allocated()
                   during it (the peak reset at the baseline)
  weights GB       the bytes of the pipeline's parameters (text encoder, transformer, VAE; the tied embedding
                   counted once)
  on               the device types the parameters and buffers are on (component: types where they differ)
  check            a SHA-256 of the bytes of each of a few named tensors per model (the first, the last, some
                   evenly between and the largest of each model's saved keys), read on the host from the loaded
                   pipeline, against the same tensors' bytes read straight from the folder's safetensors files
                   (parsed here, without torch); "ok" where every one is equal, and dtype and shape too
On the CPU platform (the device's memory is host memory) the device's copy of the weights counts in a neuron
side's RSS; on Trainium it does not.

The load average at the start and the end, the CPU's name (flux_real.py's `_cpu_name`), the folder's size on disk
and the parameters of each model are printed with the table.

How long and how big: the real size is 7.98 B parameters, 16.0 GB of bf16 on disk (the text encoder 4.02 B, the
transformer 3.88 B, the VAE 0.084 B); the save process holds the whole pipeline on the host (its peak RSS is
printed), and so does each side's once its weights are resident (on the CPU platform the device's too). Each side reads the whole folder: nothing drops the page cache, so where the machine's
memory holds the folder beside a side's process (it was just written, or read by the side before) the reads come
from memory, else from the disk, whose speed is then most of the time. The smoke run `--text-layers 2 --blocks
1 1` (2.5 GB: the vocabulary stays real) takes about 80 s on 2 cores.
Run it alone: two processes loading at once on a small machine ruin both figures.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

from child_process import run_json_child
from flux_pipeline_real import QWEN3_4B, build_pipeline
from flux_real import KLEIN_4B, _cpu_name, _max_rss, _reset_peak_rss, _rss

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples")
SIDES = ("torch", "neuron-to", "neuron-device-map")
MODELS = ("text_encoder", "transformer", "vae")
PICKS = 6  # tensors per model checked, evenly spaced over its sorted saved keys (the largest added)


# ------------------------------------------------------------------------------ the folder's safetensors


def _safetensors_files(folder, model):
    d = os.path.join(folder, model)
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".safetensors"))


def _header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        head = json.loads(f.read(n))
    head.pop("__metadata__", None)
    return 8 + n, head


def file_digests(folder):
    """{model: {name: [dtype, shape, sha256]}} of the tensors checked, read from the safetensors files (a tensor's
    bytes there are its little-endian bytes in memory, which the sides hash)."""
    out = {}
    for model in MODELS:
        entries = {}
        for path in _safetensors_files(folder, model):
            start, head = _header(path)
            for name, info in head.items():
                entries[name] = (path, start, info)
        if not entries:
            raise SystemExit(f"{folder}/{model}: no safetensors files")
        names = sorted(entries)
        idx = {round(i * (len(names) - 1) / (PICKS - 1)) for i in range(PICKS)}
        picked = {names[i] for i in idx}
        picked.add(max(names, key=lambda k: entries[k][2]["data_offsets"][1] - entries[k][2]["data_offsets"][0]))
        digests = {}
        for name in sorted(picked):
            path, start, info = entries[name]
            a, b = info["data_offsets"]
            h = hashlib.sha256()
            with open(path, "rb") as f:
                f.seek(start + a)
                left = b - a
                while left:
                    chunk = f.read(min(left, 64 << 20))
                    h.update(chunk)
                    left -= len(chunk)
            digests[name] = [info["dtype"], list(info["shape"]), h.hexdigest()]
        out[model] = digests
    return out


def folder_bytes(folder):
    """Bytes on disk (allocated blocks) of every file under the folder."""
    total = 0
    for root, _, files in os.walk(folder):
        for f in files:
            total += os.stat(os.path.join(root, f)).st_blocks * 512
    return total


def folder_depths(folder):
    with open(os.path.join(folder, "text_encoder", "config.json")) as f:
        text = json.load(f)["num_hidden_layers"]
    with open(os.path.join(folder, "transformer", "config.json")) as f:
        cfg = json.load(f)
    return text, cfg["num_layers"], cfg["num_single_layers"]


# --------------------------------------------------------------------------------------------- children


def save_child(spec):
    """Builds the pipeline on the CPU in bf16 (flux_pipeline_real.py's build_pipeline) and saves it once."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    sys.path.insert(0, EXAMPLES)  # build_pipeline imports examples/flux2_klein.py's tokenizer
    from pipeline import _quiet

    _quiet()
    torch.set_grad_enabled(False)
    start = time.perf_counter()
    pipe, params = build_pipeline(spec, torch.bfloat16, "cpu")
    built = time.perf_counter() - start
    start = time.perf_counter()
    pipe.save_pretrained(spec["folder"])  # safetensors by default
    return {"build_s": built, "save_s": time.perf_counter() - start, "params": params, "peak_rss": _max_rss()}


def _host_digest(t):
    import torch

    host = t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
    return hashlib.sha256(memoryview(host.numpy())).hexdigest()


SAFETENSORS_DTYPES = {"bfloat16": "BF16", "float32": "F32", "float16": "F16", "int64": "I64", "int32": "I32"}


def load_child(spec):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gc

    import torch
    # everything loading imports, imported before the baseline (imports are not loading)
    from diffusers import AutoencoderKLFlux2, Flux2KleinPipeline, Flux2Transformer2DModel  # noqa: F401
    from transformers import Qwen2TokenizerFast, Qwen3ForCausalLM  # noqa: F401

    from pipeline import _quiet

    _quiet()
    side = spec["side"]
    neuron = side != "torch"
    torch.set_grad_enabled(False)
    if neuron:
        import torch_neuronx  # noqa: F401  (the autoload did this already; explicit for readers)

        def sync():
            torch.neuron.synchronize()
        sync()  # the device's runtime started before the baseline: it is not the pipeline's
    else:
        def sync():
            pass

    folder, dtype = spec["folder"], torch.bfloat16
    gc.collect()
    base = _rss()[0]
    _reset_peak_rss()
    if neuron:
        torch.neuron.reset_peak_memory_stats()
        device_base = torch.neuron.memory_allocated()
    start = time.perf_counter()
    if side == "torch":
        pipe = Flux2KleinPipeline.from_pretrained(folder, torch_dtype=dtype)
    elif side == "neuron-to":
        pipe = Flux2KleinPipeline.from_pretrained(folder, torch_dtype=dtype).to("neuron")
    else:
        pipe = Flux2KleinPipeline.from_pretrained(folder, torch_dtype=dtype, device_map="neuron")
    sync()
    seconds = time.perf_counter() - start
    cur, peak = _rss()
    res = {"side": side, "seconds": seconds, "peak_above": peak - base, "after_above": cur - base,
           "baseline_rss": base, "peak_rss_life": _max_rss(),
           "hf_device_map": repr(getattr(pipe, "hf_device_map", None))}
    if neuron:
        res["device"] = torch.neuron.memory_allocated() - device_base
        res["device_peak"] = torch.neuron.max_memory_allocated() - device_base
    else:  # the weights are the files' mapping, read on first use: read every page of them once
        start = time.perf_counter()
        seen = set()
        for name in MODELS:
            for t in [*getattr(pipe, name).parameters(), *getattr(pipe, name).buffers()]:
                if t.data_ptr() in seen or not t.numel():
                    continue
                seen.add(t.data_ptr())
                t.detach().reshape(-1).view(torch.uint8)[::4096].sum()  # a byte of each 4 KiB page
        res["read_s"] = time.perf_counter() - start
        cur, peak = _rss()
        res["read_peak_above"], res["read_after_above"] = peak - base, cur - base
    weights, params, where, dtypes, check = 0, {}, {}, {}, {}
    for name in MODELS:
        model = getattr(pipe, name)
        ps = list(model.parameters())  # a tied parameter once
        params[name] = sum(p.numel() for p in ps)
        weights += sum(p.numel() * p.element_size() for p in ps)
        where[name] = sorted({t.device.type for t in [*ps, *model.buffers()]})
        dtypes[name] = sorted({str(p.dtype).removeprefix("torch.") for p in ps})
        tensors = model.state_dict()
        got = {}
        for key, (dt, shape, _) in spec["digests"][name].items():
            t = tensors.get(key)
            if t is None:
                got[key] = None
                continue
            got[key] = [SAFETENSORS_DTYPES.get(str(t.dtype).removeprefix("torch."), str(t.dtype)), list(t.shape),
                        _host_digest(t)]
        check[name] = got
    res.update(weights_bytes=weights, params=params, where=where, dtypes=dtypes, check=check)
    return res


# ----------------------------------------------------------------------------------------------- parent


def _check(r, ref):
    """'ok', or what differs from the files' digests."""
    bad = [f"{m}.{k}" for m in MODELS for k, v in ref[m].items() if r["check"][m].get(k) != v]
    n = sum(len(v) for v in ref.values())
    return "ok" if not bad else f"{len(bad)} of {n} differ ({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''})"


def _where(r):
    kinds = {tuple(v) for v in r["where"].values()}
    if len(kinds) == 1:
        return ",".join(next(iter(kinds)))
    return "; ".join(f"{m}: {','.join(v)}" for m, v in r["where"].items())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--text-layers", type=int, default=QWEN3_4B["num_hidden_layers"],
                    help="the text encoder's depth (default the real 36)")
    ap.add_argument("--blocks", type=int, nargs=2, default=(KLEIN_4B["num_layers"], KLEIN_4B["num_single_layers"]),
                    metavar=("DOUBLE", "SINGLE"), help="the transformer's depth (default the real 5 20)")
    ap.add_argument("--folder", help="keep the saved pipeline here, and reuse it if it is already there (default: a "
                                     "temporary folder removed at the end)")
    ap.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    ap.add_argument("--timeout", type=float, default=3 * 3600, help="seconds allowed to one process")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps({"save": save_child, "load": load_child}[spec["role"]](spec)))
        return 0
    if args.text_layers < 1 or min(args.blocks) < 0:
        raise SystemExit("--text-layers must be at least 1 and --blocks at least 0")
    sides = [s for s in SIDES if s in args.sides]  # torch first: the ratios' reference
    started = time.perf_counter()
    load_start = os.getloadavg()
    double, single = args.blocks
    tmp = None
    if args.folder:
        folder = os.path.abspath(args.folder)
    else:
        tmp = tempfile.mkdtemp(prefix="pipeline_loading-")
        folder = os.path.join(tmp, "pipeline")
    settings = {"HF_HUB_OFFLINE": "1"}
    saved, results, failed = None, {}, {}
    try:
        if os.path.exists(os.path.join(folder, "model_index.json")):
            have = folder_depths(folder)
            if have != (args.text_layers, double, single):
                raise SystemExit(f"{folder} holds text layers {have[0]}, blocks {have[1]} {have[2]}: not "
                                 f"--text-layers {args.text_layers} --blocks {double} {single} (another folder, or "
                                 f"remove it)")
            print(f"... reusing {folder}", file=sys.stderr, flush=True)
        elif os.path.isdir(folder) and os.listdir(folder):
            raise SystemExit(f"{folder} is not empty and holds no saved pipeline (model_index.json)")
        else:
            print(f"... building and saving to {folder}", file=sys.stderr, flush=True)
            spec = dict(role="save", folder=folder, text_layers=args.text_layers, double=double, single=single)
            saved = run_json_child(__file__, spec, label="save", autoload=False, timeout=args.timeout,
                                   settings=settings)
            print(f"    built {saved['build_s']:.1f} s, saved {saved['save_s']:.1f} s", file=sys.stderr, flush=True)
        disk = folder_bytes(folder)
        t0 = time.perf_counter()
        digests = file_digests(folder)
        digest_s = time.perf_counter() - t0
        for side in sides:
            print(f"... {side}", file=sys.stderr, flush=True)
            spec = dict(role="load", side=side, folder=folder, digests=digests)
            t0 = time.perf_counter()
            try:
                r = run_json_child(__file__, spec, label=side, autoload=side != "torch", timeout=args.timeout,
                                   settings=settings)
            except (SystemExit, subprocess.TimeoutExpired) as e:  # the others still run
                failed[side] = str(e)
                print(f"    failed: {e}", file=sys.stderr, flush=True)
                continue
            r["wall_s"] = time.perf_counter() - t0
            results[side] = r
            print(f"    loaded {r['seconds']:.1f} s, peak RSS +{r['peak_above'] / 1e9:.2f} GB; {r['wall_s']:.0f} s "
                  f"in all", file=sys.stderr, flush=True)
        report(args, sides, results, failed, digests, saved, folder, disk, digest_s, load_start,
               time.perf_counter() - started)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


def report(args, sides, results, failed, digests, saved, folder, disk, digest_s, load_start, elapsed):
    import platform

    double, single = args.blocks
    ref = results.get("torch")
    print("FLUX.2-klein-4B pipeline (Flux2KleinPipeline, bfloat16, random seeded weights) loaded from a "
          "save_pretrained folder (safetensors)")
    any_r = next(iter(results.values()), None)
    p = (any_r or {}).get("params") or (saved or {}).get("params")
    if p:
        print(f"text encoder Qwen3-4B: {args.text_layers} of 36 layers, {p['text_encoder'] / 1e9:.2f} B parameters; "
              f"transformer: {double} double + {single} single blocks (real 5 + 20), {p['transformer'] / 1e9:.2f} B; "
              f"VAE {p['vae'] / 1e9:.3f} B")
    how = ("kept" if args.folder else "temporary") + (
        ", reused" if saved is None else f", built in {saved['build_s']:.0f} s and saved in {saved['save_s']:.0f} s, "
                                         f"that process's peak RSS {saved['peak_rss'] / 1e9:.1f} GB")
    print(f"folder {folder} ({how}): {disk / 1e9:.2f} GB on disk; the files' digests read in {digest_s:.1f} s")
    print(f"{platform.machine()}, {os.cpu_count()} CPUs ({_cpu_name()}); load average {load_start[0]:.2f} at the "
          f"start, {os.getloadavg()[0]:.2f} at the end")
    print()
    rows = []
    for side in sides:
        r = results.get(side)
        rows.append((side, r))
        if side == "torch" and r is not None:  # the same process, its mapped weights then read once
            rows.append(("torch, weights read", dict(r, seconds=r["seconds"] + r["read_s"],
                                                     peak_above=r["read_peak_above"],
                                                     after_above=r["read_after_above"])))
    read = next((r for name, r in rows if name == "torch, weights read"), None)

    def ratio(r, base, key):
        return f"{r[key] / base[key]:.2f}x" if base and base[key] > 0 else ""

    head = ("| side | load s | vs torch | vs read | peak RSS GB | vs torch | vs read | x weights | RSS after GB | "
            "device GB | device peak GB | weights GB | on | check |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for side, r in rows:
        if r is None:
            print(f"| {side} | failed |" + " |" * (head.count("|") - 3))
            continue
        dev = f"{r['device'] / 1e9:.2f}" if "device" in r else ""
        dev_peak = f"{r['device_peak'] / 1e9:.2f}" if "device_peak" in r else ""
        print(f"| {side} | {r['seconds']:.2f} | {ratio(r, ref, 'seconds')} | {ratio(r, read, 'seconds')} | "
              f"{r['peak_above'] / 1e9:.2f} | {ratio(r, ref, 'peak_above')} | {ratio(r, read, 'peak_above')} | "
              f"{r['peak_above'] / r['weights_bytes']:.2f} | {r['after_above'] / 1e9:.2f} | {dev} | {dev_peak} | "
              f"{r['weights_bytes'] / 1e9:.2f} | {_where(r)} | {_check(r, digests)} |")
    notes = []
    n = sum(len(v) for v in digests.values())
    notes.append(f"check: {n} tensors ({', '.join(f'{m} {len(v)}' for m, v in digests.items())}) against the files")
    for side, r in results.items():
        odd = {m: v for m, v in r["dtypes"].items() if v != ["bfloat16"]}
        if odd:
            notes.append(f"{side}: parameters not bf16: {odd}")
        if side == "neuron-device-map":
            notes.append(f"{side}: pipe.hf_device_map = {r['hf_device_map']}")
    for side, why in failed.items():
        notes.append(f"{side} failed: {why}")
    print("\n" + "\n".join(notes))
    base = ", ".join(f"{s} {r['baseline_rss'] / 1e9:.2f} GB" for s, r in results.items())
    print(f"\n(RSS before loading: {base}; {elapsed:.0f} s in all)")


if __name__ == "__main__":
    sys.exit(main())
