"""`recadvisor dashboard`: bad flags and busy ports are one-line errors; the server command binds
loopback unless told otherwise."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import pytest

from dashboard.cli import streamlit_command
from recadvisor.cli import build_parser


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "recadvisor", "dashboard", *args],
                          capture_output=True, text=True, timeout=60)


def test_defaults_bind_loopback():
    args = build_parser().parse_args(["dashboard"])
    cmd = streamlit_command(args)
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--server.maxUploadSize") + 1] == "200"
    assert cmd[cmd.index("--client.showErrorDetails") + 1] == "none"


@pytest.mark.parametrize("args,message", [
    (["--root", "/no/such/dir"], "no such directory"),
    (["--port", "70000"], "not a TCP port"),
    (["--max-upload-mb", "0"], "at least 1"),
    (["--bogus"], "unrecognized arguments"),
])
def test_bad_flags_are_one_line(tmp_path, args, message):
    r = _cli(*args)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_busy_port_is_one_line(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = _cli("--root", str(tmp_path), "--port", str(port))
    assert r.returncode == 2 and "cannot listen on 127.0.0.1" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_sigterm_stops_the_server(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "recadvisor", "dashboard", "--root",
                             str(tmp_path), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as c:
                if c.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.3)
        else:
            pytest.fail("the dashboard did not start listening in 60 s")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)  # the server itself got the signal: nothing is left listening
        with socket.socket() as c:
            assert c.connect_ex(("127.0.0.1", port)) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
