"""How `data/pytorch-cpu-gloo/` was recorded: PyTorch DistributedDataParallel on the CPU (gloo),
two ranks on this machine, each profiled into the same folder (one trace file per rank).

    python torch_ddp_job.py OUT MODE      # needs torch (2.13.0 CPU here); not run by the tests

MODE:
- `balanced`: two ranks of a 64-512-512-1 MLP, 256 examples each, one intra-op thread each.
- `slow1`: the same, rank 1 running 12 more 512x512 matmuls per step (a straggler).
- `single`: one rank with the global batch (512) and both cores' threads: what "fewer ranks,
  more threads" gives.
Rank 0 prints `untraced_step_ms=` (50 steps timed before the profiler starts); the profiler
records 6 steps after 1 skipped and 2 warm-up steps.
"""

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

STRAGGLER_MATMULS = 12


def run(rank: int, world: int, out: str, mode: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    torch.set_num_threads(2 if mode == "single" else 1)  # one process gets both cores
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    per_rank = 512 if mode == "single" else 256  # one rank takes the global batch
    x, y = torch.randn(per_rank, 64), torch.rand(per_rank, 1)
    extra = torch.randn(512, 512)

    def step() -> None:
        if mode == "slow1" and rank == 1:
            m = extra
            for _ in range(STRAGGLER_MATMULS):
                m = torch.tanh(m @ extra)
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(10):
        step()
    t = time.perf_counter()
    for _ in range(50):
        step()
    if rank == 0:
        print(f"untraced_step_ms={(time.perf_counter() - t) / 50 * 1e3:.3f}", flush=True)
    handler = torch.profiler.tensorboard_trace_handler(out, worker_name=f"rank{rank}")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=torch.profiler.schedule(wait=1, warmup=2, active=6),
                                on_trace_ready=handler) as prof:
        for _ in range(9):
            step()
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    out_dir, job_mode = sys.argv[1], sys.argv[2]
    n = 1 if job_mode == "single" else 2
    mp.spawn(run, args=(n, out_dir, job_mode), nprocs=n)
