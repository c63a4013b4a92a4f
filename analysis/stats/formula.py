"""Model formulas as data: a parser for the small formula language users may write, and the
rebuilt texts the engines receive (no Django here).

Why: patsy evaluates every term of a formula as Python and R evaluates it as R, so a formula
such as ``rating ~ system + I(__import__('os').system('id'))`` runs code on the worker. A
formula is therefore parsed into a fixed grammar against the columns the caller allows, and
R, the optional pymer4 engine and patsy only ever receive text rebuilt from the parsed terms:
the user's text is never passed through.

Grammar (whitespace is spaces and tabs; positions in errors are 1-based characters)::

    formula   := response "~" rhs
    response  := NAME | "cbind" "(" NAME "," NAME ")"   (cbind only with allow_cbind=True)
    rhs       := term ("+" term)*
    term      := "1" | product | random
    product   := inter ("*" inter)*              a*b  ->  a + b + a:b
    inter     := NAME (":" NAME)*                a:b  (":" binds tighter than "*", as in R)
    random    := "(" effect ("+" effect)* "|" group ")"
    effect    := "1" | NAME
    group     := NAME (":" NAME)*
    NAME      := [A-Za-z][A-Za-z0-9_.]*, a column the caller allows, not an R reserved word

Nothing else: no function calls (``I()``, ``log()``, ``system()``), no attribute access, no
backticks, strings, numbers other than 1, operators other than ``~ + * : |``, and only ASCII.
"""

from __future__ import annotations

import difflib
import keyword
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

__all__ = [
    "EXAMPLE",
    "MAX_FIXED_TERMS",
    "MAX_LENGTH",
    "MAX_PRODUCT_FACTORS",
    "Formula",
    "FormulaError",
    "RandomTerm",
    "is_formula_name",
    "parse_formula",
    "r_coefficient_name",
]

EXAMPLE = "rating ~ system + (1|rater) + (1|item)"
MAX_LENGTH = 1000
# A product of k factors expands to 2**k - 1 terms, so its size is bounded before expansion,
# and so is the whole model's number of fixed terms.
MAX_PRODUCT_FACTORS = 4
MAX_FIXED_TERMS = 64

# R's reserved words (?Reserved): never names, even where a data column is called that, since
# R would read them as language (and `TRUE` or `Inf` as values) inside the rebuilt formula.
R_RESERVED = frozenset({
    "if", "else", "repeat", "while", "function", "for", "next", "break", "in", "TRUE",
    "FALSE", "NULL", "Inf", "NaN", "NA", "NA_integer_", "NA_real_", "NA_character_",
    "NA_complex_",
})

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.]*")
_NAME_CHARS = re.compile(r"[A-Za-z0-9_.]*")


def _name_end(text: str, start: int) -> int:
    """Where the run of name characters from ``start`` ends (``start`` when there is none)."""
    match = _NAME_CHARS.match(text, start)
    return match.end() if match else start


_PUNCT = {"~": "TILDE", "+": "PLUS", "*": "STAR", ":": "COLON", "(": "LPAREN", ")": "RPAREN",
          "|": "BAR", ",": "COMMA"}
_JOINERS = "terms are joined with +, * and :"
# Characters refused on sight, with the reason a user most likely typed them.
_REFUSED = {
    "'": "string literals are not allowed",
    '"': "string literals are not allowed",
    "`": "backticks (quoted names) are not allowed",
    "$": "'$' (element access) is not allowed",
    "@": "'@' (slot access) is not allowed",
    "[": "indexing with '[' is not allowed",
    "]": "indexing with ']' is not allowed",
    ";": "';' (a second statement) is not allowed",
    "#": "comments ('#') are not allowed",
    "-": f"'-' (removing a term, or subtraction) is not allowed; {_JOINERS}",
    "/": f"'/' (nesting, or division) is not supported; write (1|g1) + (1|g1:g2); {_JOINERS}",
    "^": f"'^' is not allowed; {_JOINERS}",
    "%": f"'%' operators (such as %in%) are not allowed; {_JOINERS}",
    "=": "'=' (assignment or arguments) is not allowed",
    "<": "'<' (assignment or comparison) is not allowed",
    ">": "'>' (comparison) is not allowed",
    "{": "braces are not allowed",
    "}": "braces are not allowed",
    "\\": "backslashes are not allowed",
}


