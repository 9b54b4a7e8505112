"""`recadvisor dashboard`: serve the Streamlit app over a root folder of runs and studies.

Kept light at import (the CLI registry imports it for --help): after checking its flags the
process execs `python -m streamlit run dashboard/app.py`, with the settings in its environment.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

from dashboard.settings import (
    DEFAULT_MAX_UPLOAD_MB,
    MAX_UPLOAD_ENV,
    ROOT_ENV,
    STORAGE_ENV,
)
from recadvisor.errors import UserError

APP = Path(__file__).with_name("app.py")
DEFAULT_PORT = 8501


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "dashboard",
        help="browse runs, findings, comparisons and tuning studies in a web page",
        description="Serve the recadvisor dashboard (Streamlit) on loopback. It lists every "
        "profile run under --root, analyzes the one you open, compares two, and shows tuning "
        "studies (the SQLite study.db files under --root, or --storage).",
    )
    p.add_argument("--root", type=Path, default=Path("."),
                   help="folder of logdirs and tuning outputs; the app reads only under it "
                   "(default: the current folder)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"(default {DEFAULT_PORT})")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--max-upload-mb", type=int, default=DEFAULT_MAX_UPLOAD_MB,
                   help=f"largest trace upload accepted (default {DEFAULT_MAX_UPLOAD_MB})")
    p.add_argument("--storage", help="a tuning-study storage URL to offer (e.g. PostgreSQL)")


def streamlit_command(args: argparse.Namespace) -> list[str]:
    return [
        sys.executable, "-m", "streamlit", "run", str(APP),
        "--server.address", args.host,
        "--server.port", str(args.port),
        "--server.headless", "true",
        "--server.maxUploadSize", str(args.max_upload_mb),
        "--server.fileWatcherType", "none",
        "--browser.gatherUsageStats", "false",
        "--client.toolbarMode", "minimal",
        "--client.showErrorDetails", "none",
        "--global.developmentMode", "false",
    ]


def _check(args: argparse.Namespace) -> Path:
    root = args.root.expanduser()
    if not root.is_dir():
        raise UserError(f"--root {root}: no such directory")
    if not 1 <= args.port <= 65535:
        raise UserError(f"--port {args.port}: not a TCP port")
    if args.max_upload_mb < 1:
        raise UserError("--max-upload-mb must be at least 1")
    try:
        family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            # As the server will: a port in TIME_WAIT is free, one with a listener is not.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((args.host, args.port))
    except OSError as e:
        raise UserError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    return root.resolve()


def run(args: argparse.Namespace) -> int:
    root = _check(args)
    try:
        import streamlit  # noqa: F401
    except ImportError:
        raise UserError("the dashboard needs streamlit: pip install recadvisor") from None
    env = {**os.environ, ROOT_ENV: str(root), MAX_UPLOAD_ENV: str(args.max_upload_mb)}
    if args.storage:
        env[STORAGE_ENV] = args.storage
    env.setdefault("STREAMLIT_BROWSER_GATHER_USAGE_STATS", "false")
    print(f"recadvisor dashboard: http://{args.host}:{args.port}  (root {root}; Ctrl-C stops)",
          flush=True)
    # Become the server: SIGTERM, SIGINT and the exit status reach Streamlit itself, and no
    # orphaned server is left listening when a supervisor stops this process.
    cmd = streamlit_command(args)
    os.execve(cmd[0], cmd, env)
    return 0  # not reached
