"""A stand-in trial worker for the tuner's tests: speaks tuner.protocol with a throughput that is
a fixed function of the configuration, in milliseconds instead of a TensorFlow start-up.

FAKE_TRIAL_PLAN="2=crash,3=hang" makes the named trials misbehave (the trial number is read from
the request file's name): crash (abort, SIGABRT), hang (no output, sleeps), fail (one error line,
exit 2), oom (holds 400 MB), slow (sleeps FAKE_SLOW_S before answering),
stall (one progress report, then silence). FAKE_PID_DIR gets one
file per running worker named after its pid.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tuner import protocol  # noqa: E402


def throughput(cfg: dict) -> float:
    v = 10_000.0
    v *= 4.0 if cfg["record_format"] == "prebatched" else 1.0
    v *= 1.5 if cfg["compression"] == "none" else 1.0
    v *= {1: 0.5, 2: 1.0, 4: 1.2, 8: 0.9}.get(cfg["devices"], 1.0)
    v *= 1.3 if cfg["prefetch"] != 0 else 1.0
    return v


def main() -> int:
    req_path = Path(sys.argv[1])
    req = json.loads(req_path.read_text())
    m = re.search(r"trial-(\d+)", req_path.name)
    trial = int(m.group(1)) if m else -1
    plan = dict(item.split("=") for item in os.environ.get("FAKE_TRIAL_PLAN", "").split(",")
                if "=" in item)
    action = plan.get(str(trial), "")
    if os.environ.get("FAKE_PID_DIR"):
        Path(os.environ["FAKE_PID_DIR"], str(os.getpid())).write_text(str(trial))
    if action == "crash":
        os.abort()
    if action == "hang":
        time.sleep(3600)
    if action == "fail":
        print("some traceback noise", file=sys.stderr)
        print("error: ValueError: this trial's data is unreadable", file=sys.stderr)
        return 2
    if action == "oom":
        hog = bytearray(400 * 2**20)
        hog[::4096] = b"x" * len(hog[::4096])
        time.sleep(3600)
    if action == "slow":
        time.sleep(float(os.environ.get("FAKE_SLOW_S", "5")))
    cfg = req["config"]
    value = throughput(cfg)
    print("noise a training job prints", flush=True)
    seconds = float(req["measure_seconds"])
    steps = 0
    t0 = time.perf_counter()
    if action == "stall":  # one report, then nothing: hung in the middle of its timed window
        print(protocol.encode({"event": "progress", "steps": 1, "elapsed_s": 0.1,
                               "samples_per_s": value}), flush=True)
        time.sleep(3600)
    while time.perf_counter() - t0 < seconds:
        time.sleep(seconds / 4)
        steps += 1
        print(protocol.encode({"event": "progress", "steps": steps,
                               "elapsed_s": time.perf_counter() - t0, "samples_per_s": value}),
              flush=True)
    print(protocol.encode({"event": "result", "samples_per_s": value, "steps": steps,
                           "step_time_ms": None, "run_dir": None}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
