"""Imports inside functions stay few: at most MAX_FUNCTION_IMPORTS in perfctl's own code outside
orchestrator/cli/ and orchestrator/api/ (where commands and the Python API load what they need
on use, by design). Each that remains is lazy for a reason its comment gives (test_layers.py
asks for the comment): a heavy package kept off a start-up path (scipy.stats, matplotlib,
numpy for `perfctl doctor`, the database drivers, cryptography, uvloop), or a package's
names loaded on first use. Where one need has several call sites, one accessor loads it.

Counted with `ast` over orchestrator/, loadgen/, models/ and servers/ (benchmarks/ are
standalone scripts, not counted); an import under `if TYPE_CHECKING:` never runs and is not
counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCOPE = ("orchestrator", "loadgen", "models", "servers")
LAZY_BY_DESIGN = ("orchestrator/cli/", "orchestrator/api/")
MAX_FUNCTION_IMPORTS = 15


def function_imports(path: Path, root: Path = ROOT) -> list[str]:
    """`file:line: statement` for each import statement inside a function of path."""
    tree = ast.parse(path.read_text())
    hints = {
        id(n)
        for g in ast.walk(tree)
        if isinstance(g, ast.If) and "TYPE_CHECKING" in ast.unparse(g.test)
        for n in ast.walk(g)
    }
    found = {
        n
        for f in ast.walk(tree)
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        for n in ast.walk(f)
        if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in hints
    }
    rel = path.relative_to(root).as_posix()
    return [f"{rel}:{n.lineno}: {ast.unparse(n)}" for n in sorted(found, key=lambda n: n.lineno)]


def counted_files(root: Path = ROOT) -> list[Path]:
    return [
        p
        for top in SCOPE
        for p in sorted((root / top).rglob("*.py"))
        if "build" not in p.relative_to(root).parts
        and not p.relative_to(root).as_posix().startswith(LAZY_BY_DESIGN)
    ]


def all_function_imports(root: Path = ROOT) -> list[str]:
    return [line for p in counted_files(root) for line in function_imports(p, root)]


def test_few_imports_inside_functions_outside_cli_and_api():
    found = all_function_imports()
    assert len(found) <= MAX_FUNCTION_IMPORTS, (
        f"{len(found)} imports inside functions outside orchestrator/cli/ and orchestrator/api/ "
        f"(at most {MAX_FUNCTION_IMPORTS}): move to the top of the module those with no reason "
        "to be lazy, and load one lazy need through one accessor\n" + "\n".join(found)
    )


def test_the_count_sees_function_imports_and_skips_type_checking(tmp_path):
    f = tmp_path / "models" / "m.py"
    f.parent.mkdir()
    f.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import numpy\n"
        "import math\n\n"
        "def a():\n    import json\n    def b():\n        from os import path\n\n"
        "class C:\n    def m(self):\n        import re\n"
        "        if TYPE_CHECKING:\n            import pandas\n"
    )
    cli = tmp_path / "orchestrator" / "cli" / "x.py"
    cli.parent.mkdir(parents=True)
    cli.write_text("def f():\n    import json\n")
    found = all_function_imports(tmp_path)
    assert [line.split(": ", 1)[1] for line in found] == [
        "import json",
        "from os import path",
        "import re",
    ]
