"""Load rulebook files and folders: read, check, build, apply site overrides, refuse names that repeat."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpuslo.engine.errors import Location, RulebookError, RulebookProblem
from gpuslo.engine.rulebook.build import build_rulebook
from gpuslo.engine.rulebook.marked_yaml import Document, decode, load_yaml
from gpuslo.engine.rulebook.model import Rulebook
from gpuslo.engine.rulebook.overrides import apply_override, orphan_problems, override_path
from gpuslo.engine.rulebook.validate import Validation, validate

RULEBOOK_SUFFIXES = (".yaml", ".yml")
TEST_SUFFIX = ".test.yaml"  # rule test files (engine/rule_tests), skipped here


def _document(text: str, filename: str) -> tuple[Document, Validation]:
    doc = load_yaml(text, filename)
    checked = validate(doc)
    if checked.problems:
        raise RulebookError(checked.problems)
    return doc, checked


def load_rulebook_text(text: str, filename: str) -> Rulebook:
    """Parse, validate and build one rulebook; raises RulebookError listing every problem, in file order."""
    doc, checked = _document(text, filename)
    return build_rulebook(doc, text, checked.conditions)


def _read(path: Path) -> str:
    name = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise RulebookError(
            [RulebookProblem(Location(name), f"cannot read file: {exc.strerror or exc}")]
        ) from exc
    return decode(raw, name)


def load_rulebook(path: Path, *, overrides_dir: Path | None = None) -> Rulebook:
    """Load one rulebook file (at most 1 MiB of UTF-8), with its site override from `overrides_dir` if any.

    A broken override refuses the rulebook: its problems, then one at the rulebook saying it was not loaded
    (so a server keeps that rulebook's last good version, as for a broken rulebook file).
    """
    text = _read(path)
    doc, checked = _document(text, str(path))
    override = override_path(overrides_dir, doc.data["rulebook"]) if overrides_dir is not None else None
    if override is None:
        return build_rulebook(doc, text, checked.conditions)
    try:
        return apply_override(doc, text, _read(override), str(override))
    except RulebookError as exc:
        note = RulebookProblem(doc.at(("rulebook",)), f"rulebook '{doc.data['rulebook']}' not loaded: its site "
                                                      f"override {override} has problems")
        raise RulebookError([*exc.problems, note]) from exc


def _rulebook_files(directory: Path) -> list[Path]:
    return sorted(
        p
        for p in directory.iterdir()
        if p.is_file() and p.name.endswith(RULEBOOK_SUFFIXES) and not p.name.endswith(TEST_SUFFIX)
    )


def _load_many(
    files: Sequence[Path], overrides_dir: Path | None = None
) -> tuple[tuple[Rulebook, ...], tuple[RulebookProblem, ...]]:
    """Load files, refusing rule ids and rulebook names that repeat across them (the later one is refused)."""
    good: list[Rulebook] = []
    problems: list[RulebookProblem] = []
    rule_seen: dict[str, Location] = {}
    name_seen: dict[str, Location] = {}
    for path in files:
        try:
            book = load_rulebook(path, overrides_dir=overrides_dir)
        except RulebookError as exc:
            problems.extend(exc.problems)
            continue
        except Exception as exc:  # noqa: BLE001 - a loader bug costs that file only (the fuzzer looks for these)
            problems.append(RulebookProblem(Location(str(path)), f"could not be loaded: {type(exc).__name__}: "
                                                                 f"{exc} (a gpuslo bug: please report it)"))
            continue
        clashes = []
        if book.name in name_seen:
            clashes.append(
                RulebookProblem(
                    book.location,
                    f"duplicate rulebook name '{book.name}' (first defined at {name_seen[book.name]})",
                )
            )
        for rule in book.rules:
            if rule.id in rule_seen:
                clashes.append(
                    RulebookProblem(
                        rule.location,
                        f"duplicate rule id '{rule.id}' (first defined at {rule_seen[rule.id]})",
                        rule.id,
                    )
                )
        if clashes:
            problems.extend(clashes)
            continue
        name_seen[book.name] = book.location
        rule_seen.update((rule.id, rule.location) for rule in book.rules)
        good.append(book)
    return tuple(good), tuple(problems)


def _overrides_problems(overrides_dir: Path | None, rules_dirs: Sequence[Path]) -> list[RulebookProblem]:
    if overrides_dir is None:
        return []
    if not Path(overrides_dir).is_dir():
        return [RulebookProblem(Location(str(overrides_dir)), "overrides folder is not a directory "
                                                              "(rulebooks load without site overrides)")]
    if any(Path(overrides_dir).resolve() == Path(d).resolve() for d in rules_dirs):
        return [RulebookProblem(Location(str(overrides_dir)), "the overrides folder must not be the rules folder",
                                hint="e.g. /etc/gpuslo/rules.d")]
    return []


def _load_with_overrides(
    files: Sequence[Path], overrides_dir: Path | None, rules_dirs: Sequence[Path]
) -> tuple[tuple[Rulebook, ...], tuple[RulebookProblem, ...]]:
    """Load rulebook files with their overrides; also report override files that name no rulebook."""
    setup = _overrides_problems(overrides_dir, rules_dirs)
    usable = overrides_dir if overrides_dir is not None and not setup else None
    good, problems = _load_many(files, usable)
    if usable is not None and rules_dirs:
        known = {book.name for book in good} | {p.name.rsplit(".", 1)[0] for p in files}
        setup += orphan_problems(usable, known)
    return good, tuple(setup) + problems


def load_directory(
    directory: Path, overrides_dir: Path | None = None
) -> tuple[tuple[Rulebook, ...], tuple[RulebookProblem, ...]]:
    """Every `*.yaml`/`*.yml` rulebook of a directory (sorted, not recursive, `*.test.yaml` skipped), each with
    its site override `<name>.yaml` from `overrides_dir` when there is one."""
    directory = Path(directory)
    if not directory.is_dir():
        return (), (RulebookProblem(Location(str(directory)), "not a directory"),)
    return _load_with_overrides(_rulebook_files(directory), overrides_dir, [directory])


def check_paths(paths: Sequence[Path], overrides_dir: Path | None = None) -> tuple[RulebookProblem, ...]:
    """Every problem of the given rulebook files and directories (and of their site overrides), for
    `gpuslo rules check`; override files naming no rulebook are reported when a directory is checked."""
    files: list[Path] = []
    missing: list[RulebookProblem] = []
    dirs: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            files.extend(_rulebook_files(path))
            dirs.append(path)
        elif path.exists():
            files.append(path)
        else:
            missing.append(RulebookProblem(Location(str(path)), "no such file or directory"))
    return tuple(missing) + _load_with_overrides(files, overrides_dir, dirs)[1]
