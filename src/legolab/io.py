"""Atomic file writes: a reader (or a resumed run) never sees a half-written file."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path


_UMASK = os.umask(0)
os.umask(_UMASK)


@contextmanager
def atomic_path(path: str | Path):
    """Yield a temporary path beside ``path``; on success it replaces ``path`` in one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file ordinary permissions
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
    records = []
    if not Path(path).exists():
        return records
    for line in Path(path).read_text().splitlines():
        if line.strip():
            records.append(json.loads(line))
    return records
