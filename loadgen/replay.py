"""Replay: requests read from a file, in order or shuffled, looping when the phase outlasts it.

Two formats, told apart by the name's ending:
- `.jsonl`: one JSON object a line: `path` (with or without a query), optional `params`
  (a mapping, the query string), `method` (default GET), `headers` (a mapping), `body` (a
  string, or an object sent as JSON with Content-Type: application/json) and `name` (the
  endpoint it counts under; default: the path without its query);
- anything else: one request target a line (`/search?type=name&re=a`), sent as a GET; blank
  lines and lines starting with `#` are skipped. Its endpoint is the path without its query.

This module owns the format (no numpy: the experiment layer's check, `scan()`, runs in
`perfctl plan`); mix.ReplayFeed sends it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlencode

ORDERS = ("order", "shuffle")
MAX_NAMES = 1000  # endpoints a replay file may name


def is_jsonl(path: str) -> bool:
    return str(path).endswith(".jsonl")


def parse_line(line: bytes, jsonl: bool) -> tuple[str, str, str, list, str]:
    """(name, method, target, headers, body) of one line; ValueError (a sentence) when it is
    malformed."""
    if not jsonl:
        target = line.decode("utf-8", "replace").strip()
        if not target.startswith("/"):
            raise ValueError(f"a request target starts with '/', not {target[:60]!r}")
        return target.partition("?")[0], "GET", target, [], ""
    try:
        d = json.loads(line)
    except ValueError as e:
        raise ValueError(f"not JSON ({e.msg})") from None
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    path = d.get("path", d.get("target"))
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError('needs "path": a string starting with "/"')
    params = d.get("params") or {}
    headers = d.get("headers") or {}
    method = d.get("method", "GET")
    if not isinstance(params, dict) or not isinstance(headers, dict):
        raise ValueError('"params" and "headers" are JSON objects')
    if not isinstance(method, str) or not re.fullmatch(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+", method):
        raise ValueError(f'"method" {method!r} is not an HTTP method')
    body = d.get("body", "")
    hdrs = [(str(k), str(v)) for k, v in headers.items()]
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
        if not any(k.lower() == "content-type" for k, _ in hdrs):
            hdrs.append(("Content-Type", "application/json"))
    elif not isinstance(body, str):
        raise ValueError('"body" is a string or a JSON object')
    target = path + (("&" if "?" in path else "?") + urlencode(params) if params else "")
    name = d.get("name", path.partition("?")[0])
    return str(name), method, target, hdrs, body


def scan(path: str) -> list[str]:
    """The endpoint names of a replay file, in order of first appearance. OSError when it
    cannot be read; ValueError naming the line when a line is malformed, the file has no
    request or more than MAX_NAMES names."""
    jsonl = is_jsonl(path)
    names: dict[str, None] = {}
    count = 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or (not jsonl and line.startswith(b"#")):
                continue
            try:
                names.setdefault(parse_line(line, jsonl)[0])
            except ValueError as e:
                raise ValueError(f"line {number} of {path}: {e}") from None
            count += 1
            if len(names) > MAX_NAMES:
                raise ValueError(
                    f"{path} names more than {MAX_NAMES} endpoints (by line {number}); give "
                    'the lines a "name" (.jsonl) that groups them'
                )
    if count == 0:
        raise ValueError(f"{path} holds no request")
    return list(names)


def plain_request(method, target, headers, body: bytes, host, port, keepalive) -> bytes:
    """A request's bytes, laid out as worker.build_request lays them out."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}:{port}"]
    lines += [f"{k}: {v}" for k, v in headers]
    if body or method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
        if not any(k.lower() == "content-type" for k, _ in headers):
            lines.append("Content-Type: application/x-www-form-urlencoded")
    if not keepalive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def resolve(path: str, base: Path) -> str:
    p = Path(path)
    return str(p if p.is_absolute() else (base / p).resolve())