class FormulaError(ValueError):
    """A formula outside the grammar. ``str()`` is the whole located message,
    ``<label>: position <n>: <problem>; <what is allowed>``."""

    def __init__(self, label: str, problem: str, *, position: int | None = None,
                 allowed: str = "") -> None:
        self.label, self.problem, self.position, self.allowed = label, problem, position, allowed
        where = f"position {position}: " if position is not None else ""
        super().__init__(f"{label}: {where}{problem}" + (f"; {allowed}" if allowed else ""))


def is_formula_name(name: str) -> bool:
    """Whether a column can be named in a formula (the grammar's NAME, not reserved, and no
    part after a '.' starting with '_')."""
    return bool(_NAME.fullmatch(name)) and name not in R_RESERVED and "._" not in name


@dataclass(frozen=True)
class RandomTerm:
    """``(effects|group)``: ``effects`` holds "1" and/or column names as written (``(x|g)``
    has R's implicit intercept too); ``group`` one name, or several for ``g1:g2``."""

    effects: tuple[str, ...]
    group: tuple[str, ...]

    @property
    def text(self) -> str:
        return f"({' + '.join(self.effects)}|{':'.join(self.group)})"


@dataclass(frozen=True)
class Formula:
    """A parsed formula; the texts the engines receive are rebuilt from these fields.

    response: one column, or (successes, failures) for a ``cbind`` response.
    fixed: the fixed-effect terms, each a tuple of column names (two or more: an
        interaction), with ``a*b`` already expanded to ``a``, ``b``, ``a:b``; no duplicates.
    random: the random-effect terms.
    intercept: ``1`` was written among the fixed terms. The grammar cannot remove the
        intercept, so every model has one (or thresholds); the flag only keeps the rebuilt
        text faithful.
    """

    response: tuple[str, ...]
    fixed: tuple[tuple[str, ...], ...]
    random: tuple[RandomTerm, ...]
    intercept: bool = False

    @property
    def response_text(self) -> str:
        if len(self.response) == 2:
            return f"cbind({self.response[0]}, {self.response[1]})"
        return self.response[0]

    @property
    def fixed_text(self) -> str:
        """The fixed-effects right-hand side in R syntax ("1" when there is none)."""
        parts = (["1"] if self.intercept else []) + [":".join(t) for t in self.fixed]
        return " + ".join(parts) or "1"

    @property
    def text(self) -> str:
        """The R / lme4 formula, e.g. ``rating ~ temp + contact + temp:contact + (1|rater)``.
        Names are R syntactic names (checked by the parser), so no quoting is needed."""
        parts = (["1"] if self.intercept else []) + [":".join(t) for t in self.fixed]
        parts += [r.text for r in self.random]
        return f"{self.response_text} ~ {' + '.join(parts)}"

    def __str__(self) -> str:
        return self.text

    @property
    def groups(self) -> list[str]:
        """Grouping columns of the random terms, in order of appearance."""
        return _unique(name for r in self.random for name in r.group)

    @property
    def columns(self) -> list[str]:
        """Every column the formula uses, in order of appearance."""
        names = list(self.response) + [n for t in self.fixed for n in t]
        names += [n for r in self.random for n in (*r.effects, *r.group) if n != "1"]
        return _unique(names)

    def patsy_rhs(self) -> str:
        """The fixed-effects right-hand side for patsy. patsy evaluates each term as Python,
        so a name that is not a plain Python identifier (``item.speaker`` would be attribute
        access) or is a Python keyword is wrapped as ``Q("item.speaker")``; the quoted text
        is a checked column name (letters, digits, '_' and '.'), never user syntax.
        :func:`r_coefficient_name` maps patsy's column names back to R's."""
        terms = [":".join(_patsy_name(n) for n in t) for t in self.fixed]
        return " + ".join(terms) or "1"

    def with_response(self, *response: str) -> Formula:
        return replace(self, response=tuple(response))

    def fixed_only(self) -> Formula:
        return replace(self, random=())


def _unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))


def _patsy_name(name: str) -> str:
    if name.isidentifier() and not keyword.iskeyword(name):
        return name
    return f'Q("{name}")'


