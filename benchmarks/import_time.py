"""What the autoload adds to `import torch`: medians of fresh interpreters, with and without it.

    python benchmarks/import_time.py [--runs N]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

CODE = "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"


def _time(autoload: bool) -> float:
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "1" if autoload else "0"}
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, env=env, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    with_, without = [], []
    for _ in range(args.runs):  # interleaved, so drift on a noisy machine hits both
        without.append(_time(False))
        with_.append(_time(True))
    a, b = statistics.median(with_), statistics.median(without)
    print(f"{'import torch':<28}{'median s':>10}")
    print(f"{'without torch_neuronx':<28}{b:>10.3f}")
    print(f"{'with torch_neuronx autoload':<28}{a:>10.3f}")
    print(f"{'added by the autoload':<28}{a - b:>10.3f}   (target: at most 0.300)")


if __name__ == "__main__":
    main()
