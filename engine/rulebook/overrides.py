"""Site overrides: `<rulebook>.yaml` in `rules_overrides_dir` changes thresholds of a shipped rulebook without
editing it. The override is checked on its own, merged into the shipped document (its values keep their own
file:line:col), validated again exactly like a shipped rulebook, and recorded on the built Rulebook."""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuslo.engine.errors import Location, RulebookError, RulebookProblem
from gpuslo.engine.rulebook.build import build_rulebook
from gpuslo.engine.rulebook.checks import expression_location
from gpuslo.engine.rulebook.expr import tokenize
from gpuslo.engine.rulebook.marked_yaml import Document, Path_, load_yaml
from gpuslo.engine.rulebook.model import Correlation, Override, Rule, Rulebook
from gpuslo.engine.rulebook.validate import validate, when_form

TOP_FIELDS = ("rulebook", "description", "macros", "lists", "rules")
RULE_FIELDS = ("enabled", "severity", "if", "all", "within", "count", "for", "repeat_interval", "flap_window",
               "resolve", "labels")
OVERRIDE_SUFFIXES = (".yaml", ".yml")
_WHEN_FIELDS = ("if", "within", "count", "for")  # these live under the shipped rule's `when`
_TRIGGER_FIELDS = (*_WHEN_FIELDS, "all")  # they apply to a rule whose `when:` form allows them
_MACRO_IN = re.compile(r"in macro '([A-Za-z_][A-Za-z0-9_]*)'")
_LIST_IN = re.compile(r"^list '([A-Za-z_][A-Za-z0-9_]*)' holds")


def override_path(directory: Path, name: str) -> Path | None:
    """The override file of rulebook `name` in `directory` (`<name>.yaml` or `.yml`), or None."""
    for suffix in OVERRIDE_SUFFIXES:
        path = Path(directory) / f"{name}{suffix}"
        if path.is_file():
            return path
    return None


def override_files(directory: Path) -> list[Path]:
    """Every override file of a folder, sorted (not recursive)."""
    return sorted(p for p in Path(directory).iterdir() if p.is_file() and p.name.endswith(OVERRIDE_SUFFIXES))


def _hint(word: object, options: Iterable[str], fallback: str | None = None) -> str | None:
    options = list(options)
    close = difflib.get_close_matches(str(word), options, n=1)
    if close:
        return f"did you mean '{close[0]}'?"
    return fallback if fallback is not None else (f"known: {', '.join(options)}" if options else None)


