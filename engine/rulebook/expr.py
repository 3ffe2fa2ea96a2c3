"""The condition language: a tokenizer and a recursive-descent parser that build typed, checked ASTs."""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from gpuslo.engine.errors import Location, RulebookError, RulebookProblem
from gpuslo.engine.events import ENVELOPE_FIELDS, KIND_ATTRS, field_type
from gpuslo.engine.rulebook.model import (
    And,
    Compare,
    Exists,
    Expr,
    FieldRef,
    Literal,
    LiteralValue,
    Not,
    Or,
)
from gpuslo.engine.rulebook.operators import OPERATORS, SYMBOLS, WORDS
from gpuslo.engine.units import duration_in, is_byte_literal, is_duration_literal, parse_bytes

KEYWORDS = frozenset({"and", "or", "not", "true", "false"}) | WORDS
_INFIX = " ".join(name for name, op in OPERATORS.items() if op.takes != "field")  # for "expected a comparison"
MAX_NESTING = 50  # parentheses, `not` and macros inside one another, in one condition
_NO_NAMES: Mapping[str, str] = MappingProxyType({})
_NO_LISTS: Mapping[str, Sequence[LiteralValue]] = MappingProxyType({})
_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<number>\d+(?:\.\d+)?[A-Za-z]*)
  | (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_-]*)*)
  | (?P<op>OPERATOR_SYMBOLS)
  | (?P<punct>[()\[\],])
""".replace("OPERATOR_SYMBOLS", "|".join(map(re.escape, SYMBOLS))),
    re.VERBOSE,
)
_DURATION_UNIT = {"_ms": "ms", "_us": "us", "_s": "s"}


@dataclass(frozen=True)
class Token:
    kind: str  # number | string | name | keyword | op | punct | end
    text: str
    pos: int


def _unquote(text: str) -> str:
    """Strip quotes; only `\\'`, `\\"` and `\\\\` are escapes, so regex escapes like `\\d` survive."""
    return re.sub(r"\\(['\"\\])", r"\1", text[1:-1])


def tokenize(text: str, where: Location, exact: bool = True) -> list[Token]:
    """Split an expression into tokens; raises RulebookError at the first character it cannot read."""
    tokens, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match:
            what = "unterminated string" if text[pos] in "'\"" else f"unexpected character {text[pos]!r}"
            raise RulebookError([RulebookProblem(_shift(where, text, pos) if exact else where, what)])
        kind = match.lastgroup or ""
        if kind == "name" and match.group() in KEYWORDS:
            kind = "keyword"
        if kind != "ws":
            tokens.append(Token(kind, match.group(), pos))
        pos = match.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


def _shift(where: Location, text: str, pos: int) -> Location:
    """The location of character `pos` when the expression sits on one line, else the expression's own."""
    if where.col is None or "\n" in text:
        return where
    return Location(where.file, where.line, where.col + pos)


def _did_you_mean(name: str, options: Sequence[str]) -> str | None:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f"did you mean '{close[0]}'?" if close else None


def _is_numeric(typ: str | None) -> bool:
    return typ in ("int", "number")


def _type_word(typ: str) -> str:
    return "a number" if _is_numeric(typ) else "a string"


