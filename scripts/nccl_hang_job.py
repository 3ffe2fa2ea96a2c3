"""A two-rank job whose rank 1 skips one all-reduce, so rank 0's collective hangs until its timeout (issue 7).

Run one process per rank (scripts/h200x2-nccl-hang.sh does): RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
come from the environment. `--backend nccl` needs one GPU per rank and torch with CUDA; `--backend gloo`
runs on CPUs. Never creates NVLink multicast objects: the launcher keeps NCCL_NVLS_ENABLE=0.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--backend", choices=["nccl", "gloo"], default="nccl")
    args.add_argument("--timeout-s", type=float, default=20.0, help="process-group timeout")
    args.add_argument("--steps", type=int, default=8)
    args.add_argument("--skip-step", type=int, default=5, help="the step whose all-reduce rank 1 skips")
    args.add_argument("--idle-s", type=float, default=45.0, help="how long rank 1 idles after skipping")
    args.add_argument("--numel", type=int, default=1 << 20)
    opts = args.parse_args()

    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device(f"cuda:{rank}") if opts.backend == "nccl" else torch.device("cpu")
    if opts.backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(opts.backend, rank=rank, world_size=world, timeout=timedelta(seconds=opts.timeout_s),
                            **({"device_id": device} if opts.backend == "nccl" else {}))
    print(f"[rank{rank}]: nccl_hang_job: rank {rank} of {world} on {device}, backend {opts.backend}, "
          f"timeout {opts.timeout_s:g} s, skip step {opts.skip_step} on rank 1", flush=True)
    dist.barrier()  # SeqNum 1; step k's all-reduce is SeqNum k + 2
    tensor = torch.ones(opts.numel, device=device)
    for step in range(opts.steps):
        if rank == 1 and step == opts.skip_step:
            print(f"[rank{rank}]: step {step} skipping all_reduce (fault injection); idling {opts.idle_s:g} s "
                  "without collectives", flush=True)
            time.sleep(opts.idle_s)  # another collective now would reuse rank 0's SeqNum and time out too
            print(f"[rank{rank}]: done idling; exiting without destroy_process_group", flush=True)
            os._exit(0)
        tensor.fill_(rank + 1.0)
        dist.all_reduce(tensor)
        if opts.backend == "nccl":
            torch.cuda.synchronize(device)  # the watchdog, not this wait, is what times out on rank 0
        print(f"[rank{rank}]: step {step} all_reduce ok (sum {tensor[0].item():g})", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
