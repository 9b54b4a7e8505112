import argparse
import json

import pytest

from reference_model.config import (
    TrainConfig,
    add_config_flags,
    config_to_flags,
    overrides_from_args,
)
from reference_model.presets import PRESETS, get_preset


def _parse(flags: list[str]) -> TrainConfig:
    p = argparse.ArgumentParser()
    add_config_flags(p)
    return TrainConfig().replace(**overrides_from_args(p.parse_args(flags)))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_flags_round_trip(name):
    cfg = get_preset(name).config()
    assert _parse(config_to_flags(cfg)) == cfg


def test_flags_keep_the_fields_a_fix_changes_even_at_their_default():
    fixed = TrainConfig().replace(xla=True, fused_tables=True)  # both are the defaults
    assert config_to_flags(fixed) == []
    flags = config_to_flags(fixed, keep=["xla", "fused_tables"])
    assert flags == ["--fused-tables", "true", "--xla", "true"]  # in TrainConfig's field order
    assert _parse(flags) == fixed


def test_json_round_trip(tmp_path):
    cfg = get_preset("default").config()
    cfg.to_json(tmp_path / "c.json")
    assert TrainConfig.from_json(tmp_path / "c.json") == cfg


def test_config_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        TrainConfig.from_json(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        TrainConfig.from_json(tmp_path / "bad.json")
    (tmp_path / "keys.json").write_text(json.dumps({"batch_size": 8, "warp_drive": 1}))
    with pytest.raises(ValueError, match="warp_drive"):
        TrainConfig.from_json(tmp_path / "keys.json")


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"batch_size": 4097}, "divisible"),
        ({"rows_per_record": 3000}, "multiple of --rows-per-record"),
        ({"parse": "per_example"}, "needs --record-format example"),
        ({"embedding_split": "column", "devices": 3, "batch_size": 3072}, "divisible by"),
        ({"measure_steps": 0, "profile_steps": 0}, "nothing to run"),
        # TF refuses num_parallel_calls above cycle_length deep inside the iterator
        ({"cycle_length": 2, "interleave_parallelism": 4}, "between 1 and --cycle-length"),
        ({"interleave_parallelism": -2}, "between 1 and --cycle-length"),
        ({"map_parallelism": -2}, "--map-parallelism must be -1"),
        ({"prefetch": -3}, "--prefetch must be -1"),
        ({"intra_op_threads": -1}, "--intra-op-threads must be >= 0"),
        ({"steps_per_call": 0}, "--steps-per-call must be >= 1"),
        # A loop over batches inside the step function needs them fetched there.
        ({"steps_per_call": 2, "cast": "host"}, "not with --cast host"),
        ({"steps_per_call": 2, "input_copy": "serial"}, "not with --cast host"),
        ({"steps_per_call": 2, "input_loading": "per_device"}, "not with --cast host"),
    ],
)
def test_invalid_combinations(changes, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig().replace(**changes).validate()


def test_autotune_interleave_parallelism_is_valid_with_any_cycle_length():
    TrainConfig().replace(cycle_length=1, interleave_parallelism=-1).validate()


def test_sequential_stages_are_valid():
    TrainConfig().replace(cycle_length=1, interleave_parallelism=0, map_parallelism=0).validate()


def test_more_devices_than_exist():
    with pytest.raises(ValueError, match="only 2 accelerators"):
        TrainConfig(devices=4).validate(max_devices=2)


def test_anti_pattern_presets_differ_from_clean_only_in_their_knobs():
    clean = get_preset("clean").config().to_dict()
    for p in PRESETS.values():
        if p.name in ("clean", "default"):
            continue
        cfg = p.config().to_dict()
        changed = {k for k in cfg if cfg[k] != clean[k]}
        assert changed == set(p.changes), p.name
        assert p.expected_findings, p.name
        p.config().validate()
    assert get_preset("clean").expected_findings == ()


def test_unknown_preset():
    with pytest.raises(ValueError, match="unknown preset"):
        get_preset("fastest")


def test_bad_flag_values_are_argparse_errors():
    with pytest.raises(SystemExit):
        _parse(["--xla", "maybe"])
    with pytest.raises(SystemExit):
        _parse(["--compression", "zstd"])


def test_flag_help_says_what_minus_one_and_zero_mean():
    p = argparse.ArgumentParser()
    add_config_flags(p)
    helps = {a.dest: a.help for a in p._actions}
    assert helps["cfg_map_parallelism"] == "(-1 AUTOTUNE, 0 sequential; default 1)"
    assert helps["cfg_prefetch"] == "(-1 AUTOTUNE, 0 none; default 2)"
    assert helps["cfg_cycle_length"] == "(default 4)"
    assert helps["cfg_inter_op_threads"] == "(0 sized by TF; default 0)"


def test_steps_per_call_counts_samples_per_step():
    cfg = TrainConfig().replace(batch_size=2048, steps_per_call=4)
    cfg.validate()
    assert cfg.fetches_in_step and cfg.samples_per_step == 8192
    assert not TrainConfig().replace(cast="host").fetches_in_step