class _Parser:
    """One pass over the tokens of one expression, for one event kind."""

    def __init__(
        self,
        text: str,
        kind: str,
        where: Location,
        aliases: Mapping[str, str],
        macros: Mapping[str, str],
        lists: Mapping[str, Sequence[LiteralValue]],
        stack: tuple[str, ...],
        exact: bool,
        depth: int = 0,
    ):
        self.text, self.kind, self.aliases, self.macros, self.lists = text, kind, aliases, macros, lists
        self.where, self.exact, self.stack = where, exact, stack
        self.tokens = tokenize(text, where, exact)
        self.i = 0
        self.depth = depth  # how deep the parser is in parentheses, `not` and macros

    def nested(self, token: Token) -> None:
        """One level deeper; refused past MAX_NESTING (the parser and every later walk recurse per level)."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.fail(token, f"condition nests deeper than {MAX_NESTING} levels (parentheses, 'not', macros)")

    def locate(self, token: Token) -> Location:
        return _shift(self.where, self.text, token.pos) if self.exact else self.where

    # ---- token helpers ----
    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def take(self) -> Token:
        token = self.peek()
        self.i += 1
        return token

    def at(self, kind: str, text: str | None = None) -> bool:
        token = self.peek()
        return token.kind == kind and (text is None or token.text == text)

    def fail(self, token: Token, message: str, hint: str | None = None) -> RulebookError:
        return RulebookError([RulebookProblem(self.locate(token), message, hint=hint)])

    def expect(self, kind: str, text: str, after: str) -> Token:
        if not self.at(kind, text):
            token = self.peek()
            raise self.fail(token, f"expected '{text}' {after}, found {_show(token)}")
        return self.take()

    # ---- grammar ----
    def parse(self) -> Expr:
        if self.peek().kind == "end":
            raise self.fail(self.peek(), "empty condition")
        expr = self.parse_or()
        if self.peek().kind != "end":
            token = self.peek()
            raise self.fail(token, f"unexpected {_show(token)}; join conditions with 'and' / 'or'")
        return expr

    def parse_or(self) -> Expr:
        items = [self.parse_and()]
        while self.at("keyword", "or"):
            self.take()
            items.append(self.parse_and())
        return items[0] if len(items) == 1 else Or(tuple(items))

    def parse_and(self) -> Expr:
        items = [self.parse_not()]
        while self.at("keyword", "and"):
            self.take()
            items.append(self.parse_not())
        return items[0] if len(items) == 1 else And(tuple(items))

    def parse_not(self) -> Expr:
        token = self.peek()
        if token.kind == "keyword" and token.text == "not":
            self.take()
            self.nested(token)
            inner = self.parse_not()
            self.depth -= 1
            return Not(inner)
        if token.kind == "punct" and token.text == "(":
            self.take()
            self.nested(token)
            expr = self.parse_or()
            self.expect("punct", ")", "to close '('")
            self.depth -= 1
            return expr
        if token.kind == "keyword" and token.text == "has":
            self.take()
            ref, _ = self.field(self.take())
            return Exists(ref)
        if token.kind != "name":
            raise self.fail(token, f"expected a field, macro, 'not' or '(', found {_show(token)}")
        self.take()
        follower = self.peek()
        if token.text in self.macros and not _starts_comparison(follower):
            return self.macro(token)
        return self.comparison(token)

    def macro(self, token: Token) -> Expr:
        name = token.text
        if name in self.stack:
            raise self.fail(token, f"macro '{name}' refers to itself ({' -> '.join((*self.stack, name))})")
        use_site = self.locate(token)
        self.nested(token)
        try:
            return _Parser(
                self.macros[name],
                self.kind,
                use_site,
                self.aliases,
                self.macros,
                self.lists,
                (*self.stack, name),
                exact=False,
                depth=self.depth,
            ).parse()
        except RulebookError as exc:
            inner = exc.problems[0]
            raise RulebookError(
                [RulebookProblem(use_site, f"in macro '{name}': {inner.message}", hint=inner.hint)]
            ) from exc
        finally:
            self.depth -= 1

    def field(self, token: Token) -> tuple[FieldRef, str]:
        """Resolve a field name to a reference and its type, refusing unknown fields."""
        if token.kind != "name":
            raise self.fail(token, f"expected a field name, found {_show(token)}")
        head, _, rest = token.text.partition(".")
        if rest and head in self.aliases and not head == "labels":
            typ = field_type(self.aliases[head], rest)
            if typ is None:
                options = _fields_of(self.aliases[head])
                raise self.fail(
                    token,
                    f"unknown field '{rest}' for pattern '{head}' (event {self.aliases[head]})",
                    _did_you_mean(rest, options),
                )
            return FieldRef(rest, head), typ
        typ = field_type(self.kind, token.text)
        if typ is None:
            options = [
                *_fields_of(self.kind),
                *(f"{a}.{f}" for a, k in self.aliases.items() for f in _fields_of(k)),
            ]
            hint = _did_you_mean(token.text, options)
            if token.text in self.macros:
                hint = f"'{token.text}' is a macro; use it alone, not in a comparison"
            raise self.fail(token, f"unknown field '{token.text}' for event {self.kind}", hint)
        return FieldRef(token.text), typ

    def comparison(self, token: Token) -> Expr:
        ref, typ = self.field(token)
        op = self.peek()
        if op.kind == "keyword" and op.text == "not" and self.peek(1).text == "in":
            self.take()
            self.take()
            return Not(self.membership(ref, typ))
        operator = OPERATORS.get(op.text) if op.kind in ("op", "keyword") else None
        if operator is None or operator.takes == "field":
            raise self.fail(op, f"expected a comparison after '{ref}' ({_INFIX}), found {_show(op)}")
        self.take()
        if operator.takes == "list":
            return self.membership(ref, typ)
        if operator.takes == "string":
            return self.text_match(operator.name, ref, typ)
        if operator.takes == "number" and not _is_numeric(typ):
            raise self.fail(op, f"'{op.text}' needs a number field; '{ref}' is a string field")
        return Compare(op.text, ref, self.value(ref, typ))

    def membership(self, ref: FieldRef, typ: str) -> Compare:
        token = self.peek()
        if token.kind == "name":
            self.take()
            if token.text not in self.lists:
                hint = _did_you_mean(token.text, list(self.lists))
                raise self.fail(token, f"unknown list '{token.text}'", hint)
            values = tuple(self.lists[token.text])
            for value in values:
                self.check_item(token, ref, typ, value)
            return Compare("in", ref, Literal(values, token.text))
        opening = self.expect("punct", "[", "or a list name after 'in'")
        values_: list[LiteralValue] = []
        while True:
            item = self.value(ref, typ, allow_fields=False)
            assert isinstance(item, Literal)
            values_.append(item.value)  # type: ignore[arg-type]
            if self.at("punct", ","):
                self.take()
                continue
            closing = self.expect("punct", "]", "to close the list")
            break
        return Compare("in", ref, Literal(tuple(values_), self.text[opening.pos : closing.pos + 1]))

    def check_item(self, token: Token, ref: FieldRef, typ: str, value: LiteralValue) -> None:
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if numeric != _is_numeric(typ):
            raise self.fail(
                token, f"list '{token.text}' holds {value!r}, but '{ref}' is {_type_word(typ)} field"
            )
        problem = _range_problem(value) if numeric else None
        if problem:
            raise self.fail(token, f"list '{token.text}' holds {value!r}: {problem}")

    def text_match(self, op: str, ref: FieldRef, typ: str) -> Compare:
        token = self.take()
        if _is_numeric(typ):
            raise self.fail(token, f"'{op}' needs a string field; '{ref}' is a number field")
        if token.kind != "string":
            raise self.fail(token, f"'{op}' needs a quoted string, found {_show(token)}")
        value = _unquote(token.text)
        refuse = OPERATORS[op].refuse
        problem = refuse(value) if refuse is not None else None
        if problem:
            raise self.fail(token, f"regex {token.text}: {problem[0]}", problem[1])
        return Compare(op, ref, Literal(value, token.text))

    def value(self, ref: FieldRef, typ: str, allow_fields: bool = True) -> Literal | FieldRef:
        token = self.take()
        if token.kind == "number":
            return self.number(token, ref, typ)
        if token.kind == "string":
            if _is_numeric(typ):
                raise self.fail(
                    token, f"'{ref}' is a number field; it cannot be compared with string {token.text}"
                )
            return Literal(_unquote(token.text), token.text)
        if token.kind == "keyword" and token.text in ("true", "false"):
            raise self.fail(
                token, f"'{ref}' is {_type_word(typ)} field; it cannot be compared with {token.text}"
            )
        head = token.text.partition(".")[0]
        if allow_fields and token.kind == "name" and head in self.aliases:
            other, other_type = self.field(token)
            if _is_numeric(other_type) != _is_numeric(typ):
                raise self.fail(
                    token,
                    f"'{ref}' is {_type_word(typ)} field but '{other}' is {_type_word(other_type)} field",
                )
            return other
        hint = f"quote strings: '{token.text}'" if token.kind == "name" else None
        if token.kind == "name" and "." in token.text:
            earlier = ", ".join(self.aliases) or "none"
            hint = f"'alias.field' names an earlier pattern of the correlation (here: {earlier})"
        raise self.fail(
            token,
            f"expected a value (number, 'string', 1GiB, 200ms) after '{ref}', found {_show(token)}",
            hint,
        )

    def number(self, token: Token, ref: FieldRef, typ: str) -> Literal:
        literal = self._number(token, ref, typ)
        problem = _range_problem(literal.value)
        if problem:
            raise self.fail(token, f"number {token.text}: {problem}")
        return literal

    def _number(self, token: Token, ref: FieldRef, typ: str) -> Literal:
        text = token.text
        if not _is_numeric(typ):
            raise self.fail(
                token,
                f"'{ref}' is a string field; it cannot be compared with number {text}",
                f"quote it: '{text}'",
            )
        if text[-1].isdigit():
            return Literal(float(text) if "." in text else int(text), text)
        if is_byte_literal(text):
            if typ != "int" or not ref.name.endswith("_bytes"):
                raise self.fail(token, f"size {text} only compares with *_bytes fields, not '{ref}'")
            try:
                return Literal(parse_bytes(text), text)
            except ValueError as exc:
                raise self.fail(token, str(exc)) from exc
        if is_duration_literal(text):
            unit = next((u for suffix, u in _DURATION_UNIT.items() if ref.name.endswith(suffix)), None)
            if unit is None:
                raise self.fail(
                    token, f"duration {text} only compares with *_ms, *_us or *_s fields, not '{ref}'"
                )
            return Literal(duration_in(text, unit), text)
        raise self.fail(
            token, f"unknown unit in {text!r}", "sizes: B KB MB GB KiB MiB GiB; durations: us ms s m h d"
        )


def _range_problem(value: object) -> str | None:
    """Numbers the engine can hold: 64-bit integers (as ingest accepts) and finite floats."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        return "out of the 64-bit integer range events can hold"
    if isinstance(value, float) and not math.isfinite(value):
        return "not a finite number"
    return None


def _starts_comparison(token: Token) -> bool:
    return token.kind == "op" or (token.kind == "keyword" and (token.text == "not" or token.text in _INFIX.split()))


def _show(token: Token) -> str:
    return "end of condition" if token.kind == "end" else f"'{token.text}'"


def _fields_of(kind: str) -> list[str]:
    return [*ENVELOPE_FIELDS, *KIND_ATTRS.get(kind, {})]


def parse_expression(
    text: str,
    kind: str,
    *,
    location: Location,
    aliases: Mapping[str, str] = _NO_NAMES,
    macros: Mapping[str, str] = _NO_NAMES,
    lists: Mapping[str, Sequence[LiteralValue]] = _NO_LISTS,
    exact_columns: bool = True,
) -> Expr:
    """Parse and type-check a condition for events of `kind`; raises RulebookError at the offending token.

    `aliases` maps correlation pattern names to their kinds (for `alias.field`); `macros` and `lists` are the
    rulebook's. With `exact_columns` false (a condition folded over lines) errors point at `location`.
    """
    if not isinstance(text, str):
        raise RulebookError([RulebookProblem(location, "a condition must be a string")])
    exact = exact_columns and "\n" not in text
    return _Parser(text, kind, location, aliases, macros, lists, (), exact).parse()
