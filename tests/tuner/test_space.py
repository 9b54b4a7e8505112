"""The search-space file: loading, validation errors, resolution against a start config."""

import optuna
import pytest

from reference_model.config import AUTOTUNE
from reference_model.presets import get_preset
from tuner.space import DEFAULT_SPACE, SearchSpace


def _write(tmp_path, text):
    p = tmp_path / "space.toml"
    p.write_text(text)
    return p


def test_default_space_covers_the_issue_knobs():
    names = SearchSpace.load().names()
    for knob in ("devices", "batch_size", "cycle_length", "block_length",
                 "interleave_parallelism", "prefetch", "threadpool", "compression",
                 "record_format", "cast", "input_copy", "fused_tables", "embedding_split", "xla",
                 "mixed_precision"):
        assert knob in names
    assert DEFAULT_SPACE.is_file()


def test_resolve_keeps_the_start_exact_and_drops_gpu_knobs_on_cpu():
    start = get_preset("default").config().replace(batch_size=3072, cycle_length=3,
                                                   interleave_parallelism=3)
    space, notes = SearchSpace.load().resolve(start, accelerator="CPU", accelerator_count=2)
    assert "mixed_precision" not in space.names()
    assert any("mixed_precision" in n for n in notes)
    params, moved = space.params_for(start.to_dict())
    assert moved == []
    assert params["batch_size"] == 3072 and params["cycle_length"] == 3
    changes = space.config_changes(params, start.to_dict())
    assert start.replace(**changes) == start


def test_resolve_on_gpu_limits_devices_and_keeps_mixed_precision():
    start = get_preset("clean").config()
    space, notes = SearchSpace.load().resolve(start, accelerator="GPU", accelerator_count=2)
    devices = next(k for k in space.knobs if k.name == "devices")
    assert max(devices.choices) == 2
    assert "mixed_precision" in space.names()
    assert any("GPU" in n for n in notes)


def test_frozen_knobs_are_not_tuned():
    start = get_preset("clean").config()
    space, notes = SearchSpace.load().resolve(
        start, accelerator="CPU", accelerator_count=2,
        frozen={"record_format": "fixed by --data", "compression": "fixed by --data"})
    assert "record_format" not in space.names() and "compression" not in space.names()
    assert any("fixed by --data" in n for n in notes)


def test_conditional_knob_and_otherwise_and_clamp():
    space, _ = SearchSpace.load().resolve(get_preset("default").config(), accelerator="CPU",
                                          accelerator_count=2)
    start = get_preset("default").config().to_dict()  # per-example records, parsed one by one
    ch = space.config_changes({"record_format": "prebatched", "parse": "per_example",
                               "cycle_length": 2, "interleave_parallelism": 8}, start)
    assert ch["parse"] == "batched"  # prebatched records are parsed a batch at a time
    assert ch["interleave_parallelism"] == 2  # TF refuses more than cycle_length
    ch = space.config_changes({"cycle_length": 2, "interleave_parallelism": AUTOTUNE}, start)
    assert ch["interleave_parallelism"] == AUTOTUNE
    get_preset("default").config().replace(**ch).validate()


def test_suggest_samples_only_active_knobs():
    space, _ = SearchSpace.load().resolve(get_preset("clean").config(), accelerator="CPU",
                                          accelerator_count=2)
    study = optuna.create_study()
    study.enqueue_trial({"record_format": "prebatched"})
    t = study.ask()
    params = space.suggest(t, get_preset("clean").config().to_dict())
    assert params["record_format"] == "prebatched" and "parse" not in params
    study.enqueue_trial({"record_format": "example"})
    t = study.ask()
    assert "parse" in space.suggest(t, get_preset("clean").config().to_dict())


def test_params_for_snaps_to_the_nearest_choice():
    space, _ = SearchSpace.load().resolve(get_preset("clean").config(), accelerator="CPU",
                                          accelerator_count=2)
    cfg = get_preset("clean").config().replace(cycle_length=12, interleave_parallelism=12)
    params, notes = space.params_for(cfg.to_dict())
    assert params["cycle_length"] == 16 and params["interleave_parallelism"] == 8
    assert len(notes) == 2 and "12" in notes[0]


@pytest.mark.parametrize("text, message", [
    ("[params.nope]\nchoices = [1]\n", "not a trainer knob"),
    ("[params.batch_size]\nchoices = ['big']\n", "not a valid value for batch_size"),
    ("[params.batch_size]\nchoices = []\n", "non-empty list"),
    ("[params.xla]\nchoices = [1, 2]\n", "not a valid value for xla"),
    ("[params.parse]\nchoices = ['batched']\nwhen = { record_format = 'example' }\n",
     "defined above"),
    ("[params.measure_steps]\nchoices = [1]\n", "run length"),
    ("[params.batch_size]\ntype = 'int'\nlow = 10\nhigh = 1\n", "low is above high"),
    ("[params.batch_size]\ntype = 'gaussian'\n", "type must be"),
    ("[params.batch_size]\nchoices = [1]\nbogus = 1\n", "unknown setting"),
    ("[params.batch_size]\nchoices = [1]\notherwise = 2\n", "needs a `when`"),
    ("params = 3\n", "no [params.NAME]"),
    ("[params.batch_size\n", "not valid TOML"),
    ("[other]\n[params.xla]\nchoices=[true]\n", "unknown top-level"),
])
def test_bad_space_files_give_one_line_errors(tmp_path, text, message):
    with pytest.raises(ValueError, match="space file") as e:
        SearchSpace.load(_write(tmp_path, text))
    assert message in str(e.value)
    assert "\n" not in str(e.value).strip()


def test_missing_space_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="space file not found"):
        SearchSpace.load(tmp_path / "none.toml")


def test_numeric_knob_round_trips(tmp_path):
    space = SearchSpace.load(_write(tmp_path, "[params.dense_lr]\ntype = 'float'\nlow = 1e-4\n"
                                    "high = 1e-2\nlog = true\n"))
    start = get_preset("clean").config().replace(dense_lr=0.5)
    resolved, notes = space.resolve(start, accelerator="CPU", accelerator_count=2)
    knob = resolved.knobs[0]
    assert knob.high == 0.5 and any("starting value" in n for n in notes)
    back = SearchSpace.from_dict(resolved.to_dict())
    assert back.knobs[0].distribution() == knob.distribution()


def test_steps_per_call_is_tuned_only_where_the_step_fetches_its_batches():
    space, _ = SearchSpace.load().resolve(get_preset("clean").config(), accelerator="CPU",
                                          accelerator_count=2)
    start = get_preset("clean").config()
    for changes in ({"steps_per_call": 4}, {"cast": "host", "steps_per_call": 4},
                    {"input_copy": "serial", "steps_per_call": 4}):
        ch = space.config_changes(changes, start.to_dict())
        cfg = start.replace(**ch)
        cfg.validate()  # a loop inside the function where the batch is fetched in Python: 1
        assert cfg.steps_per_call == (4 if len(changes) == 1 else 1)
