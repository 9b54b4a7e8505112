"""The `recadvisor` CLI shell: registry, exit codes, one-line errors, no TensorFlow on --help."""

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from recadvisor import __version__, cli
from recadvisor.errors import UserError

REPO = Path(__file__).resolve().parents[1]


def _fake_module(name: str, exc: BaseException | None = None, commands=("boom",)):
    mod = types.ModuleType(name)
    seen = []

    def add_parser(subparsers):
        for c in commands:
            p = subparsers.add_parser(c, help=f"fake {c}")
            p.add_argument("--count", type=int, default=1)

    def run(args):
        seen.append(args)
        if exc is not None:
            raise exc
        return 0

    mod.add_parser, mod.run, mod.seen = add_parser, run, seen
    return mod


@pytest.fixture
def fake_registry(monkeypatch):
    """Replace the registry with in-memory modules: install(name, module) registers one."""
    names: list[str] = []
    monkeypatch.setattr(cli, "SUBCOMMAND_MODULES", names)
    monkeypatch.delenv("RECADVISOR_DEBUG", raising=False)

    def install(name, module):
        monkeypatch.setitem(sys.modules, name, module)
        names.append(name)
        return module

    return install


def test_registry_order():
    assert cli.SUBCOMMAND_MODULES == [
        "reference_model.data.cli",
        "reference_model.train_cli",
        "recadvisor.capture.cli",
        "analyzers.cli",
        "tuner.cli",
        "dashboard.cli",
    ]


def test_no_arguments_prints_usage_and_exits_2(capsys):
    assert cli.main([]) == 2
    captured = capsys.readouterr()
    assert "usage: recadvisor" in captured.err and captured.out == ""


