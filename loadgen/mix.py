"""A request mix: named requests with generated fields, rendered ahead in chunks.

A `RequestSpec` is one request of a mix as the load generator gets it (spec.json): a name, a
weight, a method, a target, headers and a body, each of which may hold generated fields:

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

`Feed` turns a mix into request bytes. Every value is drawn from one numpy generator seeded
with the trial's seed and the process's stream index, so the same seed sends the same bytes in
the same order, and each process of a phase draws its own stream (and deals a CSV file's rows
out: process i of P reads rows i, i+P, ...). A chunk of CHUNK_REQUESTS requests is rendered at
once, whole columns of values per field (numpy), then one str.format per request; the next
chunk is rendered in its own loop callback once half of the current one is sent, so a send
never waits for rendering, and memory holds two chunks whatever the phase's length.
"""

from __future__ import annotations

import csv
import os
import re
import string
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import numpy as np

CHUNK_REQUESTS = 512
FIELD = re.compile(r"\{([a-z]+)(?::([^{}]*))?\}")
KINDS = ("seq", "uuid", "int", "choice", "text", "zipf", "file", "env")
MAX_TEXT = 1 << 16
MAX_ZIPF_KEYS = 10_000_000
_ALPHABET = np.frombuffer((string.ascii_letters + string.digits).encode(), dtype=np.uint8)
_SALT = 0x6D6978  # decorrelates these draws from the schedule's, seeded with the same seed


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


class _Template:
    """One text with fields, as a str.format string and the fields that fill it."""

    def __init__(self, text: str, quoted: bool = False, environ=None) -> None:
        pieces, fields, at = [], [], 0
        for m in FIELD.finditer(text):
            pieces.append(text[at : m.start()].replace("{", "{{").replace("}", "}}"))
            kind, arg = m.group(1), m.group(2)
            parse_field(kind, arg)
            if kind == "env":
                value = (environ if environ is not None else os.environ).get(arg)
                if value is None:
                    raise ValueError(f"{{env:{arg}}}: the environment variable {arg} is not set")
                pieces.append(value.replace("{", "{{").replace("}", "}}"))
            else:
                pieces.append(f"{{{len(fields)}}}")
                fields.append(Field(kind, arg or "", quoted and kind in ("choice", "file")))
            at = m.end()
        pieces.append(text[at:].replace("{", "{{").replace("}", "}}"))
        self.format = "".join(pieces)
        self.fields = fields


class _Request:
    """A RequestSpec compiled: the head up to Content-Length and the body, as templates."""

    def __init__(self, r: RequestSpec, common, host: str, port: int, keepalive: bool, env):
        path, sep, query = r.target.partition("?")
        target = path + sep + query
        own = {k.lower() for k, _ in r.headers}
        headers = [(k, v) for k, v in common if k.lower() not in own] + list(r.headers)
        lines = [f"{r.method} {target} HTTP/1.1", f"Host: {host}:{port}"]
        lines += [f"{k}: {v}" for k, v in headers]
        body = r.body
        # after Content-Length, as worker.build_request writes them: the same bytes
        self.sized = bool(body) or r.method in ("POST", "PUT")
        tail = []
        if self.sized and not any(k.lower() == "content-type" for k, _ in headers):
            tail.append("Content-Type: application/x-www-form-urlencoded")
        if not keepalive:
            tail.append("Connection: close")
        self.tail = "".join(t + "\r\n" for t in tail) + "\r\n"
        head = "\r\n".join(lines) + "\r\n"
        # fields in the query are percent-encoded; the rest of the head goes as written
        cut = len(f"{r.method} {path}{sep}")
        first = _Template(head[:cut], environ=env)
        query_t = _Template(query, quoted=True, environ=env)
        rest = _Template(head[cut + len(query) :], environ=env)
        self.head = _Template("")
        self.head.format = first.format + _shift(query_t.format, len(first.fields))
        self.head.format += _shift(rest.format, len(first.fields) + len(query_t.fields))
        self.head.fields = first.fields + query_t.fields + rest.fields
        self.body = _Template(body, environ=env)
        self.static = None
        if not self.head.fields and not self.body.fields:
            self.static = self._join(self.head.format.format(), self.body.format.format())

    def _join(self, head: str, body: str) -> bytes:
        b = body.encode()
        if self.sized:
            return (head + f"Content-Length: {len(b)}\r\n" + self.tail).encode() + b
        return (head + self.tail).encode() + b


