"""Real multi-process runs for the distributed tests: `launch()` starts a worker script under torchrun
(one process per rank, each owning one core through LOCAL_RANK) and returns what each rank reported.

A worker calls `report(name, value)` for each check it makes; the values (JSON) come back per rank,
so one launch serves many tests (a launch costs a few seconds: each rank starts jax).
"""
from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
WORKERS = HERE / "dist_workers"
_results: dict = {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LaunchError(AssertionError):
    pass


def launch(script: str, nproc: int = 2, args=(), env=None, timeout: float = 300, nnodes: int = 1,
           expect_failure: bool = False, tmp_path=None, torchrun: bool = True) -> dict:
    """Run tests/dist_workers/<script> under torchrun; {rank: {name: value}} from every rank's reports.

    nnodes > 1 starts one torchrun per node on loopback (c10d rendezvous), like separate machines.
    torchrun=False starts the ranks as plain processes with torchrun's variables (RANK, LOCAL_RANK, ...):
    torchrun stops every rank as soon as one fails, which a test of what the survivors see cannot use.
    Raises LaunchError with every rank's output when the run fails (unless expect_failure), or on timeout."""
    out_dir = pathlib.Path(tmp_path) if tmp_path else pathlib.Path(os.environ.get("TMPDIR", "/tmp"))
    out_dir = out_dir / f"dist_{script.removesuffix('.py')}_{os.getpid()}_{free_port()}"
    out_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    full_env = dict(os.environ)
    full_env.update({
        "PYTHONPATH": os.pathsep.join([str(HERE), full_env.get("PYTHONPATH", "")]),
        "NEURON_DIST_RESULTS": str(out_dir),
        "PYTHONUNBUFFERED": "1",
    })
    full_env.pop("NEURON_RT_VISIBLE_CORES", None)
    full_env.update(env or {})
    procs = []
    if not torchrun:
        for rank in range(nproc):
            rank_env = dict(full_env, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
                            LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            log = open(out_dir / f"node{rank}.log", "w")
            cmd = [sys.executable, str(WORKERS / script), *map(str, args)]
            procs.append((subprocess.Popen(cmd, env=rank_env, stdout=log, stderr=subprocess.STDOUT), log))
    for node in range(nnodes if torchrun else 0):
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", f"--nnodes={nnodes}"]
        if nnodes == 1:
            cmd += ["--master_addr=127.0.0.1", f"--master_port={port}"]
        else:
            cmd += [f"--node_rank={node}", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}",
                    "--rdzv_id=neuron_test"]
        cmd += [str(WORKERS / script), *map(str, args)]
        log = open(out_dir / f"node{node}.log", "w")
        procs.append((subprocess.Popen(cmd, env=full_env, stdout=log, stderr=subprocess.STDOUT), log))
    failed = False
    try:
        for p, _ in procs:
            p.wait(timeout=timeout)
            failed |= p.returncode != 0
    except subprocess.TimeoutExpired:
        for p, _ in procs:
            p.kill()
        raise LaunchError(f"{script}: no result within {timeout} s\n{_logs(out_dir)}") from None
    finally:
        for _, log in procs:
            log.close()
    if failed and not expect_failure:
        raise LaunchError(f"{script} failed\n{_logs(out_dir)}")
    results = {}
    for f in sorted(out_dir.glob("rank*.json")):
        results[int(f.stem[4:])] = json.loads(f.read_text())
    results["log"] = _logs(out_dir)
    return results


def _logs(out_dir) -> str:
    return "\n".join(f"--- {f.name}\n{f.read_text()[-6000:]}" for f in sorted(pathlib.Path(out_dir).glob("node*.log")))


def report(name: str, value) -> None:
    """In a worker: record `value` (JSON-able) under `name`; written at once, so a rank that dies
    later keeps what it reported."""
    rank = int(os.environ.get("RANK", "0"))
    _results[name] = value
    path = pathlib.Path(os.environ["NEURON_DIST_RESULTS"]) / f"rank{rank}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(_results))
    tmp.replace(path)
