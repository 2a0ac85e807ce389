"""MkDocs hook: the pages that are written from the code, so the manual cannot drift from it.

A page asks for generated text with one HTML comment on a line of its own:

    <!-- perfctl:experiment-reference -->      every key of the experiment file, from the
                                               pydantic models (orchestrator/experiment/reference.py)
    <!-- perfctl:trials-columns -->            trials.csv's columns, grouped and annotated as
                                               orchestrator/results/schema.py declares them
    <!-- perfctl:layer-rules -->               the import rules tests/test_layers.py enforces
    <!-- perfctl:module-doc models/queues.py --> a module's docstring, as written
    <!-- perfctl:include loadgen/DRIVER.md -->  a file of the repository (a contract that lives
                                               beside its code), headings one level down and
                                               links into docs/ made relative to the page

An unknown `perfctl:` directive or a missing file fails the build.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import os
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

_DIRECTIVE = re.compile(r"^<!-- perfctl:([a-z-]+)(?: (\S+))? -->$", re.M)
_LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?(\))")
_FENCE = re.compile(r"^(```|~~~)")


def on_page_markdown(markdown: str, page, config, files) -> str:
    page_dir = (DOCS / page.file.src_path).parent

    def expand(m: re.Match) -> str:
        kind, arg = m.group(1), m.group(2)
        if kind == "experiment-reference":
            return _this_checkouts_reference()
        if kind == "trials-columns":
            return trials_columns_markdown(ROOT / "orchestrator" / "results" / "schema.py")
        if kind == "layer-rules":
            return layer_rules_markdown(ROOT / "tests" / "test_layers.py")
        if kind == "module-doc":
            return module_doc_markdown(_repo_file(arg, page))
        if kind == "include":
            return include_markdown(_repo_file(arg, page), page_dir)
        raise ValueError(f"{page.file.src_path}: unknown directive perfctl:{kind}")

    return _DIRECTIVE.sub(expand, markdown)


def _this_checkouts_reference() -> str:
    """The reference from this checkout's models, not from the copy an editable install of
    another checkout points at (MkDocs restores sys.path after loading a hook, so the path is
    set here, at build time)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from orchestrator.experiment import reference  # here: needs ROOT on sys.path first

    if Path(reference.__file__).resolve().parents[2] != ROOT:
        raise RuntimeError(f"imported {reference.__file__}, not this checkout's ({ROOT})")
    return reference.reference_markdown()


def _repo_file(arg: str | None, page) -> Path:
    path = ROOT / (arg or "")
    if not arg or not path.is_file():
        raise FileNotFoundError(f"{page.file.src_path}: perfctl directive names no file: {arg!r}")
    return path


def include_markdown(path: Path, page_dir: Path) -> str:
    """The file's text with every heading one level down (its `#` title becomes the page's
    `##`) and relative links re-aimed from the file's folder to the including page's."""
    out, fenced = [], False
    for line in path.read_text().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            if line.startswith("#"):
                line = "#" + line
            line = _LINK.sub(lambda m: _relink(m, path.parent, page_dir), line)
        out.append(line)
    return "\n".join(out) + "\n"


def _relink(m: re.Match, src_dir: Path, page_dir: Path) -> str:
    target = m.group(2)
    if re.match(r"^[a-z]+:", target) or target.startswith("/"):
        return m.group(0)
    new = os.path.relpath((src_dir / target).resolve(), page_dir)
    return f"{m.group(1)}{new}{m.group(3) or ''}{m.group(4)}"


def module_doc_markdown(path: Path) -> str:
    """A module's docstring as a text block, with the file it comes from."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    rel = path.relative_to(ROOT)
    return f"From the docstring of `{rel}`:\n\n```text\n{doc}\n```\n"


def trials_columns_markdown(schema_py: Path) -> str:
    """A table per column group of schema.py (IDENTITY_COLUMNS, ...): each column with the
    comment written beside it, and the comment lines above a run of columns as a note."""
    groups = {
        "IDENTITY_COLUMNS": "Identity",
        "CONFIGURATION_COLUMNS": "Configuration (the same in every trial of a cell; the matrix "
        "axes come first)",
        "MEASUREMENT_COLUMNS": "Measurement",
        "NOISE_COLUMNS": "Host noise (self-checks too: among the last columns of each row)",
        "SELF_CHECK_COLUMNS": "Self-check (last in each row; the host noise columns above "
        "stand after release_spread_ms_max)",
    }
    rows: dict[str, list[tuple[str, str]]] = {g: [] for g in groups}
    current, note = None, ""
    last_string_line = -1
    for tok in tokenize.generate_tokens(io.StringIO(schema_py.read_text()).readline):
        if tok.type == tokenize.NAME and tok.string in groups and tok.start[1] == 0:
            current, note = tok.string, ""
        elif current and tok.type == tokenize.OP and tok.string == "]":
            current = None
        elif current and tok.type == tokenize.STRING:
            rows[current].append((ast.literal_eval(tok.string), note))
            note, last_string_line = "", tok.start[0]
        elif current and tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("# ").strip()
            if tok.start[0] == last_string_line:  # beside a column: its own comment
                name, old = rows[current][-1]
                rows[current][-1] = (name, f"{old} {text}".strip() if old else text)
            else:  # a line of its own: a note on the columns that follow
                note = f"{note} {text}".strip()
    if not all(rows.values()):
        raise ValueError(f"{schema_py}: a column group is empty or was not found: {rows}")
    out = []
    for group, title in groups.items():
        out += [f"**{title}**", "", "| column | notes |", "|---|---|"]
        out += [f"| `{name}` | {_escape_pipes(text)} |" for name, text in rows[group]]
        out.append("")
    return "\n".join(out)


def _escape_pipes(text: str) -> str:
    return text.replace("|", "\\|")


def layer_rules_markdown(test_layers_py: Path) -> str:
    """The ALLOWED table of tests/test_layers.py: each layer and what it may import."""
    spec = importlib.util.spec_from_file_location("_perfctl_test_layers", test_layers_py)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = ["| layer | may import (besides itself and third-party packages) |", "|---|---|"]
    for layer, allowed in mod.ALLOWED.items():
        others = [a for a in allowed if a != layer]
        text = ", ".join(f"`{a}`" for a in others) if others else "nothing of the project"
        out.append(f"| `{layer}` | {text} |")
    return "\n".join(out) + "\n"
