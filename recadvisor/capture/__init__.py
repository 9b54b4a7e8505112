"""Capture: a TF profiler window plus the run metadata file, written as a TensorBoard logdir.

The reference trainer and `recadvisor capture` (for users' own scripts) both go through here, so the
logdir layout has one implementation (shared/ARCHITECTURE.md, "LOGDIR layout").
"""

from recadvisor.capture.metadata import METADATA_FILE, read_run_metadata, write_run_metadata
from recadvisor.capture.profiler_window import ProfileWindow

__all__ = ["METADATA_FILE", "ProfileWindow", "read_run_metadata", "write_run_metadata"]
