"""One rank per "node": two torchrun agents on loopback meeting through the c10d rendezvous."""
import os

import torch
import torch.distributed as dist

from distributed_harness import report

dist.init_process_group(backend="neuron")
rank = dist.get_rank()
x = torch.arange(4, dtype=torch.float32, device="neuron") * (rank + 1)
dist.all_reduce(x)
g = torch.empty(2, 4, device="neuron")
dist.all_gather_into_tensor(g, x * 0 + rank)
report("result", {"rank": rank, "world": dist.get_world_size(), "group_rank": int(os.environ["GROUP_RANK"]),
                  "local_rank": int(os.environ["LOCAL_RANK"]), "current_device": torch.neuron.current_device(),
                  "all_reduce": x.cpu().tolist(), "all_gather": g.cpu().tolist()})
dist.destroy_process_group()
