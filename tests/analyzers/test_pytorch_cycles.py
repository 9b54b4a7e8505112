"""A PyTorch profiler `schedule(..., repeat=n)` writes one trace per cycle into the same folder
(`<worker>.<time_ns>.pt.trace.json.gz`): the cycles of one worker are one worker, not several.
`data/pytorch-cpu-cycles/` holds 3 cycles of 3 steps of one process
(`tests/analyzers/torch_cycles_job.py`, torch 2.13.0 CPU)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from analyzers.ingest.logdir import choose_cycles, load_run
from analyzers.report import analyze

CYCLES = sorted((Path(__file__).parent / "data" / "pytorch-cpu-cycles").glob("*.pt.trace.json.gz"))


def _folder(tmp: Path, workers: tuple[str, ...] = ("vm_21481",), cycles=CYCLES) -> Path:
    run = tmp / "tb"
    run.mkdir()
    for w in workers:
        for f in cycles:
            shutil.copy(f, run / f.name.replace("vm_21481", w))
    return run


def test_the_cycles_of_one_worker_are_one_worker(tmp_path):
    report = analyze(_folder(tmp_path))
    assert report.ctx.hosts == ["vm_21481"] and report.ctx.n_devices == 1
    assert report.ctx.n_steps == 3  # the last cycle's steps, not 9 across three "hosts"
    assert report.run.trace_files == [tmp_path / "tb" / CYCLES[-1].name]
    assert any("2 other PyTorch profiling cycle(s)" in w and "cycle 3 of 3" in w
               for w in report.run.warnings)
    # Read as three workers, the second cycle's first step (a backward pass the others lacked
    # at the window's edge) was a `high` stall.
    assert not [f for f in report.findings if f.severity != "low"], report.findings


def test_each_worker_keeps_its_last_cycle(tmp_path):
    run = load_run(_folder(tmp_path, ("vm_100", "vm_200")))
    assert run.hosts == ["vm_100", "vm_200"]
    assert {f.name.split(".")[1] for f in run.trace_files} == {CYCLES[-1].name.split(".")[1]}
    assert any("4 other" in w for w in run.warnings)


def test_one_cycle_per_worker_and_a_chosen_file_are_read_whole(tmp_path):
    ranks = load_run(_folder(tmp_path, ("vm_100", "vm_200"), cycles=CYCLES[:1]))
    assert ranks.hosts == ["vm_100", "vm_200"] and not ranks.warnings
    first = load_run(CYCLES[0])  # an earlier cycle, analyzed by its path
    assert first.hosts == ["vm_21481"] and not first.warnings


@pytest.mark.parametrize(("spec", "index"), [("cycle:1", 0), ("cycle:-2", 1), ("cycle2", 1),
                                             ("tb:cycle:3", 2), ("cycle:-1", 2)])
def test_run_picks_a_cycle_of_every_worker(tmp_path, spec, index):
    run = load_run(_folder(tmp_path, ("vm_100", "vm_200")), spec)
    stamp = CYCLES[index].name.split(".")[1]
    assert run.hosts == ["vm_100", "vm_200"]
    assert [f.name.split(".")[1] for f in run.trace_files] == [stamp, stamp]
    assert any(f"cycle {index + 1} of 3" in w for w in run.warnings), run.warnings


@pytest.mark.parametrize("spec", ["cycle:0", "cycle:4", "cycle:-4"])
def test_a_cycle_the_workers_lack_is_an_error(tmp_path, spec):
    with pytest.raises(ValueError, match="the workers have 3"):
        load_run(_folder(tmp_path), spec)


def test_a_worker_with_fewer_cycles(tmp_path):
    folder = _folder(tmp_path, ("vm_100",))
    shutil.copy(CYCLES[-1], folder / CYCLES[-1].name.replace("vm_21481", "vm_200"))
    assert len(load_run(folder).hosts) == 2  # each one's last cycle
    assert len(load_run(folder, "cycle:1").hosts) == 2
    with pytest.raises(ValueError, match="worker vm_200: it has 1"):
        load_run(folder, "cycle:2")


def test_a_run_folder_named_like_a_cycle_is_that_run(tmp_path):
    for name in ("cycle1", "cycle2"):
        run = tmp_path / "plugins" / "profile" / name
        run.mkdir(parents=True)
        shutil.copy(CYCLES[0], run / CYCLES[0].name)
    assert load_run(tmp_path, "cycle1").run_dir.name == "cycle1"
    assert load_run(tmp_path).run_dir.name == "cycle2"


def test_cli_run_cycle(tmp_path, capsys):
    from recadvisor.cli import main

    folder = _folder(tmp_path)
    assert main(["analyze", str(folder), "--run", "cycle:1", "--format", "json"]) == 0
    assert "cycle 1 of 3" in capsys.readouterr().out
    assert main(["analyze", str(folder), "--run", "cycle:9"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no profiling cycle 9" in err and len(err.splitlines()) == 1


def test_diff_compares_two_cycles_of_one_folder(tmp_path, capsys):
    import json

    from recadvisor.cli import main

    folder = _folder(tmp_path)
    assert main(["diff", str(folder), "--run-before", "cycle:1", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["before"]["cycle"] == {"chosen": 1, "count": 3}
    assert d["after"]["cycle"] == {"chosen": 3, "count": 3}
    assert d["speedup"] and d["before"]["mean_step_ms"] != d["after"]["mean_step_ms"]
    assert main(["diff", str(folder), "--run-before", "cycle:1", "--run-after", "cycle:2"]) == 0
    assert "(cycle 1 of 3)  after: tb (cycle 2 of 3)" in capsys.readouterr().out
    # One folder without cycle names has one run: nothing to compare.
    assert main(["diff", str(folder)]) == 2
    assert "one profile run" in capsys.readouterr().err


def test_choose_cycles_keeps_other_names():
    names = ["w.1700000000000.pt.trace.json", "w.1700000005000.pt.trace.json",
             "v.1700000001000.pt.trace.json.gz", "rank0.json.gz", "host.trace.json.gz",
             "w.12.pt.trace.json"]  # too short for a timestamp: a plain name
    chosen = choose_cycles([Path(n) for n in names])
    kept, left_out = chosen.files, chosen.left_out
    assert (chosen.count, chosen.chosen) == (2, 2)
    assert [p.name for p in kept] == ["host.trace.json.gz", "rank0.json.gz",
                                      "v.1700000001000.pt.trace.json.gz",
                                      "w.12.pt.trace.json", "w.1700000005000.pt.trace.json"]
    assert left_out == 1
