"""The experiment file's reference, written from the models that validate it.

docs/experiment-file.md is built with this page inside it (the site's hook calls
`reference_markdown()`), so the manual cannot drift from what perfctl accepts: every key of
every model a YAML key reaches, with its type, its default and its Field description. Types
come from the annotations and from the unit parsers a field's validators call (a `float` read by
`units.duration_ms` is a duration in the file, `10ms`), defaults are written in the file's units.
tests/test_docs.py checks that every model of this package and every one of its fields is here.
"""

from __future__ import annotations

import inspect
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel, BeforeValidator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from .cluster import Cluster, LocalCluster, Tls
from .history import History
from .load import DriverCommand, Load, Ramp, Slo, Workload
from .network import GilbertElliott, Network, NetworkStep
from .placement import LoadgenPlace, Placement, ServerPlace
from .plan import Experiment
from .search import Search, SearchSlo
from .servers import BundledServer, CommandServer, ReadyCheck
from .services import PostgresData, PostgresService
from .validity import Validity
from .workload import Request

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Section:
    """One table of the reference: the YAML path its keys sit under, and the model reading them.
    `not_keys` names the model's fields that are no YAML key, each with what the file writes
    instead."""

    path: str
    model: type[BaseModel]
    title: str = ""
    not_keys: tuple[tuple[str, str], ...] = ()

    @property
    def anchor(self) -> str:
        slug = self.path.replace(".NAME", "").replace("[]", "") or "top"
        suffix = f"-{self.title.split()[-1]}" if self.title else ""
        return "ref-" + slug.replace(".", "-").replace("_", "-") + suffix


SECTIONS: tuple[Section, ...] = (
    Section("", Experiment, "top-level keys"),
    Section("servers.NAME", BundledServer, "a bundled server"),
    Section("servers.NAME", CommandServer, "any command"),
    Section("servers.NAME.ready", ReadyCheck),
    Section("services.NAME", PostgresService, "kind postgresql"),
    Section("services.NAME.data", PostgresData),
    Section("workload", Workload),
    Section("workload.requests[]", Request, "one request of a mix"),
    Section("load", Load),
    Section("load.driver", DriverCommand, "a driver program"),
    Section("load.ramp", Ramp),
    Section("load.ramp.slo", Slo),
    Section("network", Network),
    Section("network.loss_burst", GilbertElliott),
    Section(
        "network.schedule[]",
        NetworkStep,
        "one step",
        not_keys=(
            (
                "state",
                "the step's other keys: any `network` key but backend, profile and "
                "schedule, replacing the step before's",
            ),
        ),
    ),
    Section("validity", Validity),
    Section("placement", Placement),
    Section("placement.server", ServerPlace),
    Section("placement.loadgen", LoadgenPlace),
    Section("search", Search),
    Section(
        "search.slo",
        SearchSlo,
        not_keys=(
            ("stat", "the key itself: `mean`, `p50`, `p95`, `p99`, `p99.9`, ... (exactly one)"),
            ("latency_ms", "that key's value, a duration with its unit: `p99: 30ms`"),
        ),
    ),
    Section("cluster", Cluster),
    Section("cluster.local", LocalCluster),
    Section("cluster.tls", Tls),
    Section("history", History),
)

# What a value looks like in the file, by the unit parser (orchestrator/experiment/units.py)
# that a field's before-validator calls.
# The forms of each are under "Units" in docs/experiment-file.md.
_PARSED_AS = {
    "duration_s": "duration",
    "duration_ms": "duration",
    "bandwidth_bps": "bandwidth",
    "fraction": "fraction",
}


def key_of(name: str, field: FieldInfo) -> str:
    """The key the file writes for a field: its alias (`duration` for `duration_s`)."""
    return field.alias or name


def _parsers(model: type[BaseModel], name: str, field: FieldInfo) -> set[str]:
    """Names of the unit parsers the field's before-validators call."""
    funcs = [m.func for m in field.metadata if isinstance(m, BeforeValidator)]
    for dec in model.__pydantic_decorators__.field_validators.values():
        if dec.info.mode == "before" and name in dec.info.fields:
            funcs.append(getattr(dec.func, "__func__", dec.func))
    called: set[str] = set()
    for f in funcs:
        code = getattr(f, "__code__", None)
        if code is not None:
            called |= set(code.co_names) & set(_PARSED_AS)
    return called


def _anchor_of(model: type) -> str | None:
    for s in SECTIONS:
        if s.model is model:
            return s.anchor
    return None


