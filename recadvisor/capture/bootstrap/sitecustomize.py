"""Profile-window bootstrap for `recadvisor capture` (recadvisor/capture/cli.py).

`recadvisor capture` puts this folder first on the command's PYTHONPATH, so every Python process
the command starts imports this file at start-up (site.py imports `sitecustomize`). It does nothing
unless the RECADVISOR_CAPTURE environment variable is set; it then imports the `sitecustomize` it
shadows, if there is one, and waits for `tensorflow` to be imported. The first process to import
TensorFlow claims the capture (a file created with O_EXCL in the control folder; later processes
and other Pythons in the tree stay untouched) and runs the profile window itself:

- after `delay_s` from the command's start: announces "armed" and waits (up to 5 s) for the parent
  to start its OS sampler against this pid;
- `duration_s` mode: starts the TF profiler at once and stops it `duration_s` later;
- `steps` mode: starts the profiler when the next top-level `tf.function` call (or, in TF1 graph
  mode, `Session.run` from the main thread) returns, and stops it when the step function (the
  tf.function, or the session's run of one set of fetches, called most often up to then) is
  called for the (steps+1)th time in the window, so the window holds `steps` whole steps and the
  time between them;
- at interpreter exit (normal end, uncaught exception, Ctrl-C) a running window is stopped, so
  what was traced is written.

Every top-level `tf.function` call and main-thread `Session.run` is counted (one dict increment),
so the window reports the number of steps it holds. Before the window, the end time of each call is
kept too (the last `UNTRACED_KEEP` per function): when the window opens, the intervals between the
step function's calls give the untraced step time, the reference the analyzer compares the profiled
steps with (the profiler slows what emits most events; docs/trace-signals.md, "The profiler's own
cost").
Events go to `<control>/events.jsonl` as JSON lines for the parent.
Standard library plus TensorFlow only: the command may run another interpreter than recadvisor's.
"""

import collections
import json
import os
import sys
import threading
import time

_ENV = "RECADVISOR_CAPTURE"


def _chain_to_shadowed_sitecustomize():
    """Import the next `sitecustomize` on sys.path (e.g. a distribution's), as site.py would."""
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        import sitecustomize  # noqa: F401
    except ImportError as e:
        if e.name != "sitecustomize":
            print(f"recadvisor capture: error in the shadowed sitecustomize: {e}", file=sys.stderr)
    except Exception as e:  # as site.py: report, do not break the interpreter's start
        print(f"recadvisor capture: error in the shadowed sitecustomize: {e}", file=sys.stderr)
    finally:
        sys.path[:] = saved
        if ours is not None and "sitecustomize" not in sys.modules:
            sys.modules["sitecustomize"] = ours


WAITING, ARMED, RUNNING, DONE = "waiting", "armed", "running", "done"
UNTRACED_KEEP = 512  # call end times kept per function before the window
MIN_UNTRACED_STEPS = 5  # intervals needed to report an untraced step time


