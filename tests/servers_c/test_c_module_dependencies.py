"""servers/c modules depend on each other one way only (issue #12): the dispatcher (models.c)
calls the concurrency models, the models call the shared helpers (serve.c, linger.c, ...), and
nothing below calls back up.

Read from the `#include "..."` lines: a file depends on the module(s) implementing every
project header it includes, directly or through other headers. A header is implemented by the
.c file of the same name (serve.h: serve.c) or, when there is none, by the files named after
it with a suffix (model.h: model_single.c, model_thread.c, ...); a header with neither is
header-only (clock.h) and adds no dependency. A file that implements a header it includes does
not depend on itself or its siblings through it.
"""

from __future__ import annotations

import re
from pathlib import Path

C_DIR = Path(__file__).resolve().parents[2] / "servers" / "c"
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
COMMENT_RE = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
DISPATCHER_HEADER = "models.h"
DISPATCHER_IDENT_RE = re.compile(r"\b(?:md|MD)_\w+")


def _includes(path: Path) -> list[str]:
    return INCLUDE_RE.findall(path.read_text())


def _owners(header: str, sources: dict[str, Path]) -> set[str]:
    stem = header[:-2]
    if f"{stem}.c" in sources:
        return {f"{stem}.c"}
    return {name for name in sources if name.startswith(f"{stem}_")}


def _headers_reached(path: Path, c_dir: Path) -> set[str]:
    """Project headers a file includes, directly or through other project headers."""
    seen: set[str] = set()
    todo = [h for h in _includes(path) if (c_dir / h).is_file()]
    while todo:
        h = todo.pop()
        if h in seen:
            continue
        seen.add(h)
        todo.extend(x for x in _includes(c_dir / h) if (c_dir / x).is_file())
    return seen


def include_graph(c_dir: Path) -> dict[str, set[str]]:
    """.c file -> the .c files it depends on."""
    sources = {p.name: p for p in sorted(c_dir.glob("*.c"))}
    graph: dict[str, set[str]] = {}
    for name, path in sources.items():
        deps: set[str] = set()
        for h in _headers_reached(path, c_dir):
            owners = _owners(h, sources)
            if name not in owners:
                deps |= owners
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One dependency cycle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1 on the DFS path, 2 done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return path[path.index(m) :] + [m]
            if m not in state and (cycle := visit(m)):
                return cycle
        path.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (cycle := visit(n)):
            return cycle
    return None


def models_reaching_dispatcher(c_dir: Path) -> list[str]:
    """model_*.c files that include the dispatcher's header or name its md_/MD_ identifiers."""
    bad = []
    for p in sorted(c_dir.glob("model_*.c")):
        code = COMMENT_RE.sub("", p.read_text())
        if DISPATCHER_HEADER in _headers_reached(p, c_dir) or DISPATCHER_IDENT_RE.search(code):
            bad.append(p.name)
    return bad


def test_c_module_dependencies_are_one_way():
    models = sorted(p.name for p in C_DIR.glob("model_*.c"))
    assert models, "no model_*.c files found"
    assert models_reaching_dispatcher(C_DIR) == []
    graph = include_graph(C_DIR)
    cycle = find_cycle(graph)
    assert cycle is None, "include cycle between servers/c modules: " + " -> ".join(cycle)
    # the intended direction is what the graph sees: dispatcher -> models -> shared helpers
    assert set(models) <= graph["models.c"]
    for m in models:
        assert "serve.c" in graph[m], m
    assert "linger.c" in graph["serve.c"]


def _write(d: Path, files: dict[str, str]) -> None:
    for name, includes in files.items():
        (d / name).write_text("".join(f'#include "{h}"\n' for h in includes.split()))


def test_c_module_dependency_check_catches_the_issue_12_layout(tmp_path):
    # the layout before the split: one models.h for dispatcher and helpers, used both ways
    _write(
        tmp_path,
        {
            "models.h": "",
            "models.c": "models.h clock.h linger.h",
            "clock.h": "",
            "linger.h": "",
            "linger.c": "linger.h clock.h models.h",
            "model_single.c": "models.h",
            "model_epoll.c": "clock.h models.h",
        },
    )
    assert models_reaching_dispatcher(tmp_path) == ["model_epoll.c", "model_single.c"]
    assert find_cycle(include_graph(tmp_path)) == ["linger.c", "models.c", "linger.c"]


def test_c_module_dependency_check_follows_headers_and_shared_interfaces(tmp_path):
    # a model reaching the dispatcher through another header; model.h shared by its implementers
    _write(
        tmp_path,
        {
            "models.h": "",
            "models.c": "models.h model.h serve.h",
            "model.h": "",
            "serve.h": "",
            "serve.c": "serve.h",
            "model_a.c": "model.h serve.h",
            "model_b.c": "model.h helper.h",
            "helper.h": "models.h",
        },
    )
    assert models_reaching_dispatcher(tmp_path) == ["model_b.c"]
    graph = include_graph(tmp_path)
    assert graph["model_a.c"] == {"serve.c"}
    assert graph["model_b.c"] == {"models.c"}
    assert graph["models.c"] == {"model_a.c", "model_b.c", "serve.c"}
    assert find_cycle(graph) == ["model_b.c", "models.c", "model_b.c"]
    (tmp_path / "model_a.c").write_text('#include "model.h"\nint f(void) { return md_x(); }\n')
    assert models_reaching_dispatcher(tmp_path) == ["model_a.c", "model_b.c"]