def _show(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


class _Checker:
    """The override's own shape: known sections, names that exist in the shipped rulebook, overridable fields."""

    def __init__(self, base: Document, over: Document):
        self.base, self.over = base, over
        self.problems: list[RulebookProblem] = []
        self.rules = {r["id"]: r for r in base.data["rules"]}

    def add(self, path: Path_, message: str, rule: str | None = None, hint: str | None = None,
            key: bool = False) -> None:
        self.problems.append(RulebookProblem(self.over.at(path, key=key), message, rule, hint))

    def mapping(self, path: Path_, value: object, what: str, rule: str | None = None) -> bool:
        if isinstance(value, dict):
            return True
        self.add(path, f"'{path[-1]}' must be a mapping of {what}, got {value!r}", rule)
        return False

    def run(self) -> list[RulebookProblem]:
        data, name = self.over.data, self.base.data["rulebook"]
        if not isinstance(data, dict):
            self.add((), "an override file must be a YAML mapping: 'rulebook', then any of 'macros', 'lists', "
                         "'rules'")
            return self.problems
        for key in data:
            if key not in TOP_FIELDS:
                self.add((key,), f"unknown field '{key}'", hint=_hint(key, TOP_FIELDS), key=True)
        if "rulebook" not in data:
            self.add((), f"missing required field 'rulebook' (the name of the rulebook it overrides: {name})")
        elif data["rulebook"] != name:
            self.add(("rulebook",), f"rulebook {data['rulebook']!r} does not match the file name: this file "
                                    f"overrides rulebook '{name}'", hint=f"write 'rulebook: {name}'")
        for section, known in (("macros", self.base.data.get("macros")), ("lists", self.base.data.get("lists"))):
            if section in data and self.mapping((section,), data[section], f"{section[:-1]} name to value"):
                self.names(section, data[section], known or {})
        if "rules" in data and self.mapping(("rules",), data["rules"], "rule id to overridden fields"):
            for rid, fields in data["rules"].items():
                self.rule(rid, fields)
        return self.problems

    def names(self, section: str, given: dict[str, Any], known: Mapping[str, Any]) -> None:
        word = section[:-1]
        for item, value in given.items():
            if item not in known:
                fallback = f"rulebook '{self.base.data['rulebook']}' has no {section}" if not known else None
                self.add((section, item), f"unknown {word} '{item}'", hint=_hint(item, known, fallback), key=True)
            elif section == "lists" and isinstance(value, dict) and (set(value) != {"append"}
                                                                     or not isinstance(value["append"], list)):
                self.add((section, item), f"list '{item}' must be a list (replaces it) or {{append: [...]}}")

    def rule(self, rid: str, fields: object) -> None:
        if rid not in self.rules:
            self.add(("rules", rid), f"unknown rule id '{rid}'", hint=_hint(rid, self.rules), key=True)
            return
        if not self.mapping(("rules", rid), fields, "field to value", rid):
            return
        assert isinstance(fields, dict)
        when = self.rules[rid]["when"]
        form = when_form(when)
        for name, value in fields.items():
            path = ("rules", rid, name)
            if name not in RULE_FIELDS:
                self.add(path, f"field '{name}' cannot be overridden", rid,
                         _hint(name, RULE_FIELDS, f"overridable: {', '.join(RULE_FIELDS)}"), key=True)
            elif name in _TRIGGER_FIELDS and name not in form.allowed:
                self.add(path, f"'{name}' does not apply to rule '{rid}' ({form.rule_words})", rid, key=True)
            elif name == "enabled" and not isinstance(value, bool):
                self.add(path, f"'enabled' must be true or false, got {value!r}", rid)
            elif name in ("labels", "resolve"):
                self.mapping(path, value, "name to value" if name == "labels" else "'after' to a duration", rid)
            elif name == "all" and self.mapping(path, value, "pattern name to {if: condition}", rid):
                self.patterns(rid, value, [p["name"] for p in when["all"]])

    def patterns(self, rid: str, given: dict[str, Any], names: list[str]) -> None:
        for name, value in given.items():
            path = ("rules", rid, "all", name)
            if name not in names:
                self.add(path, f"unknown pattern '{name}' of rule '{rid}'", rid, _hint(name, names), key=True)
            elif not isinstance(value, dict) or set(value) != {"if"}:
                self.add(path, f"pattern '{name}' override must be {{if: condition}}, got {value!r}", rid)


class _Merger:
    """Applies a checked override to a copy of the shipped document, grafting the override's marks in."""

    def __init__(self, base: Document, over: Document):
        self.base, self.over = base, over
        self.data = copy.deepcopy(base.data)
        self.marks, self.key_marks = dict(base.marks), dict(base.key_marks)
        self.styles, self.multiline = dict(base.styles), set(base.multiline)
        self.done: list[Override] = []

    def graft(self, src: Path_, dst: Path_) -> None:
        """Marks under `dst` now come from the override's `src` (so problems point at the override file)."""
        tables: tuple[tuple[dict[Path_, Any], Mapping[Path_, Any]], ...] = (
            (self.marks, self.over.marks), (self.key_marks, self.over.key_marks), (self.styles, self.over.styles))
        for table, source in tables:
            for path in [p for p in table if p[: len(dst)] == dst]:
                del table[path]
            table.update({(*dst, *p[len(src):]): v for p, v in source.items() if p[: len(src)] == src})
        self.multiline = {p for p in self.multiline if p[: len(dst)] != dst}
        self.multiline |= {(*dst, *p[len(src):]) for p in self.over.multiline if p[: len(src)] == src}

    def set(self, src: Path_, dst: Path_, value: Any, kind: str, name: str, field: str) -> None:
        target = self.data
        for part in dst[:-1]:
            target = target[part]
        target[dst[-1]] = value
        self.graft(src, dst)
        self.done.append(Override(kind, name, field, _show(value), self.over.at(src)))

    def run(self) -> Document:
        over = self.over.data
        for name, text in (over.get("macros") or {}).items():
            self.set(("macros", name), ("macros", name), text, "macro", name, "")
        for name, value in (over.get("lists") or {}).items():
            if isinstance(value, dict):
                self.append(name, value["append"])
            else:
                self.set(("lists", name), ("lists", name), value, "list", name, "")
        index = {r["id"]: i for i, r in enumerate(self.data["rules"])}
        for rid, fields in (over.get("rules") or {}).items():
            for field, value in fields.items():
                self.rule(rid, index[rid], field, value)
        return Document(self.data, self.base.filename, self.marks, self.key_marks, self.styles,
                        frozenset(self.multiline))

    def append(self, name: str, items: list[Any]) -> None:
        values = self.data["lists"][name]
        start = len(values)
        values.extend(items)
        for j in range(len(items)):
            self.graft(("lists", name, "append", j), ("lists", name, start + j))
        self.done.append(Override("list", name, "append", _show(items), self.over.at(("lists", name, "append"))))

    def rule(self, rid: str, i: int, field: str, value: Any) -> None:
        src, rule = ("rules", rid, field), self.data["rules"][i]
        if field == "enabled":
            if value is False:
                self.done.append(Override("rule", rid, "enabled", "false", self.over.at(src)))
        elif field in _WHEN_FIELDS:
            self.set(src, ("rules", i, "when", field), value, "rule", rid, field)
        elif field == "all":
            names = [p["name"] for p in rule["when"]["all"]]
            for pattern, body in value.items():
                j = names.index(pattern)
                self.set((*src, pattern, "if"), ("rules", i, "when", "all", j, "if"), body["if"], "rule", rid,
                         f"all.{pattern}.if")
        elif field == "labels":
            if not isinstance(rule.get("labels"), dict):
                rule["labels"] = {}
            for label, text in value.items():
                self.set((*src, label), ("rules", i, "labels", label), text, "rule", rid, f"labels.{label}")
        else:  # severity, repeat_interval, flap_window, resolve: replaced whole
            self.set(src, ("rules", i, field), value, "rule", rid, field)


def _relocate(problems: Iterable[RulebookProblem], over: Document, done: list[Override]) -> Iterator[RulebookProblem]:
    """A bad overridden macro or list is reported where the override wrote it, naming the use site too."""
    macros = {o.name for o in done if o.kind == "macro"}
    lists = {o.name for o in done if o.kind == "list"}
    for problem in problems:
        used = [m for m in _MACRO_IN.findall(problem.message) if m in macros]
        listed = _LIST_IN.match(problem.message)
        if used:
            where = expression_location(over, ("macros", used[0]))[0]
        elif listed and listed.group(1) in lists:
            where = over.at(("lists", listed.group(1)))
        else:
            yield problem
            continue
        yield replace(problem, location=where, message=f"{problem.message} (used at {problem.location})")


def _names_used(rule: Rule, macros: Mapping[str, str]) -> set[str]:
    """Every name a rule's conditions mention, through macros: which macros and lists it depends on."""
    patterns = rule.when.patterns if isinstance(rule.when, Correlation) else (rule.when.pattern,)
    todo = [p.condition_text for p in patterns if p.condition_text]
    seen: set[str] = set()
    while todo:
        for token in tokenize(todo.pop(), Location()):
            if token.kind == "name" and token.text not in seen:
                seen.add(token.text)
                if token.text in macros:
                    todo.append(macros[token.text])
    return seen


def override_hash(source: str, override_source: str) -> str:
    """The content hash of a rulebook with a site override: sha256 over both texts, so either change shows."""
    digest = hashlib.sha256(source.encode("utf-8"))
    digest.update(b"\0gpuslo-site-override\0")
    digest.update(override_source.encode("utf-8"))
    return digest.hexdigest()


def apply_override(base: Document, source: str, override_text: str, override_file: str) -> Rulebook:
    """The Rulebook of a validated shipped document with a site override applied; raises RulebookError with
    every problem of the override, located in the override file."""
    over = load_yaml(override_text, override_file)
    problems = _Checker(base, over).run()
    if problems:
        raise RulebookError(sorted(problems, key=lambda p: (p.location.line or 0, p.location.col or 0)))
    merger = _Merger(base, over)
    merged = merger.run()
    checked = validate(merged)
    problems = list(dict.fromkeys(_relocate(checked.problems, over, merger.done)))
    if problems:
        raise RulebookError(sorted(problems, key=lambda p: (str(p.location.file), p.location.line or 0,
                                                             p.location.col or 0)))
    built = build_rulebook(merged, source, checked.conditions)
    macros = merged.data.get("macros") or {}
    disabled = {o.name for o in merger.done if o.kind == "rule" and o.field == "enabled"}
    rules = []
    for rule in built.rules:
        if rule.id in disabled:
            continue
        names = _names_used(rule, macros)
        mine = tuple(o for o in merger.done if (o.kind == "rule" and o.name == rule.id)
                     or (o.kind != "rule" and o.name in names))
        rules.append(replace(rule, overrides=mine) if mine else rule)
    return replace(built, rules=tuple(rules), content_hash=override_hash(source, override_text),
                   override_file=override_file, override_source=override_text, overrides=tuple(merger.done))


def orphan_problems(directory: Path, known: set[str]) -> list[RulebookProblem]:
    """Override files of `directory` that name no rulebook in `known` (located at their `rulebook:` value)."""
    problems = []
    for path in override_files(directory):
        name = path.name.rsplit(".", 1)[0]
        if name in known:
            continue
        where, message = Location(str(path), 1, 1), f"unknown rulebook '{name}': no rulebook of that name to override"
        try:
            doc = load_yaml(path.read_text("utf-8"), str(path))
            if isinstance(doc.data, dict) and "rulebook" in doc.data:
                where = doc.at(("rulebook",))
                if doc.data["rulebook"] != name:
                    message += f" (the file name says '{name}', its 'rulebook:' {doc.data['rulebook']!r})"
        except (OSError, UnicodeDecodeError, RulebookError):
            pass  # the file name alone says which rulebook it meant
        problems.append(RulebookProblem(where, message, hint=_hint(name, sorted(known))))
    return problems
