"""The generated fields of a request mix, and a mix's requests as the load generator gets them
(spec.json): what the experiment layer checks before anything runs. No numpy here: `perfctl
plan` stays light; mix.py renders.

    {seq}                  a number per request (this process's seq_base + 1, + 2, ...)
    {uuid}                 a random version-4 UUID
    {int:A..B}             an integer drawn uniformly in [A, B]
    {choice:a|b|c}         one of the words, uniformly
    {text:N}               N random letters and digits
    {zipf:S:N}             a key in 1..N drawn with P(k) proportional to 1/k^S (1 the hottest)
    {file:PATH:COLUMN}     the CSV file's column, row after row (looping); `:random` at the
                           end draws rows at random instead
    {env:NAME}             the environment variable NAME of the load-generator process, read
                           once when the phase starts (for a secret in a header: spec.json
                           holds `{env:NAME}`, never the value)
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

FIELD = re.compile(r"\{([a-z]+)(?::([^{}]*))?\}")
KINDS = ("seq", "uuid", "int", "choice", "text", "zipf", "file", "env")
MAX_TEXT = 1 << 16
MAX_ZIPF_KEYS = 10_000_000


@dataclass(frozen=True)
class RequestSpec:
    """One request of a mix. `target` is the path plus query; header values and body may hold
    fields too (module docstring). weight >= 0; the weights of a mix sum to more than 0."""

    name: str
    weight: float = 1.0
    method: str = "GET"
    target: str = "/"
    headers: tuple[tuple[str, str], ...] = ()
    body: str = ""


@dataclass(frozen=True)
class Field:
    """One generated field: its kind, its argument text and whether values are
    percent-encoded (a field in a query parameter)."""

    kind: str
    arg: str
    quoted: bool = False


def parse_field(kind: str, arg: str | None) -> tuple:
    """The parsed arguments of one field; ValueError (one sentence with the fix) otherwise."""
    if kind not in KINDS:
        raise ValueError(
            f"unknown generated field {{{kind}{':' + arg if arg is not None else ''}}}; the "
            "fields are {seq}, {uuid}, {int:1..5000}, {choice:a|b}, {text:256}, "
            "{zipf:1.1:10000}, {file:users.csv:name} and {env:NAME}"
        )
    if kind in ("seq", "uuid"):
        if arg is not None:
            raise ValueError(f"{{{kind}}} takes no argument, not {{{kind}:{arg}}}")
        return ()
    if arg is None or arg == "":
        raise ValueError(f"{{{kind}}} needs an argument, e.g. {_EXAMPLES[kind]}")
    try:
        if kind == "int":
            lo, _, hi = arg.partition("..")
            a, b = int(lo), int(hi)
            if a > b:
                raise ValueError
            return (a, b)
        if kind == "text":
            n = int(arg)
            if not 1 <= n <= MAX_TEXT:
                raise ValueError
            return (n,)
        if kind == "zipf":
            s, _, n = arg.partition(":")
            exponent, keys = float(s), int(n)
            if not (exponent > 0 and 1 <= keys <= MAX_ZIPF_KEYS):
                raise ValueError
            return (exponent, keys)
    except ValueError:
        raise ValueError(f"{{{kind}:{arg}}} is malformed; write it as {_EXAMPLES[kind]}") from None
    if kind == "choice":
        return tuple(arg.split("|"))
    if kind == "env":
        return (arg,)
    parts = arg.split(":")  # file
    order = "order"
    if len(parts) == 3 and parts[2] in ("random", "order"):
        order = parts.pop()
    if len(parts) != 2 or not parts[0] or not parts[1]:
        raise ValueError(f"{{file:{arg}}} is malformed; write it as {_EXAMPLES['file']}")
    return (parts[0], parts[1], order)


_EXAMPLES = {
    "int": "{int:1..5000} (both ends included, low first)",
    "text": f"{{text:256}} (1 to {MAX_TEXT} characters)",
    "zipf": f"{{zipf:1.1:10000}} (exponent > 0, then 1 to {MAX_ZIPF_KEYS:,} keys)",
    "choice": "{choice:left|right}",
    "file": "{file:users.csv:name} or {file:users.csv:name:random}",
    "env": "{env:API_TOKEN}",
}


def fields_in(text: str) -> list[tuple[str, tuple]]:
    """(kind, parsed arguments) of every field in text, in order; ValueError on a bad one."""
    return [(m.group(1), parse_field(m.group(1), m.group(2))) for m in FIELD.finditer(text)]


def read_column(path: str, column: str) -> list[str]:
    """A CSV file's column (its first line names the columns). OSError when the file cannot
    be read; ValueError when the column is missing or the file has no rows."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        names = reader.fieldnames or []
        if column not in names:
            raise ValueError(
                f"{path} has no column {column!r}; its columns are {', '.join(names) or 'none'}"
            )
        values = [row[column] for row in reader]
    if not values:
        raise ValueError(f"{path} has no rows under its header line")
    return values


def check_mix(requests: tuple[RequestSpec, ...]) -> None:
    """ValueError (one sentence with the fix) for a mix the load generator cannot send: no
    request, duplicate names, a negative weight, weights summing to 0, a bad field."""
    if not requests:
        raise ValueError("a mix needs at least one request")
    names = [r.name for r in requests]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"request names must be unique; {', '.join(dupes)} is used twice")
    for r in requests:
        if r.weight < 0:
            raise ValueError(f"request {r.name!r} has weight {r.weight}; weights must be >= 0")
    if sum(r.weight for r in requests) <= 0:
        raise ValueError("the weights sum to 0; give at least one request a weight > 0")


def resolve_file(path: str, base: Path) -> str:
    """A {file:...} path made absolute against `base` (the experiment file's directory)."""
    p = Path(path)
    return str(p if p.is_absolute() else (base / p).resolve())