class _Window:
    def __init__(self, cfg, tf):
        self.cfg = cfg
        self.tf = tf
        self.pid = os.getpid()
        self.control = cfg["control"]
        self.state = WAITING
        self.lock = threading.RLock()
        self.calls = {}  # id(function) -> [name, top-level calls]; reset when the window starts
        self.target = None  # id of the step function (steps mode)
        self.steps_before = {}  # id(function) -> (name, calls) when the window started
        self.ends = {}  # id(function) -> perf_counter_ns of its last calls' ends, before the window
        self.stop_requested = threading.Event()
        self.start_ns = 0
        self._events = os.open(
            os.path.join(self.control, "events.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT
        )

    def emit(self, event, **fields):
        line = json.dumps({"event": event, "pid": self.pid, "ns": time.time_ns(), **fields})
        os.write(self._events, (line + "\n").encode())

    # -- the timeline, on a daemon thread ------------------------------------------------------
    def control_thread(self):
        wait_s = self.cfg["t0_ns"] / 1e9 + self.cfg["delay_s"] - time.time()
        if wait_s > 0:
            time.sleep(wait_s)
        with self.lock:
            if self.state != WAITING:
                return
            self.emit("armed")
        ack = os.path.join(self.control, "sampler-ready")
        deadline = time.monotonic() + 5.0
        while not os.path.exists(ack) and time.monotonic() < deadline:
            time.sleep(0.005)
        with self.lock:
            if self.state != WAITING:
                return
            self.state = ARMED
            if self.cfg.get("steps"):
                return  # the next top-level tf.function call starts the window
            if not self.start():
                return
        if self.stop_requested.wait(self.cfg["duration_s"]):
            return
        self.stop("duration")

    def start(self):
        with self.lock:
            if self.state != ARMED or os.getpid() != self.pid:
                return False
            tf = self.tf
            options = tf.profiler.experimental.ProfilerOptions(
                host_tracer_level=self.cfg["host_tracer_level"],
                python_tracer_level=self.cfg["python_tracer_level"],
                device_tracer_level=1,
            )
            if self.cfg.get("steps") and self.calls:
                self.target = _most_called(self.calls)
                if self.calls[self.target][1] < 2:
                    # Not called twice yet (a Session's first run initializes variables): the
                    # first function called again in the window is the step function.
                    self.target = None
            try:
                tf.profiler.experimental.start(self.cfg["logdir"], options=options)
            except Exception as e:
                self.state = DONE
                self.emit("error", message=f"the TF profiler did not start: {_one_line(e)}")
                return False
            self.start_ns = time.time_ns()
            self.state = RUNNING
            self.steps_before = {k: (v[0], v[1]) for k, v in self.calls.items()}
            self.emit("started", start_ns=self.start_ns, untraced=self.untraced_steps())
            return True

    def untraced_steps(self):
        """The step function's call intervals before the window, in ms (median, p90, mean), or
        None when it made fewer than MIN_UNTRACED_STEPS of them. The first interval goes: it may
        hold the second call's tracing."""
        key = self.target if self.target is not None else _most_called(self.calls)
        ends = list(self.ends.get(key, ()))
        gaps = sorted((ends[i + 1] - ends[i]) / 1e6 for i in range(1, len(ends) - 1))
        if len(gaps) < MIN_UNTRACED_STEPS:
            return None
        return {"function": self.calls[key][0], "steps": len(gaps),
                "p50": round(gaps[len(gaps) // 2], 4),
                "p90": round(gaps[min(len(gaps) - 1, int(len(gaps) * 0.9))], 4),
                "mean": round(sum(gaps) / len(gaps), 4)}

    def stop(self, reason):
        with self.lock:
            if self.state != RUNNING or os.getpid() != self.pid:
                if self.state in (WAITING, ARMED):
                    self.state = DONE
                return
            end_ns = time.time_ns()
            self.state = DONE
            self.stop_requested.set()
            steps = self.window_steps()
            self.emit("stopping", end_ns=end_ns, reason=reason, **steps)
            try:
                self.tf.profiler.experimental.stop()
            except Exception as e:
                self.emit("error", message=f"the TF profiler did not stop: {_one_line(e)}")
                return
            self.emit("stopped", start_ns=self.start_ns, end_ns=end_ns, reason=reason, **steps)

    def window_steps(self):
        """The step function of the window and how many top-level calls of it the window held."""
        counts = {}
        for key, (name, n) in self.calls.items():
            before = self.steps_before.get(key, (name, 0))[1]
            if n > before:
                counts[key] = (name, n - before)
        if self.target is not None:
            key = self.target
        elif counts:
            key = _most_called(counts)
        else:
            return {"step_function": None, "steps": 0}
        name, n = counts.get(key, (self.calls.get(key, ["?"])[0], 0))
        return {"step_function": name, "steps": n}

    # -- the tf.function hook, on the calling thread ---------------------------------------------
    def on_call_done(self, key, name):
        """A top-level call of step candidate `key` (a tf.function, or a Session's runs of one
        set of fetches) returned."""
        entry = self.calls.get(key)
        if entry is None:
            entry = self.calls[key] = [name, 0]
        entry[1] += 1
        if self.state in (WAITING, ARMED):
            ends = self.ends.get(key)
            if ends is None:
                ends = self.ends[key] = collections.deque(maxlen=UNTRACED_KEEP)
            ends.append(time.perf_counter_ns())
        if self.state == ARMED and self.cfg.get("steps"):
            self.start()

    def steps_done(self, key):
        """In steps mode, whether the window already holds `steps` calls of the step function."""
        if not self.cfg.get("steps"):
            return False
        if self.target is None and key in self.calls and (
                self.calls[key][1] > self.steps_before.get(key, (None, 0))[1]):
            self.target = key  # the first function called again in the window
        if self.target != key:
            return False
        before = self.steps_before.get(key, (None, 0))[1]
        return self.calls[key][1] - before >= self.cfg["steps"]

    def at_exit(self):
        import signal

        restore = None
        if self.state != WAITING and threading.current_thread() is threading.main_thread():
            # Another Ctrl-C must not cut the profile's write short (here or on the control
            # thread, which may be writing it now: wait for it below).
            restore = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            self.stop("exit")
        finally:
            if restore is not None:
                signal.signal(signal.SIGINT, restore)


def _most_called(calls):
    """The key of {key: [name, calls]} with the most calls (None when empty)."""
    return max(calls, key=lambda k: calls[k][1]) if calls else None


def _one_line(e):
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _hook_tf_function(window, tf):
    try:
        from tensorflow.python.eager.polymorphic_function import polymorphic_function as pf
    except ImportError:
        window.emit("warning", message="tf.function calls cannot be counted in this TF version")
        return
    original = pf.Function.__call__
    local = threading.local()

    def __call__(self, *args, **kwds):
        if getattr(local, "depth", 0):  # nested (during tracing): not a step
            return original(self, *args, **kwds)
        key = id(self)
        if window.state == RUNNING and window.steps_done(key):
            window.stop("steps")  # before the (N+1)th call: the window holds N whole steps
        local.depth = 1
        try:
            return original(self, *args, **kwds)
        finally:
            local.depth = 0
            # Counts; in steps mode the window opens after a call.
            window.on_call_done(key, getattr(self, "__name__", None) or repr(self)[:80])

    __call__.__wrapped__ = original
    pf.Function.__call__ = __call__


def _fetch_names(fetches):
    """A stable description of Session.run fetches: names of ops and tensors, nested."""
    if isinstance(fetches, dict):
        return tuple(sorted((str(k), _fetch_names(v)) for k, v in fetches.items()))
    if isinstance(fetches, (list, tuple)):  # noqa: UP038 (the command's Python may be older)
        return tuple(_fetch_names(f) for f in fetches)
    return getattr(fetches, "name", None) or str(fetches)


def _hook_session_run(window):
    """TF1 graph mode: each Session.run from the main thread is a step candidate, one per
    session and set of fetches (the training op's runs, not a checkpoint's). Runs from other
    threads (queue runners: thousands, each an enqueue) are never steps."""
    try:
        from tensorflow.python.client import session
    except ImportError:
        return
    original = session.BaseSession.run

    def run(self, fetches, *args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            return original(self, fetches, *args, **kwargs)
        try:
            names = _fetch_names(fetches)
        except Exception:
            names = repr(type(fetches))
        key = ("Session.run", id(self), names)
        if window.state == RUNNING and window.steps_done(key):
            window.stop("steps")
        try:
            return original(self, fetches, *args, **kwargs)
        finally:
            window.on_call_done(key, f"Session.run({str(names)[:60]})")

    run.__wrapped__ = original
    session.BaseSession.run = run


def _on_tensorflow_imported(cfg, tf):
    try:
        fd = os.open(os.path.join(cfg["control"], "claim"), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return  # another process of the command is the profiled one
    except OSError:
        return  # the capture is over (its control folder is gone)
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    import atexit

    window = _Window(cfg, tf)
    window.emit("imported")
    _hook_tf_function(window, tf)
    _hook_session_run(window)
    atexit.register(window.at_exit)
    threading.Thread(
        target=window.control_thread, name="recadvisor-capture", daemon=True
    ).start()


class _PostImportFinder:
    """A meta-path finder that runs a callback once `tensorflow` has finished importing."""

    def __init__(self, callback):
        self.callback = callback

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        import importlib.util

        sys.meta_path.remove(self)  # one shot, and not consulted by the find_spec below
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module
        callback = self.callback

        def exec_then_callback(module):
            exec_module(module)
            try:
                callback(module)
            except Exception as e:  # the user's job must run even if capture cannot
                print(f"recadvisor capture: not profiling: {_one_line(e)}", file=sys.stderr)

        spec.loader.exec_module = exec_then_callback
        return spec


def _install():
    raw = os.environ.get(_ENV)
    if not raw:
        return
    try:
        cfg = json.loads(raw)
    except ValueError:
        print(f"recadvisor capture: ignoring a malformed {_ENV}", file=sys.stderr)
        return
    if "tensorflow" in sys.modules:  # imported by a shadowed sitecustomize or a .pth file
        _on_tensorflow_imported(cfg, sys.modules["tensorflow"])
    else:
        sys.meta_path.insert(0, _PostImportFinder(lambda tf: _on_tensorflow_imported(cfg, tf)))


_chain_to_shadowed_sitecustomize()
_install()
