"""The `workload:` block: one request, or a weighted mix of named requests, with headers and
generated fields (loadgen/fields.py), and the checks a mix needs before anything runs.

The one-request form (path, params, method, body) is as it always was; `requests:` replaces it
with a mix. `headers:` go on every request of either form. A mix reaches the load generator as
`LoadSpec.requests` (loadgen.fields.RequestSpec); so does a single request whose fields the old
`{seq}` template cannot render ({uuid}, {int:...}, {env:...}, ...).
"""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlencode

from pydantic import Field, field_validator

from loadgen.fields import FIELD, RequestSpec, check_mix, fields_in, read_column, resolve_file
from loadgen.replay import scan

from .base import FrozenModel
from .document import fail

_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # an HTTP method (RFC 9110 token)
# a JSON string holding one numeric field alone ("{int:1..9}") is sent as a number
_NUMERIC = re.compile(r'"(\{(?:int|zipf|seq)(?::[^{}"]*)?\})"')


def _check_path(v: str) -> str:
    if not v.startswith("/"):
        raise ValueError(f"path must start with '/', got {v!r}")
    return v


def query_target(path: str, params: dict) -> str:
    """path?query with the params percent-encoded, except their generated fields, which the
    load generator renders (and encodes) per request."""
    if not params:
        return path
    parts = []
    for k, v in params.items():
        text, at, enc = str(v), 0, []
        for m in FIELD.finditer(text):
            enc += [quote(text[at : m.start()], safe=""), m.group(0)]
            at = m.end()
        enc.append(quote(text[at:], safe=""))
        parts.append(f"{quote(str(k), safe='')}={''.join(enc)}")
    return f"{path}?{'&'.join(parts)}"


class Request(FrozenModel):
    """One named request of a mix."""

    name: str = Field(
        min_length=1,
        description="the endpoint's name: the `request` column of requests.parquet, the rows "
        "of endpoints.csv, `where: {endpoint: NAME}` in thresholds",
    )
    weight: float = Field(
        1.0, description="its share of the requests: weight / sum of the weights (>= 0)"
    )
    method: str = Field("GET", description="any HTTP method (GET, POST, PUT, DELETE, ...)")
    path: str = Field("/work", description="the path; may hold generated fields")
    params: dict[str, str | int | float] = Field(
        default_factory=dict,
        description="the query string; values may hold generated fields (percent-encoded)",
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="this request's headers (over `workload.headers` of the same name)",
    )
    body: str | dict[str, Any] = Field(
        "",
        description="a string, or a mapping sent as JSON with Content-Type: "
        'application/json ("{int:1..9}" alone in a JSON string is sent as a number)',
    )

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        return _check_path(v)

    @field_validator("method")
    @classmethod
    def _method(cls, v: str) -> str:
        if not _TOKEN.match(v):
            raise ValueError(f"{v!r} is not an HTTP method (one word: GET, POST, PATCH, ...)")
        return v

    def spec(self, common: dict[str, str]) -> RequestSpec:
        headers = dict(self.headers)
        body = self.body
        if isinstance(body, dict):
            body = _NUMERIC.sub(r"\1", json.dumps(body))
            if not any(k.lower() == "content-type" for k in (*headers, *common)):
                headers["Content-Type"] = "application/json"
        return RequestSpec(
            name=self.name,
            weight=float(self.weight),
            method=self.method,
            target=query_target(self.path, self.params),
            headers=tuple(headers.items()),
            body=body,
        )