_PATSY_Q = re.compile(r'Q\("([A-Za-z0-9_.]+)"\)')
# Treatment-coded level ``[T.warm]``, or a full-rank one ``[warm]`` (a factor that appears in
# an interaction without its main effect).
_PATSY_LEVEL = re.compile(r"\[(?:T\.)?([^\]]*)\]")


def r_coefficient_name(patsy_name: str) -> str:
    """patsy ``temp[T.warm]:Q("item.speaker")[T.s2]`` -> R ``tempwarm:item.speakers2``."""
    return _PATSY_LEVEL.sub(lambda m: m.group(1), _PATSY_Q.sub(lambda m: m.group(1), patsy_name))


# --------------------------------------------------------------------------------------------
# tokenizer


@dataclass(frozen=True)
class _Token:
    kind: str  # NAME, ONE, one of _PUNCT's values, or EOF
    text: str
    position: int  # 1-based


class _Fail(Exception):
    """Raised inside the parser; :func:`parse_formula` turns it into a FormulaError with the
    label and the list of what is allowed."""

    def __init__(self, position: int, problem: str, context: str = "columns") -> None:
        super().__init__(problem)
        self.position, self.problem, self.context = position, problem, context


def _char_problem(char: str) -> str:
    code = f"U+{ord(char):04X}"
    if char in "\r\n":
        return f"line breaks ({code}) are not allowed: a formula is one line"
    if ord(char) < 32 or ord(char) == 127:
        return f"control character {code} is not allowed"
    if ord(char) > 127:
        name = unicodedata.name(char, "unnamed character")
        return (f"non-ASCII character {char!r} ({code} {name}) is not allowed: names are "
                "plain ASCII letters, digits, '_' and '.' (a look-alike letter is a different "
                "name)")
    return _REFUSED.get(char, f"character {char!r} is not allowed")


def _tokens(text: str) -> Iterator[_Token]:
    """Tokens in reading order, produced lazily so that the first problem met while reading
    is the one reported (``I(__import__('os'))`` is refused as a call, at ``I``)."""
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char in " \t":
            i += 1
        elif char in _PUNCT:
            yield _Token(_PUNCT[char], char, i + 1)
            i += 1
        elif char.isascii() and (char.isalpha() or char in "_."):
            end = _name_end(text, i + 1)
            yield _Token("NAME", text[i:end], i + 1)
            i = end
        elif char.isascii() and char.isdigit():
            end = _name_end(text, i + 1)
            if text[i:end] != "1":
                raise _Fail(i + 1, f"number {text[i:end]!r} is not allowed: the only number "
                                   "is 1 (the intercept)")
            yield _Token("ONE", "1", i + 1)
            i = end
        else:
            raise _Fail(i + 1, _char_problem(char))
    yield _Token("EOF", "", n + 1)


# --------------------------------------------------------------------------------------------
# parser


