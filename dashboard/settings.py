"""What the dashboard process was started with: its root, upload cap and default study storage.

`recadvisor dashboard` passes these to the Streamlit script through environment variables (the
script runs in Streamlit's own process); tests set the same variables before running AppTest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ROOT_ENV = "RECADVISOR_DASHBOARD_ROOT"
MAX_UPLOAD_ENV = "RECADVISOR_DASHBOARD_MAX_UPLOAD_MB"
STORAGE_ENV = "RECADVISOR_DASHBOARD_STORAGE"
DEFAULT_MAX_UPLOAD_MB = 200
# Unpacked zips may be larger than the upload, within reason: a zip bomb stops here.
UNZIP_RATIO = 8


@dataclass(frozen=True)
class Settings:
    root: Path
    max_upload_mb: int = DEFAULT_MAX_UPLOAD_MB
    storage: str | None = None

    @property
    def max_upload_bytes(self) -> int:
        return self.max_upload_mb * 2**20

    @property
    def max_unzipped_bytes(self) -> int:
        return self.max_upload_bytes * UNZIP_RATIO


def from_env() -> Settings:
    root = Path(os.environ.get(ROOT_ENV) or Path.cwd()).expanduser().resolve()
    try:
        mb = int(os.environ.get(MAX_UPLOAD_ENV) or DEFAULT_MAX_UPLOAD_MB)
    except ValueError:
        mb = DEFAULT_MAX_UPLOAD_MB
    return Settings(root=root, max_upload_mb=max(1, mb),
                    storage=os.environ.get(STORAGE_ENV) or None)
