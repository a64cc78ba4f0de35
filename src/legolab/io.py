"""Atomic file writes: a reader (or a resumed run) never sees a half-written file. And log
lines on stderr, each in one write."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextmanager
def atomic_path(path: str | Path):
    """Yield a temporary path beside ``path``; on success it replaces ``path`` in one rename."""
    from .errors import LegoError

    path = Path(path)
    if path.is_dir():
        raise LegoError(f"{path}: is a directory; give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise LegoError(f"{path}: cannot be written ({e.strerror or e})") from None
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file ordinary permissions
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)  # the bytes reach the disk before the name points at them
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | Path, data) -> None:
    write_text(path, json.dumps(data, indent=2) + "\n")


def write_jsonl(path: str | Path, records: list[dict]) -> None:
    write_text(path, "".join(json.dumps(r) + "\n" for r in records))


def read_jsonl(path: str | Path) -> list[dict]:
    """The records of a JSON-lines file; a line that is not a JSON object is one clear error."""
    from .errors import LegoError

    records = []
    if not Path(path).exists():
        return records
    try:
        text = Path(path).read_text()
    except (UnicodeDecodeError, OSError) as e:
        raise LegoError(f"{path}: cannot be read as text ({e.__class__.__name__})") from None
    for i, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if not isinstance(record, dict):
                raise LegoError(f"{path}, line {i}: not a JSON record (a cut or appended line?)")
            records.append(record)
    return records


def log_line(message: str) -> None:
    """``message`` and its newline on stderr in one write: runs side by side share the log, and a
    print's two writes (text, then newline) splice their lines."""
    sys.stderr.write(f"{message}\n")
    sys.stderr.flush()
