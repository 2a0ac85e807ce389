"""The experiment file as a raw document: reading the YAML, profiles, `--set` overrides,
`{axis}` placeholders, and the one way problems are worded (file, key path, fix).

Nothing here knows what the keys mean; plan.py validates the document into typed models.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..errors import PerfctlError

Scalar = str | int | float | bool
RUNTIME_PLACEHOLDERS = {
    "port",
    "workdir",
    "host",  # filled when the server starts
    "cert",  # (cert and key: an HTTPS server's, servers/tls: true)
    "key",
    "seq",  # by the load generator, per request
    "uuid",  # (loadgen/fields.py: the generated fields; the others hold a colon)
    "spec",
    "out",
}  # in load.driver.cmd, per trial
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def fail(source: str, key: str, problem: str, fix: str) -> PerfctlError:
    where = f"{source}: key `{key}`" if key else source
    return PerfctlError(f"{where}: {problem}. Fix: {fix}")


def deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def apply_override(doc: dict, assignment: str, source: str) -> None:
    """Apply one `--set a.b.c=value` (value parsed as YAML) to the raw document in place."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise fail(
            source, assignment, "--set needs KEY=VALUE", "write it like --set load.duration=5s"
        )
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    parts = key.strip().split(".")
    node = doc
    for p in parts[:-1]:
        if not isinstance(node.get(p, {}), dict):
            raise fail(
                source,
                key,
                f"`{p}` is not a mapping, so it has no sub-keys",
                "set the whole value instead",
            )
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def read_document(path: str | Path) -> dict:
    p = Path(path)
    if not p.is_file():
        raise PerfctlError(
            f"{p}: no such experiment file. Fix: give the path of a YAML file, "
            "e.g. perfctl run experiments.yaml"
        )
    try:
        doc = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise PerfctlError(
            f"{p}: not valid YAML{at}: {getattr(e, 'problem', e)}. Fix: check "
            "indentation and quoting there."
        ) from None
    if not isinstance(doc, dict):
        raise PerfctlError(f"{p}: the file must be a YAML mapping (name:, servers:, load:, ...).")
    return doc


def _loc(loc: tuple) -> str:
    return ".".join(str(x) for x in loc if not str(x).startswith(("function-after", "tagged")))


_URL_PASSWORD = re.compile(r"(://[^:/@\s'\"]*:)[^@\s'\"]*@")


def _masked(text: str) -> str:
    """text with the password of any URL in it (scheme://user:password@host) as ***: an
    error message is printed and may be logged."""
    return _URL_PASSWORD.sub(r"\1***@", text)


def validation_error(source: str, prefix: str, e: ValidationError, cell: str = "") -> PerfctlError:
    err = e.errors()[0]
    key = ".".join(x for x in (prefix, _loc(err["loc"])) if x)
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        fix = "remove it or check its spelling (every key: docs/experiment-file.md)"
        msg = "unknown key"
    elif err["type"] == "missing":
        fix = "add it"
    else:
        fix = f"give a valid value (got {_masked(repr(err.get('input')))})"
    more = f" (and {len(e.errors()) - 1} more problem(s))" if len(e.errors()) > 1 else ""
    where = f" in cell {cell}" if cell else ""
    return fail(source, key, f"{msg}{where}{more}", fix)


def matches(node: Any, pattern: re.Pattern) -> set:
    """Every match of `pattern` (as re.findall gives them) in the string values of a raw
    document node, through all its mappings and lists."""
    if isinstance(node, dict):
        return set().union(*(matches(v, pattern) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(matches(v, pattern) for v in node))
    return set(pattern.findall(node)) if isinstance(node, str) else set()


def placeholders(node: Any) -> set[str]:
    """Every `{name}` in the string values of a raw document node (what substitute() fills)."""
    return matches(node, _PLACEHOLDER)


def substitute(node: Any, values: dict[str, Scalar], source: str, path: str) -> Any:
    if isinstance(node, dict):
        return {
            k: substitute(v, values, source, f"{path}.{k}" if path else str(k))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [substitute(v, values, source, f"{path}[{i}]") for i, v in enumerate(node)]
    if not isinstance(node, str):
        return node
    names = _PLACEHOLDER.findall(node)
    for n in names:
        if n not in values and n not in RUNTIME_PLACEHOLDERS:
            raise fail(
                source,
                path,
                f"placeholder {{{n}}} names no matrix axis",
                f"add `{n}: [...]` under matrix, or use one of: "
                f"{', '.join(sorted(values)) or '(no axes defined)'}",
            )
    whole = _PLACEHOLDER.fullmatch(node)
    if whole and whole.group(1) in values:
        return values[whole.group(1)]
    return _PLACEHOLDER.sub(
        lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0), node
    )
