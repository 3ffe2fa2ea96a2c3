"""The running rulebooks: load the rules folder (a broken file keeps its last good version), reload on request
or when a file changes (the watcher job), and every load stored as a rulebook version."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from gpuslo.engine.config import Settings
from gpuslo.engine.errors import EngineError, Location, RulebookNotLoaded, RulebookProblem
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.rulebook.model import Rulebook
from gpuslo.engine.services.changes import utcnow
from gpuslo.engine.slo.counter import SloSeed
from gpuslo.engine.store import audit, repository
from gpuslo.engine.store.audit import AuditNote
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.read_models import RulebookVersionView

log = logging.getLogger(__name__)
Fingerprint = tuple[tuple[str, int, int], ...]


class Engine(Protocol):
    """What loading needs of the engine (engine_thread.Runtime)."""

    def load(self, rulebooks: Sequence[Rulebook], slo_seed: SloSeed | None = None) -> None: ...


@dataclass(frozen=True)
class RulebookStatus:
    """The rulebooks running now and the problems of the last load (empty when it was clean)."""

    rulebooks: tuple[Rulebook, ...]
    problems: tuple[RulebookProblem, ...]
    loaded_at: datetime


def rules_fingerprint(directory: Path, overrides_dir: Path | None = None) -> Fingerprint:
    """Name, size and modification time of every rulebook and site override file: what the watcher compares."""
    found: list[tuple[str, int, int]] = []
    for folder in (directory, overrides_dir):
        try:
            files = sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml")) if folder else []
            found += [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
        except OSError:
            continue
    return tuple(found)


class Rulebooks:
    """The rulebooks of one core: what runs, what the last load refused, and the stored versions."""

    def __init__(self, settings: Settings, database: Database, engine: Engine, slo_seed: SloSeed):
        self._settings, self._database, self._engine, self._slo_seed = settings, database, engine, slo_seed
        self._status = RulebookStatus((), (), utcnow())
        self._lock = threading.Lock()
        self._fingerprint: Fingerprint | None = None

    def status(self) -> RulebookStatus:
        return self._status

    def versions(self) -> list[RulebookVersionView]:
        """Every stored rulebook version, newest first."""
        with self._database.session(readonly=True) as session:
            return list(repository.list_rulebook_versions(session))

    def quiet_by_rule(self) -> dict[str, float]:
        """`resolve.after` of every loaded rule that has one."""
        return {rule.id: rule.lifecycle.resolve_after_s for rulebook in self._status.rulebooks
                for rule in rulebook.rules if rule.lifecycle.resolve_after_s is not None}

    def reload(self, directory: Path | None = None, *, actor: str | None = None,
               source: str | None = None) -> RulebookStatus:
        """Load the rulebook directory; a broken file keeps its last good version running.

        With an `actor` (a human or API reload) the audit row joins the transaction recording the load.
        """
        directory = directory or self._settings.rules_dir
        note = AuditNote("rulebook.reload", "rulebooks", str(directory), actor, source) if actor else None
        with self._lock:
            overrides_dir = self._settings.rules_overrides_dir
            if directory == self._settings.rules_dir:
                self._fingerprint = rules_fingerprint(directory, overrides_dir)
            before = _loaded(self._status.rulebooks)
            good, problems = load_directory(directory, overrides_dir)
            # A broken site override also reports a problem at its rulebook's file, so that one is kept too.
            broken_files = {p.location.file for p in problems}
            loaded = {r.name for r in good}
            kept = tuple(r for r in self._status.rulebooks
                         if r.location.file in broken_files and r.name not in loaded)
            chosen, refused = self._load_engine(good + kept)
            problems += refused
            good = tuple(r for r in good if r in chosen)
            self._status = RulebookStatus(chosen, problems, utcnow())
            self._record_loads(good, problems, note, before)
        for problem in problems:
            log.error("rulebook problem: %s", problem)
        return self._status

    def _load_engine(self, wanted: tuple[Rulebook, ...]) -> tuple[tuple[Rulebook, ...], tuple[RulebookProblem, ...]]:
        """Load `wanted` into the engine; a rulebook the engine refuses is replaced by its running version (or
        left out) and the rest loaded again. Returns what runs and one problem per refused rulebook."""
        chosen, problems = wanted, list[RulebookProblem]()
        running = {r.name: r for r in self._status.rulebooks}
        for _attempt in range(2 * len(wanted) + 1):
            try:
                self._engine.load(chosen, self._slo_seed)
                return chosen, tuple(problems)
            except RulebookNotLoaded as exc:
                problems.append(RulebookProblem(Location(exc.file), f"rulebook '{exc.name}' not loaded by the "
                                                                    f"engine: {exc.reason}"))
                fallback = running.pop(exc.name, None)  # popped: a running version that fails too is dropped
                chosen = tuple(r for r in chosen if r.name != exc.name) + ((fallback,) if fallback else ())
            except EngineError as exc:
                problems.append(RulebookProblem(Location(str(self._settings.rules_dir)), str(exc)))
                break
        return self._status.rulebooks, tuple(problems)

    def reload_if_changed(self) -> RulebookStatus | None:
        """Reload when a rulebook file was added, removed or changed since the last load; None when not.

        The watcher job never raises: a failure is logged and the next change is picked up as usual.
        """
        try:
            fingerprint = rules_fingerprint(self._settings.rules_dir, self._settings.rules_overrides_dir)
            if fingerprint == self._fingerprint:
                return None
            log.info("rulebook files changed in %s: reloading", self._settings.rules_dir)
            return self.reload()
        except Exception:  # noqa: BLE001 - the watcher must outlive any failure of one reload
            log.exception("reloading the rulebooks of %s failed; the running rulebooks are kept",
                          self._settings.rules_dir)
            return None

    def _record_loads(self, good: Sequence[Rulebook], problems: Sequence[RulebookProblem],
                      note: AuditNote | None = None, before: dict[str, object] | None = None) -> None:
        at = utcnow()
        with self._database.session() as session:
            if note is not None:
                audit.record(session, at=at, actor=note.actor, action=note.action, target_type=note.target_type,
                             target_id=note.target_id, before=before, after=_loaded(self._status.rulebooks),
                             source_ip=note.source, detail=f"{len(problems)} problem(s)" if problems else None)
            for rulebook in good:
                repository.record_rulebook_load(
                    session, name=rulebook.name, version=rulebook.version, content_hash=rulebook.content_hash,
                    path=rulebook.location.file or "", source=_stored_source(rulebook), error=None, now=at)
            by_file: dict[str, list[str]] = {}
            for problem in problems:
                by_file.setdefault(problem.location.file or "", []).append(str(problem))
            for path, texts in by_file.items():
                repository.record_rulebook_load(
                    session, name=Path(path).stem, version="", content_hash="", path=path, source="",
                    error="\n".join(texts), now=at)


def _stored_source(rulebook: Rulebook) -> str:
    """The text a stored rulebook version keeps: the shipped file, then the site override in force (its hash
    covers both)."""
    if rulebook.override_file is None:
        return rulebook.source
    return f"{rulebook.source}\n# ---- site override: {rulebook.override_file} ----\n{rulebook.override_source}"


def _loaded(rulebooks: Sequence[Rulebook]) -> dict[str, object]:
    """The running rulebooks as an audit snapshot: name → version and content hash."""
    return {rb.name: f"{rb.version} {rb.content_hash[:12]}" for rb in rulebooks}