class _Parser:
    def __init__(self, text: str, columns: Sequence[str], responses: Sequence[str],
                 groups: Sequence[str], allow_cbind: bool) -> None:
        self.stream = _tokens(text)
        self.token = next(self.stream)
        self.ahead: _Token | None = None
        self.columns, self.responses, self.groups = set(columns), set(responses), set(groups)
        self.allow_cbind = allow_cbind

    def advance(self) -> _Token:
        token = self.token
        if self.ahead is not None:
            self.token, self.ahead = self.ahead, None
        else:
            self.token = next(self.stream)
        return token

    def peek(self) -> _Token:
        if self.ahead is None:
            self.ahead = next(self.stream)
        return self.ahead

    def expect(self, kind: str, what: str, context: str = "columns") -> _Token:
        if self.token.kind != kind:
            raise _Fail(self.token.position,
                        f"expected {what}, found {self._describe(self.token)}", context)
        return self.advance()

    @staticmethod
    def _describe(token: _Token) -> str:
        return "the end of the formula" if token.kind == "EOF" else repr(token.text)

    # -- names

    def name(self, allowed: set[str], context: str, what: str) -> str:
        """A NAME token that must be in `allowed`; every refusal says why."""
        token = self.token
        if token.kind != "NAME":
            raise _Fail(token.position, f"expected {what}, found {self._describe(token)}",
                        context)
        if self.peek().kind == "LPAREN":
            raise _Fail(token.position, f"function calls are not allowed ({token.text}(...))",
                        context)
        name, pos = token.text, token.position
        if name == ".":
            raise _Fail(pos, "'.' (all other columns) is not allowed: name the columns",
                        context)
        if name.startswith(("_", ".")):
            raise _Fail(pos, f"names starting with {name[0]!r} are not allowed ({name!r})",
                        context)
        if name in R_RESERVED:
            raise _Fail(pos, f"{name!r} is an R reserved word, not a column", context)
        if name in allowed and is_formula_name(name):
            self.advance()
            return name
        head, dot, _ = name.partition(".")
        if dot and (any(part.startswith("_") or not part for part in name.split(".")[1:])
                    or (head in self.columns | self.responses | self.groups
                        and head not in ("item", "system"))):
            raise _Fail(pos + len(head), f"attribute access is not allowed ({name!r})",
                        context)
        problem = f"unknown {what} {name!r}"
        close = difflib.get_close_matches(name, sorted(allowed), n=1)
        if close:
            problem += f" (did you mean {close[0]!r}?)"
        raise _Fail(pos, problem, context)

    # -- grammar

    def formula(self) -> Formula:
        response = self.response()
        if self.token.kind != "TILDE":
            raise _Fail(self.token.position,
                        f"expected '~' after the response, found {self._describe(self.token)}",
                        "responses")
        self.advance()
        fixed: list[tuple[str, ...]] = []
        random: list[RandomTerm] = []
        intercept = False
        while True:
            if self.token.kind == "ONE":
                self.advance()
                if self.token.kind in ("COLON", "STAR"):
                    raise _Fail(self.token.position,
                                "'1' (the intercept) cannot be part of an interaction")
                intercept = True
            elif self.token.kind == "LPAREN":
                random.append(self.random_term())
            else:
                start = self.token.position
                fixed.extend(self.product())
                if len(fixed) > MAX_FIXED_TERMS:
                    raise _Fail(start, f"more than {MAX_FIXED_TERMS} fixed-effect terms")
            if self.token.kind == "EOF":
                break
            if self.token.kind == "TILDE":
                raise _Fail(self.token.position, "only one '~' is allowed")
            if self.token.kind == "COMMA":
                raise _Fail(self.token.position, "',' is only allowed inside cbind(...)")
            if self.token.kind == "RPAREN":
                raise _Fail(self.token.position, "unbalanced ')'")
            if self.token.kind == "BAR":
                raise _Fail(self.token.position,
                            "'|' belongs inside a random-effect term such as (1|rater)")
            self.expect("PLUS", "'+' between terms")
        unique: dict[frozenset[str], tuple[str, ...]] = {}
        for term in fixed:
            unique.setdefault(frozenset(term), term)
        return Formula(tuple(response), tuple(unique.values()), tuple(random), intercept)

    def response(self) -> list[str]:
        token = self.token
        if token.kind == "TILDE":
            raise _Fail(token.position, "the response is missing before '~'", "responses")
        if token.kind == "NAME" and token.text == "cbind" and self.peek().kind == "LPAREN":
            if not self.allow_cbind:
                raise _Fail(token.position, "function calls are not allowed (cbind(...) "
                                            "responses are accepted only by the Python API)",
                            "responses")
            self.advance()
            self.advance()
            first = self.name(self.responses, "responses", "response column")
            self.expect("COMMA", "',' between the two columns of cbind(successes, failures)",
                        "responses")
            second = self.name(self.responses, "responses", "response column")
            self.expect("RPAREN", "')' closing cbind(successes, failures)", "responses")
            return [first, second]
        return [self.name(self.responses, "responses", "response")]

    def interaction(self) -> tuple[str, ...]:
        names = [self.name(self.columns, "columns", "column")]
        while self.token.kind == "COLON":
            self.advance()
            if self.token.kind == "ONE":
                raise _Fail(self.token.position,
                            "'1' (the intercept) cannot be part of an interaction")
            names.append(self.name(self.columns, "columns", "column"))
        return tuple(_unique(names))

    def product(self) -> list[tuple[str, ...]]:
        """``f1 * f2 * ...`` -> every non-empty combination of the factors, as R expands it
        (f1, f2, f1:f2, ... in order of appearance; R sorts them by degree itself)."""
        start = self.token.position
        factors = [self.interaction()]
        while self.token.kind == "STAR":
            self.advance()
            if self.token.kind == "ONE":
                raise _Fail(self.token.position,
                            "'1' (the intercept) cannot be part of an interaction")
            factors.append(self.interaction())
            # k factors expand to 2**k - 1 terms: refuse before expanding, not after.
            if len(factors) > MAX_PRODUCT_FACTORS:
                raise _Fail(start, f"a product may have at most {MAX_PRODUCT_FACTORS} "
                                   "factors (a*b*c*d expands to 15 terms already)")
        terms: list[tuple[str, ...]] = []
        for factor in factors:
            terms += [factor] + [tuple(_unique(t + factor)) for t in terms]
        return sorted(terms, key=len)

    def random_term(self) -> RandomTerm:
        self.advance()  # "("
        effects: list[str] = []
        while True:
            if self.token.kind == "ONE":
                self.advance()
                effects.append("1")
            elif self.token.kind == "LPAREN":
                raise _Fail(self.token.position, "nested parentheses are not allowed")
            elif self.token.kind == "NAME":
                effects.append(self.name(self.columns, "columns", "column"))
                if self.token.kind in ("COLON", "STAR"):
                    raise _Fail(self.token.position, "interactions are not allowed inside a "
                                                     "random-effect term: use 1 or a column")
            else:
                raise _Fail(self.token.position,
                            "expected 1 or a column in a random-effect term such as (1|rater),"
                            f" found {self._describe(self.token)}")
            if self.token.kind != "PLUS":
                break
            self.advance()
        if self.token.kind == "RPAREN":
            raise _Fail(self.token.position, "parentheses are only for random-effect terms "
                                             "such as (1|rater): '|' and a grouping column "
                                             "are missing")
        self.expect("BAR", "'|' in a random-effect term such as (1|rater)")
        if self.token.kind == "BAR":
            raise _Fail(self.token.position,
                        "'||' (uncorrelated random effects) is not supported")
        group = [self.name(self.groups, "groups", "grouping column")]
        while self.token.kind == "COLON":
            self.advance()
            group.append(self.name(self.groups, "groups", "grouping column"))
        self.expect("RPAREN", "')' closing the random-effect term", "groups")
        return RandomTerm(tuple(_unique(effects)), tuple(_unique(group)))