class Workload(FrozenModel):
    """What every request asks of the server: an operation (path), its arguments, a method and a
    body, or a weighted mix of such requests (`requests:`). One workload serves every driver
    (HTTP and RMI alike); headers and mixes need the HTTP generator."""

    path: str = Field(
        "/work",
        description="the operation: /work, /search, /register, /db, /health for the bundled "
        "servers (servers/PROTOCOL.md), any path for a `cmd` server",
    )
    params: dict[str, str | int | float] = Field(
        default_factory=dict,
        description="the operation's arguments, sent as the query string "
        "(e.g. {spin_us: 200, sleep_us: 0})",
    )
    method: Literal["GET", "POST"] = Field("GET", description="the HTTP method")
    body: str = Field(
        "",
        description="request body; `{seq}` in it (or in path) becomes a unique number per "
        "request, and the other generated fields work too (docs/workloads.md)",
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="headers sent with every request; a value may read an environment "
        "variable of the load generator, `{env:NAME}`, never written to a file",
    )
    requests: list[Request] | None = Field(
        None,
        description="a mix instead of the one request: named requests, each drawn with "
        "probability weight / sum of weights (docs/workloads.md)",
    )
    replay: str | None = Field(
        None,
        description="requests read from a file instead (relative to the experiment file), "
        "looping: .jsonl (one JSON request a line) or one request target a line",
    )
    replay_order: Literal["order", "shuffle"] = Field(
        "order", description="replay: the file's order, or a fresh shuffle each pass"
    )

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        return _check_path(v)

    def model_dump(self, **kwargs) -> dict[str, Any]:
        """The fields, less `headers` and `requests` when unused: cell ids hash this, and
        cells written before those existed keep their ids."""
        out = super().model_dump(**kwargs)
        if not out.get("headers"):
            out.pop("headers", None)
        for key in ("requests", "replay"):
            if out.get(key) is None:
                out.pop(key, None)
        if out.get("replay_order") == "order":
            del out["replay_order"]
        return out

    @property
    def target(self) -> str:
        """The HTTP request target of the one-request form: path plus the params."""
        query = urlencode(dict(self.params))
        return self.path + (f"?{query}" if query else "")

    @property
    def probe_target(self) -> str:
        """A literal target for a one-off probe (a `cmd` server's dispatch probe): the one
        request's, a mix's first request without generated fields, else "/"."""
        if self.replay is not None:
            return "/"
        if not self.requests:
            return self.target
        for r in self.requests:
            target = query_target(r.path, r.params)
            if not FIELD.search(target):
                return target
        return "/"

    @property
    def endpoints(self) -> list[str]:
        """The endpoint names of a mix or the one request (its path); a replay's come from its
        file (replay_names)."""
        return [r.name for r in self.requests] if self.requests else [self.path]

    def mix(self) -> tuple[RequestSpec, ...]:
        """The requests as the load generator renders them (mix.Feed); () when the old
        one-request path (a fixed request, or {seq} alone) sends it as it always did."""
        common = dict(self.headers)
        if self.requests:
            return tuple(r.spec(common) for r in self.requests)
        texts = [self.path, self.body, *map(str, self.params.values()), *common.values()]
        if all(kind == "seq" for t in texts for kind, _ in _fields(t)) and not any(
            FIELD.search(str(v)) for v in self.params.values()
        ):
            return ()
        one = Request(
            name=self.path, method=self.method, path=self.path, params=self.params, body=self.body
        )
        return (one.spec(common),)

    def _weighted(self, key: str) -> float:
        if not self.requests:
            return float(self.params.get(key, 0) or 0)
        total = sum(r.weight for r in self.requests) or 1.0
        return sum(r.weight * _number(r.params.get(key, 0)) for r in self.requests) / total

    @property
    def spin_us(self) -> float:
        """The spin per request (a mix: the weighted mean of its requests')."""
        return self._weighted("spin_us")

    @property
    def sleep_us(self) -> float:
        return self._weighted("sleep_us")


def _fields(text: str) -> list[tuple[str, tuple]]:
    try:
        return fields_in(text)
    except ValueError:
        return [("bad", ())]


def _number(v: Any) -> float:
    try:
        return float(v or 0)
    except (TypeError, ValueError):
        return 0.0  # a generated field: not a number the models can read


def check_workload(w: Workload, driver: str, source: str, label: str) -> None:
    """PerfctlError (file, key, fix) for a workload the load generator could not send: a mix or
    headers with another driver, duplicate names, bad weights, an unknown or malformed field, a
    CSV file or column that is missing, an {env:NAME} that is not set. CSV paths are relative to
    the experiment file's directory."""
    where = f" (in cell {label})" if label else ""
    mixes = driver in MIX_DRIVERS  # reads the spec's `requests` (loadgen/DRIVER.md)
    headers = w.headers or any(r.headers for r in w.requests or [])
    if driver != "http" and ((w.requests and not mixes) or headers or w.replay):
        key = "workload.requests" if w.requests and not mixes else "workload.headers"
        key = "workload.replay" if w.replay else key
        what = "headers" if key == "workload.headers" else "a mix" if w.requests else "a replay"
        raise fail(
            source,
            key,
            f"the {driver} driver cannot send {what}{where}",
            "use the HTTP generator (load.driver: http); the rmi driver sends a mix without "
            "headers (loadgen/DRIVER.md)",
        )
    if w.requests:
        try:
            check_mix(tuple(r.spec({}) for r in w.requests))
        except ValueError as e:
            raise fail(
                source,
                "workload.requests",
                f"{e}{where}",
                "give each request its own name and a weight >= 0, at least one above 0",
            ) from None
    if w.replay is not None:
        _check_replay(w, source, where)
    texts = [("workload.path", w.path), ("workload.body", w.body)]
    texts += [(f"workload.params.{k}", str(v)) for k, v in w.params.items()]
    texts += [(f"workload.headers.{k}", v) for k, v in w.headers.items()]
    for i, r in enumerate(w.requests or []):
        at = f"workload.requests[{i}]"
        body = r.body if isinstance(r.body, str) else json.dumps(r.body)
        texts += [(f"{at}.path", r.path), (f"{at}.body", body)]
        texts += [(f"{at}.params.{k}", str(v)) for k, v in r.params.items()]
        texts += [(f"{at}.headers.{k}", v) for k, v in r.headers.items()]
    base = Path(source).parent
    for key, text in texts:
        _check_fields(key, text, base, source, where)
        _check_driver_fields(key, text, driver, source, where)


