"""A request mix rendered ahead in chunks: `Feed` turns a mix (fields.py: RequestSpec and the
generated fields) into request bytes.

Every value is drawn from one numpy generator seeded with the trial's seed and the process's
stream index, so the same seed sends the same bytes in the same order, and each process of a
phase draws its own stream (and deals a CSV file's rows out: process i of P reads rows i, i+P,
...). A chunk of CHUNK_REQUESTS requests is rendered at once, whole columns of values per field
(numpy), then one str.format per request; the next chunk is rendered in its own loop callback
once half of the current one is sent, so a send never waits for rendering, and memory holds two
chunks whatever the phase's length.

`ReplayFeed` sends a replay file (replay.py owns its format). The file is memory-mapped, never
read into the process: its lines are located once (two int64 offsets a line: 16 MB for a
million lines, plus the page cache) and each line is parsed when its chunk is rendered, so
memory does not grow with the phase. Process i of P replays lines i, i+P, ... of the file;
with `shuffle` each pass over them is a fresh permutation drawn from the trial's seed.
"""

from __future__ import annotations

import mmap
import os
import re
import string
from urllib.parse import quote

import numpy as np

from .fields import FIELD, Field, RequestSpec, parse_field, read_column
from .replay import is_jsonl, parse_line, plain_request

CHUNK_REQUESTS = 256  # ~1 ms of rendering per loop callback for a mix with JSON bodies
_ALPHABET = np.frombuffer((string.ascii_letters + string.digits).encode(), dtype=np.uint8)
_SALT = 0x6D6978  # decorrelates these draws from the schedule's, seeded with the same seed
_REPLAY_SALT = 0x7265706C


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
        own = {k.lower() for k, _ in r.headers}
        headers = [(k, v) for k, v in common if k.lower() not in own] + list(r.headers)
        lines = [f"{r.method} {r.target} HTTP/1.1", f"Host: {host}:{port}"]
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
        if self.sized:
            if body.isascii():  # a flag CPython keeps: its length is its length in bytes
                return f"{head}Content-Length: {len(body)}\r\n{self.tail}{body}".encode()
            b = body.encode()
            return (head + f"Content-Length: {len(b)}\r\n" + self.tail).encode() + b
        return (head + self.tail + body).encode()


def _shift(fmt: str, by: int) -> str:
    """A format string's positional fields renumbered from `by`."""
    if not by:
        return fmt
    return re.sub(r"(?<!\{)\{(\d+)\}", lambda m: f"{{{int(m.group(1)) + by}}}", fmt)


class _Chunks:
    """Requests handed out one at a time from chunks rendered ahead: take(chunk, row) returns
    the next request's bytes and writes its endpoint index into the row's `request` column.
    `schedule` (e.g. loop.call_soon) runs the next chunk's rendering in its own callback once
    half the current one is sent; without it a chunk is rendered when needed. A subclass sets
    `size` and `schedule` and gives render(n) -> (indexes, bytes)."""

    size = CHUNK_REQUESTS
    schedule = None
    kinds: list[int] = []
    bytes: list[bytes] = []
    pos = 0
    ahead: tuple[list[int], list[bytes]] | None = None
    asked = False

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
        raise NotImplementedError


class Feed(_Chunks):
    """The requests of a mix, in send order (module docstring; take() as _Chunks')."""

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
        self.args: dict[Field, tuple] = {}  # each field's parsed arguments, parsed once
        for req in self.requests:
            for f in req.head.fields + req.body.fields:
                if f.kind == "file":
                    path, column, _ = parse_field("file", f.arg)
                    key = f"{path}:{column}"
                    if key not in self.columns:
                        self.columns[key] = read_column(path, column)
                        self.cursors[key] = stream

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
        args = self.args.get(f)
        if args is None:
            args = self.args[f] = parse_field(f.kind, f.arg or None)
            if f.kind == "choice" and f.quoted:
                args = self.args[f] = tuple(quote(v, safe="") for v in args)
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
        if f.quoted and f.kind != "choice":  # a choice's words were quoted once, above
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


def _offsets(buf) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the file's lines, blank ones included."""
    data = np.frombuffer(buf, dtype=np.uint8)
    nl = np.flatnonzero(data == 10)
    starts = np.concatenate([[0], nl + 1])
    ends = np.concatenate([nl, [len(data)]])
    keep = starts < ends
    return starts[keep], ends[keep]


class ReplayFeed(_Chunks):
    """The requests of a replay file in send order (module docstring; take() as _Chunks')."""

    def __init__(
        self,
        path: str,
        order: str,
        names: tuple[str, ...],
        common: tuple[tuple[str, str], ...],
        host: str,
        port: int,
        keepalive: bool,
        seed: int,
        stream: int = 0,
        streams: int = 1,
        chunk_requests: int = CHUNK_REQUESTS,
        schedule=None,
        environ=None,
    ) -> None:
        self.schedule = schedule
        env = os.environ if environ is None else environ
        self.common = [(k, FIELD.sub(lambda m: _env(m, env), v)) for k, v in common]
        self.jsonl = is_jsonl(path)
        self.index = {n: i for i, n in enumerate(names)}
        self.host, self.port, self.keepalive = host, port, keepalive
        with open(path, "rb") as f:
            self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        starts, ends = _offsets(self.map)
        if not self.jsonl:  # comments and blank lines are no requests
            firsts = np.frombuffer(self.map, dtype=np.uint8)[starts]
            keep = (firsts != ord("#")) & (ends - starts > 0)
            starts, ends = starts[keep], ends[keep]
        mine = np.arange(stream, len(starts), max(1, streams))
        if mine.size == 0:  # more processes than lines: this one replays them all
            mine = np.arange(len(starts))
        self.starts, self.ends = starts[mine], ends[mine]
        self.shuffle = order == "shuffle"
        self.rng = np.random.default_rng([seed & (2**63 - 1), stream, streams, _REPLAY_SALT])
        self.order = self._pass()
        self.cursor = 0
        self.size = chunk_requests

    def _pass(self) -> np.ndarray:
        n = len(self.starts)
        return self.rng.permutation(n) if self.shuffle else np.arange(n)

    def render(self, n: int) -> tuple[list[int], list[bytes]]:
        """The next n requests: their endpoint indexes and bytes (a malformed line, which
        scan() refuses before a trial, is sent as GET / under endpoint 0)."""
        kinds, out = [], []
        for _ in range(n):
            if self.cursor == len(self.order):
                self.order, self.cursor = self._pass(), 0
            k = int(self.order[self.cursor])
            self.cursor += 1
            line = self.map[int(self.starts[k]) : int(self.ends[k])].strip()
            try:
                name, method, target, headers, body = parse_line(line, self.jsonl)
            except ValueError:
                name, method, target, headers, body = "", "GET", "/", [], ""
            own = {h.lower() for h, _ in headers}
            headers = [(h, v) for h, v in self.common if h.lower() not in own] + headers
            kinds.append(self.index.get(name, 0))
            out.append(
                plain_request(
                    method, target, headers, body.encode(), self.host, self.port, self.keepalive
                )
            )
        return kinds, out


def _env(m: re.Match, env) -> str:
    if m.group(1) != "env":
        return m.group(0)
    value = env.get(m.group(2) or "")
    if value is None:
        raise ValueError(f"{{env:{m.group(2)}}}: the environment variable is not set")
    return value