def test_unknown_subcommand_exits_2(capsys):
    assert cli.main(["frobnicate"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_bad_flag_on_real_subcommands_exits_2(capsys):
    assert cli.main(["train", "--no-such-flag"]) == 2
    assert "unrecognized arguments" in capsys.readouterr().err
    assert cli.main(["train", "--preset", "nope"]) == 2
    assert cli.main(["data", "--no-such-flag"]) == 2
    assert cli.main(["tune", "--no-such-flag"]) == 2
    assert cli.main(["tune", "--preset", "default"]) == 2  # --out is required


def test_help_and_version(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "data" in out and "train" in out
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"recadvisor {__version__}"


def test_dispatch_and_several_commands_per_module(fake_registry, capsys):
    mod = fake_registry("fake_multi", _fake_module("fake_multi", commands=("analyze", "diff")))
    assert cli.main(["diff", "--count", "3"]) == 0
    assert mod.seen[-1].count == 3
    assert cli.main(["analyze"]) == 0
    assert len(mod.seen) == 2
    assert cli.main(["diff", "--count", "x"]) == 2  # bad flag value on a subcommand
    assert "invalid int value" in capsys.readouterr().err


def test_missing_modules_are_skipped(fake_registry, capsys):
    fake_registry("fake_ok", _fake_module("fake_ok"))
    cli.SUBCOMMAND_MODULES.extend(["no_such_package.cli", "recadvisor.no_such_module"])
    assert cli.main(["--help"]) == 0
    assert "boom" in capsys.readouterr().out


def test_broken_module_is_not_skipped(fake_registry, tmp_path, monkeypatch):
    # A registered module that exists but imports something missing is a bug, not "not built".
    (tmp_path / "fake_broken_cli.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cli.SUBCOMMAND_MODULES.append("fake_broken_cli")
    with pytest.raises(ModuleNotFoundError, match="no_such_dependency_xyz"):
        cli.main(["--help"])


@pytest.mark.parametrize(
    "exc, code, text",
    [
        (UserError("logdir is empty"), 2, "recadvisor boom: error: logdir is empty"),
        (FileNotFoundError("missing.pb"), 2, "recadvisor boom: error: missing.pb"),
        (NotADirectoryError("x is a file"), 2, "error: x is a file"),
        (PermissionError("denied"), 2, "error: denied"),
        (ValueError("bad --steps\nmore"), 2, "error: bad --steps"),
        (UserError("findings at high", code=3), 3, "error: findings at high"),
        (RuntimeError("oops\nsecond line"), 1, "internal error: RuntimeError: oops"),
        (KeyboardInterrupt(), 130, "recadvisor boom: interrupted"),
    ],
)
def test_errors_are_one_line(fake_registry, capsys, exc, code, text):
    fake_registry("fake_cmd", _fake_module("fake_cmd", exc))
    assert cli.main(["boom"]) == code
    err = capsys.readouterr().err
    assert text in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    if code == 1:
        assert "RECADVISOR_DEBUG=1" in err


def test_debug_env_prints_traceback(fake_registry, capsys, monkeypatch):
    fake_registry("fake_cmd", _fake_module("fake_cmd", RuntimeError("oops")))
    monkeypatch.setenv("RECADVISOR_DEBUG", "1")
    assert cli.main(["boom"]) == 1
    assert "Traceback" in capsys.readouterr().err


def _run(*args, **kw):
    env = {**os.environ, **kw.pop("env", {})}
    return subprocess.run(args, capture_output=True, text=True, cwd=REPO, env=env, timeout=120)


def test_python_dash_m_no_arguments():
    proc = _run(sys.executable, "-m", "recadvisor")
    assert proc.returncode == 2
    assert "usage: recadvisor" in proc.stderr and "Traceback" not in proc.stderr


def test_console_script():
    script = Path(sys.executable).parent / "recadvisor"
    if not script.exists():
        pytest.skip(f"console script not installed at {script} (pip install -e .)")
    assert _run(str(script)).returncode == 2
    proc = _run(str(script), "--version")
    assert proc.returncode == 0 and __version__ in proc.stdout


def test_help_never_imports_tensorflow():
    # Every registered subcommand's --help too: module-level TF imports would make the CLI slow
    # and break the analyzer path where TensorFlow is not installed.
    code = (
        "import sys\n"
        "from recadvisor import cli\n"
        "cli.main(['--help'])\n"
        "cmds = sorted(cli.build_parser()._subparsers._group_actions[0].choices)\n"
        "for c in cmds:\n"
        "    cli.main([c, '--help'])\n"
        "heavy = sorted(m for m in ('tensorflow', 'keras', 'streamlit') if m in sys.modules)\n"
        "print('COMMANDS', *cmds)\n"
        "print('HEAVY', *heavy)\n"
    )
    proc = _run(sys.executable, "-c", code)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "train" in lines[-2].split()
    assert lines[-1].split() == ["HEAVY"], lines[-1]


@pytest.mark.parametrize("held", [True, False])
def test_exit_process_keeps_code_output_and_atexit(held):
    # With training iterators held, the process leaves by os._exit (their teardown can deadlock
    # in TF); the exit code, buffered output and atexit handlers (capture's profile stop) must
    # survive that, as they do on the normal path.
    code = (
        "import atexit, sys\n"
        "import reference_model.train as t\n"
        f"if {held}: t._ABANDONED_ITERATORS.append(object())\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "print('buffered', end=' ')\n"
        "from recadvisor.cli import exit_process\n"
        "exit_process(3)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 3, p.stderr
    assert p.stdout == "buffered atexit ran\n"


@pytest.mark.parametrize("command,teardown", [("analyze", False), ("diff", False),
                                              ("tune", True)])
def test_analyzer_commands_leave_without_teardown(tmp_path, command, teardown):
    # `analyze` and `diff` skip the interpreter's teardown (a fifth of a small trace's run);
    # the other commands keep it. A module-level object's finalizer shows which way it left;
    # the exit code, buffered output and atexit handlers survive both ways.
    script = tmp_path / "entry.py"
    script.write_text(
        "import atexit, sys\n"
        "class Held:\n"
        "    def __del__(self):\n"
        "        print('teardown')\n"
        "held = Held()\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "from recadvisor.cli import entry\n"
        f"sys.argv = ['recadvisor', {command!r}, '--no-such-flag']\n"
        "entry()\n"
    )
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 2, p.stderr
    assert f"recadvisor {command}: error:" in p.stderr
    assert p.stdout == ("atexit ran\nteardown\n" if teardown else "atexit ran\n")