# drivers other than the HTTP generator that read a mix, and the fields each renders
MIX_DRIVERS = {"rmi": ("seq", "uuid")}


def _check_driver_fields(key: str, text: str, driver: str, source: str, where: str) -> None:
    if driver == "http":
        return
    kinds = MIX_DRIVERS.get(driver, ("seq",))
    for kind, _ in fields_in(text):
        if kind not in kinds:
            raise fail(
                source,
                key,
                f"the {driver} driver renders only "
                f"{' and '.join('{' + k + '}' for k in kinds)}, not {{{kind}}}{where}",
                "use the HTTP generator (load.driver: http) for the other generated fields",
            )


def _check_fields(key: str, text: str, base: Path, source: str, where: str) -> None:
    try:
        found = fields_in(text)
    except ValueError as e:
        raise fail(
            source, key, f"{e}{where}", "use one of the fields listed (docs/workloads.md)"
        ) from None
    for kind, args in found:
        if kind == "env" and args[0] not in os.environ:
            raise fail(
                source,
                key,
                f"{{env:{args[0]}}} reads the environment variable {args[0]}, which is not "
                f"set{where}",
                f"export {args[0]}=... in the shell that runs perfctl (its value is sent, "
                "never written to a file)",
            )
        if kind == "file":
            path = resolve_file(args[0], base)
            try:
                read_column(path, args[1])
            except OSError as e:
                raise fail(
                    source,
                    key,
                    f"cannot read the CSV file {path} ({e.strerror}){where}",
                    "give a path relative to the experiment file, or an absolute one",
                ) from None
            except (ValueError, csv.Error) as e:
                raise fail(
                    source,
                    key,
                    f"{e}{where}",
                    f"name a column of the file's header line, e.g. {{file:{args[0]}:COLUMN}}",
                ) from None


def _check_replay(w: Workload, source: str, where: str) -> None:
    one = {"path", "params", "method", "body", "requests"} & w.model_fields_set
    if one:
        raise fail(
            source,
            f"workload.{sorted(one)[0]}",
            f"a replay sends the requests of its file, so `{sorted(one)[0]}` has no use{where}",
            "remove it, or remove `replay` to send the one request or the mix",
        )
    try:
        replay_names(w, source)
    except OSError as e:
        raise fail(
            source,
            "workload.replay",
            f"cannot read the replay file {replay_path(w, source)} ({e.strerror}){where}",
            "give a path relative to the experiment file, or an absolute one",
        ) from None
    except ValueError as e:
        raise fail(
            source,
            "workload.replay",
            f"{e}{where}",
            'a .jsonl file holds one JSON object a line with at least "path"; any other '
            "file one request target (/path?query) a line",
        ) from None


def replay_path(w: Workload, source: str | None) -> str:
    """The replay file, made absolute against the experiment file's directory."""
    return resolve_file(w.replay, Path(source).parent if source else Path.cwd())


_SCANNED: dict[tuple, tuple[str, ...]] = {}


def replay_names(w: Workload, source: str | None) -> tuple[str, ...]:
    """The replay file's endpoint names (loadgen.replay.scan; each file scanned once per
    version of it in this process)."""
    path = replay_path(w, source)
    st = os.stat(path)
    key = (path, st.st_mtime_ns, st.st_size)
    if key not in _SCANNED:
        _SCANNED[key] = tuple(scan(path))
    return _SCANNED[key]


def resolved_mix(w: Workload, source: str | None) -> tuple[RequestSpec, ...]:
    """The workload's mix with {file:...} paths made absolute against the experiment file's
    directory (the load generator may run elsewhere in the tree)."""
    mix = w.mix()
    if not mix or source is None:
        return mix
    base = Path(source).parent

    def fix(text: str) -> str:
        def one(m: re.Match) -> str:
            if m.group(1) != "file":
                return m.group(0)
            path, _, rest = (m.group(2) or "").partition(":")
            return "{file:" + resolve_file(path, base) + ":" + rest + "}"

        return FIELD.sub(one, text)

    return tuple(
        RequestSpec(
            name=r.name,
            weight=r.weight,
            method=r.method,
            target=fix(r.target),
            headers=tuple((k, fix(v)) for k, v in r.headers),
            body=fix(r.body),
        )
        for r in mix
    )