def _type_text(tp: Any) -> str:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is type(None):
        return ""
    if tp is Any:
        return "any"
    if origin is Literal:
        return " \\| ".join(f"`{a}`" if a != "" else '`""`' for a in args)
    if origin in (typing.Union, types.UnionType):
        if set(args) == {str, int, float, bool}:
            return "scalar"
        parts = [_type_text(a) for a in args if a is not type(None)]
        return " or ".join(p for p in parts if p)
    if origin is list:
        return f"list of {_type_text(args[0])}"
    if origin is dict:
        return f"mapping of {_type_text(args[0])} to {_type_text(args[1])}"
    if inspect.isclass(tp) and issubclass(tp, BaseModel):
        anchor = _anchor_of(tp)
        return f"mapping ([below](#{anchor}))" if anchor else "mapping"
    if origin is typing.Annotated:
        return _type_text(args[0])
    return {str: "string", int: "integer", float: "number", bool: "boolean"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def _bounds(field: FieldInfo) -> str:
    out = []
    for m in field.metadata:
        for cls, attr, sign in (
            (annotated_types.Ge, "ge", ">="),
            (annotated_types.Gt, "gt", ">"),
            (annotated_types.Le, "le", "<="),
            (annotated_types.Lt, "lt", "<"),
        ):
            if isinstance(m, cls):
                bound = getattr(m, attr)
                out.append(f"{sign} {bound:,}" if isinstance(bound, int) else f"{sign} {bound:g}")
        if isinstance(m, annotated_types.MinLen):
            out.append(f"at least {m.min_length}")
        if isinstance(m, annotated_types.MaxLen):
            out.append(f"at most {m.max_length}")
    return ", ".join(out)


def type_text(model: type[BaseModel], name: str, field: FieldInfo) -> str:
    """What the file may write for a field: its type (a unit's forms when a unit parser reads
    it) and its bounds."""
    key = key_of(name, field)
    parsed = _parsers(model, name, field)
    if key.endswith("_ms") and "duration_ms" in parsed:
        text = "milliseconds, or a duration"
    elif parsed:
        text = _PARSED_AS[sorted(parsed)[0]]
        if typing.get_origin(field.annotation) in (typing.Union, types.UnionType):
            others = [
                _type_text(a)
                for a in typing.get_args(field.annotation)
                if a not in (float, type(None))
            ]
            text = " or ".join([text, *[o for o in others if o]])
    else:
        text = _type_text(field.annotation)
    bounds = _bounds(field)
    return f"{text}; {bounds}" if bounds else text


def _duration_text(seconds: float) -> str:
    if seconds and seconds < 1:
        ms = seconds * 1e3
        return f"{ms:g}ms" if ms >= 1 else f"{ms * 1e3:g}us"
    return f"{seconds:g}s"


def default_text(model: type[BaseModel], name: str, field: FieldInfo) -> str:
    """The default as the file would write it; `required` when there is none."""
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "its defaults"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    parsed = _parsers(model, name, field)
    if isinstance(value, float) and parsed & {"duration_s", "duration_ms"}:
        if key_of(name, field).endswith("_ms"):
            return f"`{value:g}`"
        return f"`{_duration_text(value / 1e3 if name.endswith('_ms') else value)}`"
    if isinstance(value, float) and "fraction" in parsed:
        return f"`{value * 100:g}%`"
    if value == "":
        return '`""`'
    if isinstance(value, (dict, list)):
        return f"`{value!r}`".replace("'", "")
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") if "\\|" not in text else text


def section_markdown(section: Section) -> str:
    """One section: a heading (with a stable anchor), where its model lives, and its table."""
    model = section.model
    title = f"`{section.path}`" if section.path else "Top-level keys"
    if section.path and section.title:
        title += f" ({section.title})"
    src = Path(inspect.getsourcefile(model)).resolve().relative_to(REPO_ROOT)
    doc = (inspect.getdoc(model) or "").split("\n\n")[0].replace("\n", " ")
    if model.__doc__ is None or doc == (inspect.getdoc(BaseModel) or "").split("\n\n")[0]:
        doc = ""
    lines = [f"### {title} {{#{section.anchor}}}", ""]
    lines.append(f"Model `{model.__name__}` in `{src}`." + (f" {doc}" if doc else ""))
    lines += ["", "| key | type | default | description |", "|---|---|---|---|"]
    skipped = dict(section.not_keys)
    for name, field in model.model_fields.items():
        if name in skipped:
            continue
        key = key_of(name, field)
        sub = next(
            (s for s in SECTIONS if s.path and s.path.split(".")[0] == key and not section.path),
            None,
        )
        key_cell = f"[`{key}`](#{sub.anchor})" if sub else f"`{key}`"
        lines.append(
            "| "
            + " | ".join(
                [
                    key_cell,
                    _cell(type_text(model, name, field)),
                    _cell(default_text(model, name, field)),
                    _cell(field.description or ""),
                ]
            )
            + " |"
        )
    for name, text in section.not_keys:
        lines.append(f"| (other keys) | | | {_cell(text)} (field `{name}`) |")
    return "\n".join(lines) + "\n"


def reference_markdown() -> str:
    """Every section of the reference, in the file's order."""
    return "\n".join(section_markdown(s) for s in SECTIONS)
