"""The default run's one launch of 2 ranks (each launch costs seconds of start-up per rank): the DDP
checks (training_ddp.py), the FSDP2 checks (training_fsdp.py) with a distributed checkpoint saved in
argv[1], and that checkpoint resumed by rank 0 alone, on a group of 1 rank (training_dcp.py), while
rank 1 waits. The slow tests resume it in fresh launches (4 ranks; 2 after a killed rank).
"""
import pathlib
import sys

import torch.distributed as dist

import training_dcp
import training_ddp
import training_fsdp
from training_support import check, finish, init

RANK, WORLD = init()
folder = pathlib.Path(sys.argv[1])
training_ddp.main()
training_fsdp.main(folder)
alone = dist.new_group([0])  # every rank makes the group; rank 0 is its only member
if RANK == 0:
    check("dcp_resume_on_one_rank", training_dcp.resume(folder, saved_at=2, steps=4, group=alone))
finish()