def _shift(fmt: str, by: int) -> str:
    """A format string's positional fields renumbered from `by`."""
    if not by:
        return fmt
    return re.sub(r"(?<!\{)\{(\d+)\}", lambda m: f"{{{int(m.group(1)) + by}}}", fmt)


class Feed:
    """The requests of a mix, in send order (module docstring).

    take(chunk, row) returns the next request's bytes and writes its index in the mix into
    the row's `request` column. `schedule` (e.g. loop.call_soon) runs the next chunk's
    rendering in its own callback; without it the chunk is rendered when needed.
    """

    def __init__(
        self,
        requests: tuple[RequestSpec, ...],
        common: tuple[tuple[str, str], ...],
        host: str,
        port: int,
        keepalive: bool,
        seed: int,
        stream: int = 0,
        streams: int = 1,
        seq_base: int = 0,
        chunk_requests: int = CHUNK_REQUESTS,
        schedule=None,
        environ=None,
    ) -> None:
        weights = np.array([r.weight for r in requests], dtype=np.float64)
        if weights.size == 0 or (weights < 0).any() or weights.sum() <= 0:
            raise ValueError("a mix needs weights >= 0 that sum to more than 0")
        self.cum = np.cumsum(weights / weights.sum())
        self.cum[-1] = 1.0
        self.requests = [_Request(r, common, host, port, keepalive, environ) for r in requests]
        self.rng = np.random.default_rng([seed & (2**63 - 1), stream, streams, _SALT])
        self.stream, self.streams = stream, streams
        self.seq = seq_base
        self.size = chunk_requests
        self.schedule = schedule
        self.columns: dict[str, list[str]] = {}  # CSV columns, by "path:column"
        self.cursors: dict[str, int] = {}  # rows read in order, by "path:column"
        self.zipf: dict[tuple[float, int], np.ndarray] = {}
        for req in self.requests:
            for f in req.head.fields + req.body.fields:
                if f.kind == "file":
                    path, column, _ = parse_field("file", f.arg)
                    key = f"{path}:{column}"
                    if key not in self.columns:
                        self.columns[key] = read_column(path, column)
                        self.cursors[key] = stream
        self.kinds: list[int] = []
        self.bytes: list[bytes] = []
        self.pos = 0
        self.ahead: tuple[list[int], list[bytes]] | None = None
        self.asked = False

    def take(self, chunk, row: int) -> bytes:
        """The next request's bytes; its index in the mix goes into chunk.request[row]."""
        i = self.pos
        if i >= len(self.bytes):
            self._advance()
            i = 0
        self.pos = i + 1
        if i == len(self.bytes) >> 1 and self.schedule is not None and not self.asked:
            self.asked = True
            self.schedule(self._prefetch)
        chunk.request[row] = self.kinds[i]
        return self.bytes[i]

    def _prefetch(self) -> None:
        if self.ahead is None:
            self.ahead = self.render(self.size)

    def _advance(self) -> None:
        self.kinds, self.bytes = self.ahead if self.ahead is not None else self.render(self.size)
        self.ahead = None
        self.asked = False

    def render(self, n: int) -> tuple[list[int], list[bytes]]:
        """The next n requests: their indexes in the mix and their bytes."""
        kinds = np.searchsorted(self.cum, self.rng.random(n), side="right")
        kinds = np.minimum(kinds, len(self.requests) - 1)
        out: list[bytes | None] = [None] * n
        seq0 = self.seq
        self.seq += n
        for k, req in enumerate(self.requests):
            rows = np.flatnonzero(kinds == k)
            if rows.size == 0:
                continue
            if req.static is not None:
                for r in rows.tolist():
                    out[r] = req.static
                continue
            heads = self._fill(req.head, rows, seq0)
            bodies = self._fill(req.body, rows, seq0)
            join = req._join
            for r, h, b in zip(rows.tolist(), heads, bodies):
                out[r] = join(h, b)
        return kinds.tolist(), out  # type: ignore[return-value]

    def _fill(self, t: _Template, rows: np.ndarray, seq0: int) -> list[str]:
        m = rows.size
        if not t.fields:
            return [t.format] * m if "{" not in t.format else [t.format.format()] * m
        cols = [self._values(f, rows, seq0) for f in t.fields]
        fmt = t.format.format
        return [fmt(*vals) for vals in zip(*cols)]

    def _values(self, f: Field, rows: np.ndarray, seq0: int) -> list[str]:
        """m values of one field (m = rows.size), drawn as whole columns."""
        m = rows.size
        rng = self.rng
        args = parse_field(f.kind, f.arg or None)
        if f.kind == "seq":
            out = list(map(str, (rows + seq0 + 1).tolist()))
        elif f.kind == "int":
            out = list(map(str, rng.integers(args[0], args[1] + 1, m).tolist()))
        elif f.kind == "choice":
            words = args
            out = [words[i] for i in rng.integers(0, len(words), m).tolist()]
        elif f.kind == "text":
            n = args[0]
            raw = _ALPHABET[rng.integers(0, _ALPHABET.size, m * n)].tobytes().decode("ascii")
            out = [raw[i : i + n] for i in range(0, m * n, n)]
        elif f.kind == "zipf":
            cdf = self._zipf_cdf(*args)
            keys = np.searchsorted(cdf, rng.random(m), side="right") + 1
            out = list(map(str, np.minimum(keys, args[1]).tolist()))
        elif f.kind == "uuid":
            b = np.frombuffer(rng.bytes(16 * m), dtype=np.uint8).reshape(m, 16).copy()
            b[:, 6] = (b[:, 6] & 0x0F) | 0x40
            b[:, 8] = (b[:, 8] & 0x3F) | 0x80
            h = b.tobytes().hex()
            out = [
                f"{h[i : i + 8]}-{h[i + 8 : i + 12]}-{h[i + 12 : i + 16]}-"
                f"{h[i + 16 : i + 20]}-{h[i + 20 : i + 32]}"
                for i in range(0, 32 * m, 32)
            ]
        else:  # file
            path, column, order = args
            key = f"{path}:{column}"
            values = self.columns[key]
            if order == "random":
                picks = rng.integers(0, len(values), m).tolist()
            else:
                at = self.cursors[key]
                picks = [(at + j * self.streams) % len(values) for j in range(m)]
                self.cursors[key] = at + m * self.streams
            out = [values[i] for i in picks]
        if f.quoted:
            out = [quote(v, safe="") for v in out]
        return out

    def _zipf_cdf(self, exponent: float, keys: int) -> np.ndarray:
        cdf = self.zipf.get((exponent, keys))
        if cdf is None:
            w = np.arange(1, keys + 1, dtype=np.float64) ** -exponent
            cdf = np.cumsum(w)
            cdf /= cdf[-1]
            self.zipf[(exponent, keys)] = cdf
        return cdf


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


def file_paths(requests: tuple[RequestSpec, ...]) -> list[tuple[str, str]]:
    """(path, column) of every {file:...} field of a mix."""
    out = []
    for r in requests:
        for text in (r.target, r.body, *(v for _, v in r.headers)):
            for kind, args in fields_in(text):
                if kind == "file":
                    out.append((args[0], args[1]))
    return out


def resolve_file(path: str, base: Path) -> str:
    """A {file:...} path made absolute against `base` (the experiment file's directory)."""
    p = Path(path)
    return str(p if p.is_absolute() else (base / p).resolve())
