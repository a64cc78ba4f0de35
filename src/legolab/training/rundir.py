"""A run directory's life: claimed by one process, built under a temporary name, published once
the run has started, and held (an exclusive lock) until the process ends.

    runs/<name>/config.yaml        the resolved configuration
    runs/<name>/metrics.jsonl      one record per evaluation (rewritten atomically)
    runs/<name>/train.log          what the terminal showed, one line per evaluation
    runs/<name>/checkpoints/       last.safetensors, best.safetensors
    runs/<name>/.lock              flock-ed by the process training the run

Why: a start that fails must leave nothing that blocks a retry, and two processes must never
write into the same directory (the second refuses with one line).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

from ..errors import LegoError
from ..io import read_jsonl


class RunDir:
    def __init__(self, path: Path, work: Path, lock_fd: int | None):
        self.path, self.work, self._lock_fd = path, work, lock_fd

    # ---- claiming ------------------------------------------------------------------------
    @classmethod
    def create(cls, path: str | Path) -> RunDir:
        """A new run: refuse if ``path`` exists; build under a hidden temporary name beside it."""
        path = Path(path)
        _refuse_existing(path)
        if path.parent.exists() and not path.parent.is_dir():
            raise LegoError(f"{path.parent}: is not a directory (the runs directory must be one)")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix=f".{path.name}.starting-", dir=path.parent))
        except OSError as e:
            raise LegoError(f"{path}: cannot create the run directory ({e.strerror})") from None
        (work / "checkpoints").mkdir()
        return cls(path, work, _lock(work / ".lock", path))

    @classmethod
    def resume(cls, path: str | Path) -> RunDir:
        path = Path(path)
        if not path.is_dir() or not (path / "config.yaml").is_file():
            raise LegoError(f"{path}: not a run directory (no config.yaml)")
        return cls(path, path, _lock(path / ".lock", path))

    def publish(self) -> None:
        """Give the built directory its name (one rename); a run that appeared meanwhile wins."""
        if self.work == self.path:
            return
        try:
            _refuse_existing(self.path)  # another run may have appeared since create()
            os.rename(self.work, self.path)  # fails on a non-empty target: ours always holds files
        except (LegoError, OSError):
            self.discard()
            raise LegoError(f"{self.path} was created by another run meanwhile; choose another --name") from None
        self.work = self.path

    def discard(self) -> None:
        """Remove a directory that was never published (a start that failed)."""
        if self.work != self.path:
            shutil.rmtree(self.work, ignore_errors=True)
        self.close()

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    # ---- files -----------------------------------------------------------------------------
    def __truediv__(self, name: str) -> Path:
        return self.work / name

    def log(self, line: str) -> None:
        """Append a line to train.log (the terminal's view of the run)."""
        with open(self.work / "train.log", "a") as f:
            f.write(line.rstrip("\n") + "\n")


def _refuse_existing(path: Path) -> None:
    if path.exists() or path.is_symlink():
        if (path / "config.yaml").is_file():
            raise LegoError(f"{path} already exists: resume it with --resume {path}, or choose another --name")
        raise LegoError(f"{path} already exists and is not a run directory; choose another --name")


def _lock(lock_path: Path, run: Path) -> int:
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise LegoError(f"{run}: cannot open its lock file ({e.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise LegoError(f"{run} is being trained by another process; wait for it or choose another --name") from None
    return fd


# metric names of earlier versions, where "step" also meant a chain index
RENAMED_METRICS = {"test_acc_per_step": "test_acc_per_index", "test_loss_per_step": "test_loss_per_index"}


def migrate_records(records: list[dict]) -> list[dict]:
    """Metric records with the names of earlier versions replaced by today's."""
    return [{RENAMED_METRICS.get(k, k): v for k, v in r.items()} for r in records]


def read_metrics(path: str | Path) -> list[dict]:
    """A run's ``metrics.jsonl`` (``path``: the file or its run directory), in today's names."""
    path = Path(path)
    return migrate_records(read_jsonl(path / "metrics.jsonl" if path.is_dir() else path))
