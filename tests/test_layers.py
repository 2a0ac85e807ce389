"""The layout's import rules, checked by reading every module's imports with `ast`.

    cli        -> anything
    api        -> anything but cli (the Python API, `import perfctl`; cli calls it)
    history    -> results, experiment, measure, numbers, errors, loadgen.floats (the performance
                  history)
    run        -> proc, measure, experiment, netem, results, loadgen (spec, stats, contract,
                  digest, hdr, records, tls), errors
    cluster    -> run, proc, measure, experiment, netem, results, loadgen (spec, stats, parallel,
                  digest, hdr, records), errors
    search     -> run, proc, measure, experiment, results, models, loadgen (stats, digest, hdr,
                  floats), errors
    netem      -> proc, experiment, errors
    measure    -> proc, results (schema: the columns it fills), numbers, errors, loadgen.floats
    proc       -> errors
    analysis   -> history, results, models, loadgen (digest, hdr, records), numbers, errors,
                  proc.process (its forked figure drawers die with perfctl: draw_pool.py)
    results    -> errors
    experiment -> loadgen.spec, errors
    numbers, errors -> nothing
    loadgen, models -> nothing of orchestrator; models -> loadgen.floats (float_or_nan, which
                  imports nothing) and nothing else of loadgen

No import cycles between modules, counting imports inside functions (not those under
`if TYPE_CHECKING:`, which never run); an import inside a function carries its reason in a
comment on the same line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("orchestrator", "loadgen", "models")

# layer -> the module prefixes it may import (besides itself and third-party modules)
ALLOWED = {
    "orchestrator.cli": ("orchestrator", "loadgen", "models"),
    "orchestrator.api": (
        "orchestrator.api",
        "orchestrator.run",
        "orchestrator.cluster",
        "orchestrator.proc",
        "orchestrator.measure",
        "orchestrator.experiment",
        "orchestrator.netem",
        "orchestrator.results",
        "orchestrator.analysis",
        "orchestrator.search",
        "orchestrator.history",
        "orchestrator.numbers",
        "orchestrator.errors",
        "loadgen",
        "models",
    ),
    "orchestrator.history": (
        "orchestrator.history",
        "orchestrator.results",
        "orchestrator.experiment",
        "orchestrator.measure",
        "orchestrator.numbers",
        "orchestrator.errors",
        "loadgen.floats",
    ),
    "orchestrator.run": (
        "orchestrator.run",
        "orchestrator.proc",
        "orchestrator.measure",
        "orchestrator.experiment",
        "orchestrator.netem",
        "orchestrator.results",
        "orchestrator.errors",
        "loadgen.spec",
        "loadgen.stats",
        "loadgen.contract",
        "loadgen.digest",
        "loadgen.hdr",
        "loadgen.records",
        "loadgen.tls",
    ),
    "orchestrator.cluster": (
        "orchestrator.cluster",
        "orchestrator.run",
        "orchestrator.proc",
        "orchestrator.measure",
        "orchestrator.experiment",
        "orchestrator.netem",
        "orchestrator.results",
        "orchestrator.errors",
        "loadgen.spec",
        "loadgen.stats",
        "loadgen.parallel",
        "loadgen.digest",
        "loadgen.hdr",
        "loadgen.records",
    ),
    "orchestrator.search": (
        "orchestrator.search",
        "orchestrator.run",
        "orchestrator.proc",
        "orchestrator.measure",
        "orchestrator.experiment",
        "orchestrator.results",
        "orchestrator.errors",
        "models",
        "loadgen.stats",
        "loadgen.digest",
        "loadgen.hdr",
        "loadgen.floats",
    ),
    "orchestrator.netem": (
        "orchestrator.netem",
        "orchestrator.experiment",
        "orchestrator.proc",
        "orchestrator.errors",
    ),
    "orchestrator.measure": (
        "orchestrator.measure",
        "orchestrator.proc",
        "orchestrator.results.schema",
        "orchestrator.numbers",
        "orchestrator.errors",
        "loadgen.floats",  # float_or_nan: a reading that may be missing
    ),
    "orchestrator.proc": ("orchestrator.proc", "orchestrator.errors"),
    "orchestrator.analysis": (
        "orchestrator.analysis",
        "orchestrator.history",
        "orchestrator.results",
        "orchestrator.numbers",
        "orchestrator.errors",
        "orchestrator.proc.process",
        "models",
        "loadgen.digest",
        "loadgen.hdr",
        "loadgen.records",
    ),
    "orchestrator.results": ("orchestrator.results", "orchestrator.errors"),
    "orchestrator.experiment": (
        "orchestrator.experiment",
        "orchestrator.errors",
        "loadgen.spec",
        "loadgen.fields",  # a mix's fields are parsed and checked by the load generator's own code
        "loadgen.replay",  # ... and a replay file's lines
    ),
    "orchestrator.errors": (),
    "orchestrator.numbers": (),
    "orchestrator": ("orchestrator",),  # the package's own __init__ (version only)
    "loadgen": ("loadgen",),
    "models": ("models", "loadgen.floats"),  # float_or_nan, which imports nothing
}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    return {
        module_name(p, root): p
        for pkg in PACKAGES
        for p in sorted((root / pkg).rglob("*.py"))
        if "build" not in p.parts
    }


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, path: Path, known: set[str]) -> list[tuple[str, int, bool, str]]:
    """(imported project module, line, inside a function, the source line) for each import."""
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    inner = {
        id(n) for f in funcs for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))
    }
    hints = {
        id(n)
        for g in ast.walk(tree)
        if isinstance(g, ast.If) and "TYPE_CHECKING" in ast.unparse(g.test)
        for n in ast.walk(g)
    }  # type hints only: never executed
    out = []
    for node in ast.walk(tree):
        if id(node) in hints:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, path.name == "__init__.py", node)
            for a in node.names:  # `from pkg import mod` imports pkg.mod when it is a module
                targets.append(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
        if not targets and isinstance(node, (ast.Import, ast.ImportFrom)):
            targets = ["<external>"]
        for t in targets:
            if t == "<external>" or t.split(".")[0] not in PACKAGES:
                if id(node) in inner:
                    out.append(("<external>", node.lineno, True, lines[node.lineno - 1]))
                continue
            if t.split(".")[0] in PACKAGES:
                while t not in known and "." in t:
                    t = t.rsplit(".", 1)[0]
                out.append((t, node.lineno, id(node) in inner, lines[node.lineno - 1]))
    return out


def layer_of(module: str) -> str:
    best = ""
    for layer in ALLOWED:
        if (module == layer or module.startswith(layer + ".")) and len(layer) > len(best):
            best = layer
    return best


def allowed(importer: str, imported: str) -> bool:
    if imported == "orchestrator" and importer.startswith("orchestrator"):
        return True  # the root package holds only __version__
    return any(imported == p or imported.startswith(p + ".") for p in ALLOWED[layer_of(importer)])


def graph(root: Path = ROOT) -> tuple[dict[str, set[str]], list[str], list[str]]:
    """The module graph, the wrong-way imports and the unexplained function-level imports."""
    mods = project_modules(root)
    known = set(mods)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    wrong, unexplained = [], []
    for m, path in mods.items():
        for t, line, inside, text in imports_of(m, path, known):
            if inside and "#" not in text:
                where = f"{path.relative_to(root)}:{line}"
                unexplained.append(f"{where}: `{text.strip()}` inside a function, no reason given")
            if t == m or t == "<external>":
                continue
            edges[m].add(t)
            where = f"{path.relative_to(root)}:{line}"
            if not allowed(m, t):
                wrong.append(f"{where}: {m} ({layer_of(m)}) imports {t}")
    return edges, wrong, unexplained


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_every_import_flows_the_allowed_way():
    _, wrong, _ = graph()
    assert not wrong, "wrong-way imports:\n" + "\n".join(wrong)


def test_no_import_cycles_even_through_function_level_imports():
    edges, _, _ = graph()
    found = cycles(edges)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_imports_inside_functions_say_why():
    _, _, unexplained = graph()
    assert not unexplained, "\n".join(unexplained)


@pytest.fixture
def tree_copy(tmp_path):
    import shutil

    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("build", "*.c"))
    return tmp_path


def test_a_deliberate_wrong_way_import_is_caught(tree_copy):
    f = tree_copy / "orchestrator" / "analysis" / "views.py"
    f.write_text(f.read_text() + "\nfrom ..run import trial\n")
    _, wrong, _ = graph(tree_copy)
    assert any("orchestrator.analysis.views" in w and "orchestrator.run.trial" in w for w in wrong)


def test_a_deliberate_cycle_through_a_function_import_is_caught(tree_copy):
    f = tree_copy / "orchestrator" / "results" / "schema.py"
    f.write_text(f.read_text() + "\n\ndef _late():\n    from . import read  # test\n")
    edges, _, _ = graph(tree_copy)
    assert ["orchestrator.results.read", "orchestrator.results.schema"] in cycles(edges)


def test_an_unexplained_function_import_is_caught(tree_copy):
    f = tree_copy / "models" / "usl.py"
    f.write_text(f.read_text() + "\n\ndef _late():\n    import math\n    from . import laws\n")
    _, _, unexplained = graph(tree_copy)
    assert any("models/usl.py" in u and "from . import laws" in u for u in unexplained)
