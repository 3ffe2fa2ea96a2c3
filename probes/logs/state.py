"""The probe's small JSON state file: where each source stopped, written atomically."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from gpuslo.engine.errors import ProbeError


class StateStore:
    """A JSON object of per-source positions; `save` replaces the file in one rename."""

    def __init__(self, path: Path | None):
        self._path = path
        self._data: dict[str, Any] = {}
        if path is not None and path.exists():
            try:
                loaded = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                raise ProbeError(f"{path}: unreadable log probe state ({exc}); delete it to start over") from exc
            self._data = loaded if isinstance(loaded, dict) else {}

    def get(self, key: str) -> dict[str, Any] | None:
        value = self._data.get(key)
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        self._data[key] = value

    def save(self) -> None:
        if self._path is None:
            return
        self._path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".state-", dir=self._path.parent)
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(self._data, out, sort_keys=True)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self._path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
