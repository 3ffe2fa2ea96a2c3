"""pytest collects every `*.test.yaml` here: one item per case, failing with the same exp/got text as
`gpuslo rules test`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuslo.engine.errors import RulebookError
from gpuslo.engine.rule_tests.files import TEST_SUFFIX, RuleTestCase
from gpuslo.engine.rule_tests.run import load_pair, run_case
from gpuslo.engine.rulebook.model import Rulebook


class RuleTestFailed(Exception):
    """A case failed or its file did not load; the message is the whole report."""


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.name.endswith(TEST_SUFFIX):
        return RuleTestYaml.from_parent(parent, path=file_path)
    return None


class RuleTestYaml(pytest.File):
    """A rule test file; a file (or its rulebook) that does not load becomes one failing item."""

    def collect(self) -> Iterator[pytest.Item]:
        try:
            rulebook, tests = load_pair(self.path)
        except RulebookError as exc:
            yield RuleLoadItem.from_parent(self, name="load", error=str(exc))
            return
        for case in tests.cases:
            yield RuleCaseItem.from_parent(self, name=case.name, rulebook=rulebook, case=case)


class RuleCaseItem(pytest.Item):
    def __init__(self, *, rulebook: Rulebook, case: RuleTestCase, **kwargs: Any):
        super().__init__(**kwargs)
        self.rulebook = rulebook
        self.case = case

    def runtest(self) -> None:
        result = run_case(self.rulebook, self.case)
        if not result.passed:
            raise RuleTestFailed(result.message())

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, RuleTestFailed):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, (self.case.location.line or 1) - 1, f"rule test: {self.name}"


class RuleLoadItem(pytest.Item):
    def __init__(self, *, error: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.error = error

    def runtest(self) -> None:
        raise RuleTestFailed(self.error)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        return str(excinfo.value)
