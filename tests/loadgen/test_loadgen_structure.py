"""How loadgen/ is put together: no mode switches outside the mode objects, no import cycles,
no unexplained imports inside functions, modes kept to the Worker's public names."""
import ast
from pathlib import Path

import pytest

import loadgen
import loadgen.parallel

PACKAGE = Path(loadgen.__file__).resolve().parent


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _is_mode_name(node: ast.AST) -> bool:
    """`x.mode` or a bare `mode`: where a mode's name would be read."""
    return ((isinstance(node, ast.Attribute) and node.attr == "mode")
            or (isinstance(node, ast.Name) and node.id == "mode"))


def mode_switches(source: str) -> list[int]:
    """Lines that branch on a mode's name: `spec.mode == ...`, `mode in (...)`,
    `match spec.mode:`, `{...}[spec.mode]`."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(map(_is_mode_name,
                                                     [node.left, *node.comparators])):
            lines.append(node.lineno)
        elif isinstance(node, ast.Match) and _is_mode_name(node.subject):
            lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and _is_mode_name(node.slice):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_mode_switch_detector_sees_each_form_of_switch():
    for source in ('if spec.mode == "burst": pass', 'x = self.spec.mode != "open"',
                   'ok = mode in ("closed", "open")', 'f = table[spec.mode]',
                   'match spec.mode:\n    case "open": pass'):
        assert mode_switches(source), source
    assert not mode_switches("self.mode.start(self)\nmode = mode_for(spec)")


@pytest.mark.parametrize("name", ["worker.py", "parallel.py"])
def test_no_switch_on_the_mode_name_outside_the_mode_objects(name):
    found = mode_switches((PACKAGE / name).read_text())
    assert not found, (f"loadgen/{name} branches on a mode name at lines {found}: "
                       "give the mode object a method instead (loadgen/modes/base.py)")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """loadgen modules this one imports, at its top or inside functions (not those only
    named for type checkers, under `if TYPE_CHECKING:`). `from . import x` imports the module
    x, not the package: a package is always initialised before its modules."""
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    tree = _tree(path)
    hints = {id(n) for node in ast.walk(tree)
             if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
             for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in hints:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("loadgen"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for a in node.names:
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
    return {m for m in found if m.startswith("loadgen")}


def test_loadgen_modules_import_each_other_without_a_cycle():
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {m: {d for d in _imports(p, set(modules)) if d in modules and d != m}
             for m, p in modules.items()}
    done, path = set(), []

    def visit(m):
        if m in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(m):] + [m]))
        if m in done:
            return
        path.append(m)
        for d in sorted(graph[m]):
            visit(d)
        path.pop()
        done.add(m)
    for m in sorted(graph):
        visit(m)


def test_every_import_inside_a_function_says_why():
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text().splitlines()
        for fn in ast.walk(_tree(path)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and \
                        "#" not in lines[node.lineno - 1]:
                    unexplained.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not unexplained, ("imports inside functions without a `# reason`: "
                             + ", ".join(unexplained))


def test_modes_use_only_the_workers_public_names():
    private = []
    for path in sorted((PACKAGE / "modes").glob("*.py")):
        for node in ast.walk(_tree(path)):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and isinstance(node.value, ast.Name) and node.value.id == "worker"):
                private.append(f"modes/{path.name}:{node.lineno} worker.{node.attr}")
    assert not private, "modes reach into the Worker's private state: " + ", ".join(private)


def test_generate_to_dir_is_exported_by_the_package():
    assert loadgen.generate_to_dir is loadgen.parallel.generate_to_dir
    assert "generate_to_dir" in loadgen.__all__
