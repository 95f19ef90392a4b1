"""2 plain processes (no torchrun, which would stop the survivor): rank 1 is killed while rank 0
waits in an all_reduce; rank 0 must fail within the group's timeout, naming rank 1."""
import datetime
import os
import signal
import time

import torch
import torch.distributed as dist

from distributed_harness import report

rank = int(os.environ["RANK"])
dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=30))
x = torch.ones(1 << 20, device="neuron")
dist.all_reduce(x)  # both alive: a normal collective first
report("first", float(x[0].item()))
if rank == 1:
    time.sleep(1.0)  # let rank 0 enter the collective
    os.kill(os.getpid(), signal.SIGKILL)
start = time.monotonic()
try:
    dist.all_reduce(x)
    report("error", None)
except Exception as e:
    report("error", {"type": type(e).__name__, "message": str(e)})
report("seconds", time.monotonic() - start)
os._exit(0)
