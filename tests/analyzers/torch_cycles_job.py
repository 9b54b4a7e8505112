"""How `data/pytorch-cpu-cycles/` was recorded: a PyTorch profiler schedule of 3 cycles
(`repeat=3`) over a small MLP on the CPU, each cycle's trace written by
`tensorboard_trace_handler` into the same folder.

    python torch_cycles_job.py OUT      # needs torch (2.13.0 CPU here); not run by the tests
"""

import sys

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


def main(out: str) -> None:
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(512, 256), torch.randn(512, 1)
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=1, warmup=1, active=3, repeat=3),
                 on_trace_ready=tensorboard_trace_handler(out, use_gzip=True)) as prof:
        for _ in range(16):
            with torch.profiler.record_function("## forward ##"):
                loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()


if __name__ == "__main__":
    main(sys.argv[1])
