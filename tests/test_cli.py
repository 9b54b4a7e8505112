import subprocess
import sys
import types

import pytest

from recadvisor import cli
from recadvisor.errors import UserError


def test_no_arguments_prints_usage_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "usage: recadvisor" in capsys.readouterr().err


def test_unknown_subcommand_and_bad_flag_exit_2(capsys):
    assert cli.main(["frobnicate"]) == 2
    assert "invalid choice" in capsys.readouterr().err
    assert cli.main(["train", "--no-such-flag"]) == 2
    assert cli.main(["train", "--preset", "nope"]) == 2


def test_help_and_version(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "data" in out and "train" in out
    assert cli.main(["--version"]) == 0
    assert "recadvisor" in capsys.readouterr().out


def _fake_module(exc: BaseException):
    mod = types.ModuleType("fake_cmd")

    def add_parser(subparsers):
        subparsers.add_parser("boom")

    def run(args):
        raise exc

    mod.add_parser, mod.run = add_parser, run
    return mod


@pytest.mark.parametrize(
    "exc, code, text",
    [
        (UserError("logdir is empty"), 2, "error: logdir is empty"),
        (FileNotFoundError("missing.pb"), 2, "error: missing.pb"),
        (UserError("findings at high", code=3), 3, "findings at high"),
        (RuntimeError("oops\nsecond line"), 1, "internal error: RuntimeError: oops"),
        (KeyboardInterrupt(), 130, "interrupted"),
    ],
)
def test_errors_are_one_line(monkeypatch, capsys, exc, code, text):
    monkeypatch.setitem(sys.modules, "fake_cmd", _fake_module(exc))
    monkeypatch.setattr(cli, "SUBCOMMAND_MODULES", ["fake_cmd"])
    monkeypatch.delenv("RECADVISOR_DEBUG", raising=False)
    assert cli.main(["boom"]) == code
    err = capsys.readouterr().err
    assert text in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_console_entry_and_no_tensorflow_import():
    proc = subprocess.run([sys.executable, "-m", "recadvisor"], capture_output=True, text=True)
    assert proc.returncode == 2 and "usage:" in proc.stderr
    code = (
        "import sys; from recadvisor.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('tensorflow' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip().splitlines()[-1] == "False"