def _listing(names: Iterable[str]) -> str:
    usable = [n for n in _unique(names) if is_formula_name(n)]
    return ", ".join(usable) if usable else "(none)"


def parse_formula(
    text: object,
    columns: Iterable[str],
    *,
    responses: Iterable[str] | None = None,
    groups: Iterable[str] | None = None,
    allow_cbind: bool = False,
    label: str = "formula",
) -> Formula:
    """Parse `text` against the allowed names; raise :class:`FormulaError` otherwise.

    ``columns``: names the fixed and random-effect terms may use; ``responses`` and
    ``groups``: names allowed as the response and as grouping factors (default: ``columns``).
    ``allow_cbind``: accept a ``cbind(successes, failures)`` response (the Python API of
    :func:`analysis.stats.models.fit_binomial_glmm`; user entry points leave it off).
    ``label`` starts every message (``formulas[usable]`` for a per-criterion formula).
    """
    columns = [str(c) for c in columns]
    responses = columns if responses is None else [str(r) for r in responses]
    groups = columns if groups is None else [str(g) for g in groups]
    lists = {
        "columns": f"columns are {_listing(columns)}",
        "responses": f"the response is one of {_listing(responses)}",
        "groups": f"grouping columns are {_listing(groups)}",
    }
    if not isinstance(text, str):
        raise FormulaError(label, f"must be text, not {type(text).__name__}",
                           allowed=f"e.g. {EXAMPLE!r}")
    if len(text) > MAX_LENGTH:
        raise FormulaError(label, f"too long ({len(text)} characters; at most {MAX_LENGTH})")
    if not text.strip() or "~" not in text:
        # Kept word for word from the first version of this check: scripts match on it.
        raise FormulaError(label, f"formula must look like {EXAMPLE!r}", allowed=lists["columns"])
    try:
        return _Parser(text, columns, responses, groups, allow_cbind).formula()
    except _Fail as fail:
        raise FormulaError(label, fail.problem, position=fail.position,
                           allowed=lists[fail.context]) from None
