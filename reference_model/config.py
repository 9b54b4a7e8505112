"""Every knob of the reference trainer, in one dataclass that round-trips through JSON and flags.

Each anti-pattern from the seeds is one field (or two) here, so a preset is "clean plus one change"
and a finding's remedy can name the exact flag that undoes it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from reference_model.data.records import COMPRESSIONS, FORMATS

AUTOTUNE = -1
# Parallelism 0: the stage has no num_parallel_calls, so tf.data runs it as a plain Map or
# Interleave on the thread that asks for the next element (with no prefetch, the training thread
# itself), as a pipeline written without parallelism did before TF's own rewrites, which
# pipeline.py turns off with it. Parallelism 1 is still a parallel stage: one worker thread that
# runs ahead of its consumer by a buffered element.
SEQUENTIAL = 0

RecordFormat = Literal["example", "prebatched"]
Compression = Literal["none", "gzip"]
ParseMode = Literal["per_example", "batched"]
CastMode = Literal["pipeline", "host"]
InputCopy = Literal["distributed", "serial"]
InputLoading = Literal["broadcast", "per_device"]
EmbeddingSplit = Literal["table", "column"]
IdHashing = Literal["none", "integer", "string"]


# Fields that say how long a run lasts and what it profiles, not what it trains: the tuner never
# tunes them, and a run's configuration is shown without them.
RUN_LENGTH_FIELDS = ("warmup_steps", "measure_steps", "profile_steps", "profile_seconds")

# Knobs whose value (unless AUTOTUNE) may not exceed another knob's: TF refuses it at iterator
# creation with a long error from inside the runtime. validate() enforces it; the tuner clamps to
# it whatever its space file holds.
AT_MOST = {"interleave_parallelism": "cycle_length"}


@dataclass
class TrainConfig:
    # --- data on disk (selects the cached dataset variant) ---
    record_format: RecordFormat = "prebatched"
    compression: Compression = "none"
    rows_per_record: int = 1024
    train_examples: int = 131_072
    eval_examples: int = 32_768
    shards: int = 16
    data_seed: int = 0
    payload_bytes: int = 4096
    # --- tf.data input pipeline ---
    batch_size: int = 4096
    parse: ParseMode = "batched"
    cycle_length: int = 4
    block_length: int = 1
    # -1 AUTOTUNE, 0 sequential (no num_parallel_calls), else that many parallel calls
    interleave_parallelism: int = 4
    map_parallelism: int = 1
    prefetch: int = 2
    threadpool: int = 0
    cast: CastMode = "pipeline"
    # --- emulated storage: good network storage by default (0 and 0 = local disk as it is) ---
    storage_latency_ms: float = 5.0
    storage_bandwidth_mbps: float = 150.0
    evict_page_cache: bool = False
    reader_buffer_kb: int = 256
    # --- devices and parallelism ---
    devices: int = 2
    embedding_split: EmbeddingSplit = "table"
    input_copy: InputCopy = "distributed"
    # "broadcast": one input pipeline whose batch is split among the devices (each gets its rows
    # of dense features and labels, and every sample's ids for its tables: seed 001's
    # broadcasting dataloader). "per_device": one pipeline per device, each reading and parsing
    # the whole global batch, as a one-process-per-GPU hybrid-parallel job does without it.
    input_loading: InputLoading = "broadcast"
    # TF's op thread pools (tf.config.threading): 0 lets TF size them to the CPUs the process
    # may use; 1 runs each op's work on one thread (what a job that sets them for determinism,
    # or inherits TF_NUM_INTRAOP_THREADS=1, gets: the `idle_cores` finding).
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    # Batches each call of the step function trains on, in a tf.range loop inside it (what
    # Keras' steps_per_execution does): the call's fixed host cost (Python loop, argument
    # handling, dispatch) is paid once for all of them. A step of the run (its step marker, its
    # time, --steps) is one call. Needs the batch fetched inside the function (fetches_in_step).
    steps_per_call: int = 1
    # --- model ---
    embedding_dim: int = 16
    bottom_mlp: tuple[int, ...] = (64, 32)
    top_mlp: tuple[int, ...] = (128, 64)
    fused_tables: bool = True
    # How raw categorical ids become table rows inside the step: "none" (the data holds rows
    # already, hashed when it was written), "integer" (a 32-bit multiplicative hash), or
    # "string" (AsString + StringToHashBucketFast, what Keras' Hashing layer and hashed feature
    # columns do to integer ids; seed 002); either hash is scaled into the table by
    # multiply-and-shift (hybrid.bucket_ids).
    id_hashing: IdHashing = "none"
    xla: bool = True
    mixed_precision: bool = False
    dense_lr: float = 1e-3
    embedding_lr: float = 0.05
    seed: int = 0
    # --- run lengths ---
    warmup_steps: int = 10
    measure_steps: int = 60
    profile_steps: int = 6
    # The profiled window also lasts at least this long: the OS sampler's thread roles and CPU
    # shares need ~50+ samples (docs/trace-signals.md, "Sampler"); 6 fast steps gave it 16.
    profile_seconds: float = 1.5
    cardinalities: tuple[int, ...] | None = field(default=None)

    def validate(self, max_devices: int | None = None) -> None:
        """Raise ValueError with a one-line reason for combinations that cannot run."""
        if self.batch_size <= 0 or self.devices <= 0:
            raise ValueError("--batch-size and --devices must be positive")
        if self.batch_size % self.devices:
            raise ValueError(
                f"--batch-size {self.batch_size} is not divisible by --devices {self.devices}"
            )
        if self.record_format == "prebatched" and self.batch_size % self.rows_per_record:
            raise ValueError(
                f"prebatched records hold {self.rows_per_record} rows: --batch-size must be a "
                "multiple of --rows-per-record"
            )
        if self.record_format == "prebatched" and self.parse == "per_example":
            raise ValueError("--parse per_example needs --record-format example")
        for name, cap_name in AT_MOST.items():
            value, cap = getattr(self, name), getattr(self, cap_name)
            if value != AUTOTUNE and not SEQUENTIAL <= value <= cap:
                raise ValueError(
                    f"--{name.replace('_', '-')} {value} must be -1 (AUTOTUNE), 0 (sequential) "
                    f"or between 1 and --{cap_name.replace('_', '-')} ({cap})"
                )
        if self.steps_per_call < 1:
            raise ValueError("--steps-per-call must be >= 1")
        if self.steps_per_call > 1 and not self.fetches_in_step:
            raise ValueError(
                "--steps-per-call above 1 loops over batches inside the step function, which "
                "needs them fetched there: not with --cast host, --input-copy serial or "
                "--input-loading per_device"
            )
        for name in ("intra_op_threads", "inter_op_threads"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0 (0: TF's choice)")
        for name in ("map_parallelism", "prefetch"):
            if getattr(self, name) < AUTOTUNE:
                raise ValueError(f"--{name.replace('_', '-')} must be -1 (AUTOTUNE) or >= 0")
        if self.embedding_split == "column" and self.embedding_dim % self.devices:
            raise ValueError(
                f"column-wise split needs --embedding-dim ({self.embedding_dim}) divisible by "
                f"--devices ({self.devices})"
            )
        if max_devices is not None and self.devices > max_devices:
            raise ValueError(
                f"--devices {self.devices} asked for but only {max_devices} accelerators exist"
            )
        for name in RUN_LENGTH_FIELDS:
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0")
        if self.measure_steps == 0 and self.profile_steps == 0:
            raise ValueError("nothing to run: --measure-steps and --profile-steps are both 0")

    @property
    def fetches_in_step(self) -> bool:
        """Whether the step function fetches its batch itself, as Keras' train function does.
        The anti-patterns that work on the eager batch (host casting, serial copies, a pipeline
        per device) fetch it in Python."""
        return (self.cast != "host" and self.input_copy != "serial"
                and self.input_loading != "per_device")

    @property
    def samples_per_step(self) -> int:
        return self.batch_size * self.steps_per_call

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for k, v in d.items():
            if isinstance(v, tuple):
                d[k] = list(v)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        names = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise ValueError(f"unknown config keys: {', '.join(unknown)}")
        kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()}
        return cls(**kw)

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    def to_json(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def from_json(cls, path: Path) -> TrainConfig:
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"config file not found: {path}") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"config file {path} is not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise ValueError(f"config file {path} must hold a JSON object")
        return cls.from_dict(data)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _parse_bool(text: str) -> bool:
    low = text.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


def _parse_ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None


_CHOICES = {
    "record_format": FORMATS,
    "compression": COMPRESSIONS,
    "parse": ("per_example", "batched"),
    "cast": ("pipeline", "host"),
    "embedding_split": ("table", "column"),
    "input_copy": ("distributed", "serial"),
    "input_loading": ("broadcast", "per_device"),
    "id_hashing": ("none", "integer", "string"),
}
# What a flag's number means where a value is not just a count.
_MEANING = {
    "interleave_parallelism": "-1 AUTOTUNE, 0 sequential",
    "map_parallelism": "-1 AUTOTUNE, 0 sequential",
    "prefetch": "-1 AUTOTUNE, 0 none",
    "intra_op_threads": "0 sized by TF",
    "inter_op_threads": "0 sized by TF",
    "steps_per_call": "batches per call of the step function",
}


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per TrainConfig field; defaults are None so only given flags override."""
    group = parser.add_argument_group("training configuration (override preset/config)")
    defaults = TrainConfig()
    for f in dataclasses.fields(TrainConfig):
        default = getattr(defaults, f.name)
        kw: dict[str, Any] = {"default": None, "dest": f"cfg_{f.name}"}
        if f.name in _CHOICES:
            kw["choices"] = _CHOICES[f.name]
        elif isinstance(default, bool):
            kw["type"] = _parse_bool
            kw["metavar"] = "BOOL"
        elif isinstance(default, float):
            kw["type"] = float
        elif isinstance(default, int):
            kw["type"] = int
        else:
            kw["type"] = _parse_ints
            kw["metavar"] = "N,N,..."
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        meaning = f"{_MEANING[f.name]}; " if f.name in _MEANING else ""
        kw["help"] = f"({meaning}default {shown})"
        group.add_argument(_flag(f.name), **kw)


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    return {k[4:]: v for k, v in vars(args).items() if k.startswith("cfg_") and v is not None}


def config_to_flags(cfg: TrainConfig, base: TrainConfig | None = None,
                    keep: Iterable[str] = ()) -> list[str]:
    """The flags that turn `base` (default: TrainConfig()) into `cfg`; the fields in `keep` are
    written even when they are the default (a fix that says what it changes)."""
    base = base or TrainConfig()
    keep = set(keep)
    out: list[str] = []
    for f in dataclasses.fields(TrainConfig):
        v = getattr(cfg, f.name)
        if v == getattr(base, f.name) and f.name not in keep:
            continue
        if isinstance(v, bool):
            text = "true" if v else "false"
        elif isinstance(v, tuple):
            text = ",".join(map(str, v))
        else:
            text = str(v)
        out += [_flag(f.name), text]
    return out
