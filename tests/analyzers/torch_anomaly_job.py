"""How `data/pytorch-cpu-anomaly/` was recorded: a small recommender step (an EmbeddingBag of
100,000 x 32 over 26 ids per example, batch 512, a 32-256-256-1 MLP, SGD) on the CPU, with or
without `torch.autograd.set_detect_anomaly(True)`; 50 steps timed untraced (printed as
`untraced_step_ms=`), then 10 profiled with `tensorboard_trace_handler`.

    python torch_anomaly_job.py OUT anomaly|none  # torch 2.13.0 CPU here; not run by the tests
"""

import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


def main(out: str, mode: str) -> None:
    torch.manual_seed(0)
    emb = torch.nn.EmbeddingBag(100_000, 32, mode="sum")
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                              torch.nn.ReLU(), torch.nn.Linear(256, 1))
    opt = torch.optim.SGD([*emb.parameters(), *mlp.parameters()], lr=0.01)
    ids, y = torch.randint(0, 100_000, (512, 26)), torch.rand(512, 1)
    if mode == "anomaly":
        torch.autograd.set_detect_anomaly(True)

    def step() -> None:
        loss = torch.nn.functional.binary_cross_entropy_with_logits(mlp(emb(ids)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    for _ in range(5):
        step()
    t = time.perf_counter()
    for _ in range(50):
        step()
    print(f"untraced_step_ms={(time.perf_counter() - t) / 50 * 1e3:.3f}", flush=True)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=10),
                 on_trace_ready=tensorboard_trace_handler(out, use_gzip=True)) as prof:
        for _ in range(12):
            step()
            prof.step()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
