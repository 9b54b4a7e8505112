"""bench/presets.py's entries: a preset, or a preset with trainer flags added."""

import pytest

from bench.presets import entry_args


def test_a_preset_with_flags_added():
    assert entry_args("clean") == ("clean", [])
    assert entry_args("string_hashing+id-hashing=integer+devices=1") == (
        "string_hashing", ["--id-hashing", "integer", "--devices", "1"])


@pytest.mark.parametrize("entry", ["clean+devices", "clean+=1", "clean+devices="])
def test_a_flag_without_its_value_is_refused(entry):
    with pytest.raises(ValueError, match="NAME\\+flag=value"):
        entry_args(entry)


@pytest.mark.parametrize("entry", ["clean+no-such-knob=1", "clean+id_hashing=integer"])
def test_an_unknown_or_misspelt_flag_is_refused(entry):
    with pytest.raises(ValueError, match="not a training configuration flag"):
        entry_args(entry)
