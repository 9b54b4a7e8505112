"""manifest.json: what a dataset directory holds (schema, record format, splits and their files)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reference_model.data.records import COMPRESSIONS, FORMATS
from reference_model.schema import Schema

MANIFEST = "manifest.json"
VERSION = 1


@dataclass
class Manifest:
    schema: Schema
    format: str
    compression: str
    rows_per_record: int
    generator: dict[str, Any] = field(default_factory=dict)
    splits: dict[str, dict[str, Any]] = field(default_factory=dict)
    root: Path | None = None

    def files(self, split: str) -> list[str]:
        if split not in self.splits:
            raise ValueError(f"dataset has no {split!r} split (has: {', '.join(self.splits)})")
        assert self.root is not None
        return [str(self.root / f["name"]) for f in self.splits[split]["files"]]

    def num_examples(self, split: str) -> int:
        return int(self.splits[split]["num_examples"])

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("root")
        d["schema"] = self.schema.to_dict()
        d["version"] = VERSION
        return d

    def save(self, directory: Path) -> Path:
        directory = Path(directory)
        path = directory / MANIFEST
        tmp = directory / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        os.replace(tmp, path)
        self.root = directory
        return path

    @classmethod
    def load(cls, directory: Path) -> Manifest:
        directory = Path(directory)
        if not directory.is_dir():
            raise FileNotFoundError(f"dataset directory not found: {directory}")
        path = directory / MANIFEST
        if not path.exists():
            raise FileNotFoundError(
                f"{directory} is not a recadvisor dataset (no {MANIFEST}; make one with "
                "`recadvisor data --out DIR`)"
            )
        try:
            d = json.loads(path.read_text())
            if d.get("version") != VERSION:
                raise ValueError(f"unsupported manifest version {d.get('version')!r}")
            m = cls(
                schema=Schema.from_dict(d["schema"]),
                format=d["format"],
                compression=d["compression"],
                rows_per_record=int(d["rows_per_record"]),
                generator=d.get("generator", {}),
                splits=d["splits"],
                root=directory,
            )
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise ValueError(f"corrupt dataset manifest {path}: {e}") from None
        if m.format not in FORMATS or m.compression not in COMPRESSIONS:
            raise ValueError(f"corrupt dataset manifest {path}: unknown format/compression")
        for split in m.splits:
            for f in m.files(split):
                if not os.path.exists(f):
                    raise FileNotFoundError(f"dataset file listed in {path} is missing: {f}")
        return m
