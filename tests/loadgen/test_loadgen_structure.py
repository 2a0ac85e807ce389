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
    return (isinstance(node, ast.Attribute) and node.attr == "mode") or (
        isinstance(node, ast.Name) and node.id == "mode"
    )


def mode_switches(source: str) -> list[int]:
    """Lines that branch on a mode's name: `spec.mode == ...`, `mode in (...)`,
    `match spec.mode:`, `{...}[spec.mode]`."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(
            map(_is_mode_name, [node.left, *node.comparators])
        ):
            lines.append(node.lineno)
        elif isinstance(node, ast.Match) and _is_mode_name(node.subject):
            lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and _is_mode_name(node.slice):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_mode_switch_detector_sees_each_form_of_switch():
    for source in (
        'if spec.mode == "burst": pass',
        'x = self.spec.mode != "open"',
        'ok = mode in ("closed", "open")',
        "f = table[spec.mode]",
        'match spec.mode:\n    case "open": pass',
    ):
        assert mode_switches(source), source
    assert not mode_switches("self.mode.start(self)\nmode = mode_for(spec)")


@pytest.mark.parametrize("name", ["worker.py", "phase.py", "parallel.py"])
def test_no_switch_on_the_mode_name_outside_the_mode_objects(name):
    found = mode_switches((PACKAGE / name).read_text())
    assert not found, (
        f"loadgen/{name} branches on a mode name at lines {found}: "
        "give the mode object a method instead (loadgen/modes/base.py)"
    )


# Import cycles and unexplained function-level imports: tests/test_layers.py, for every package.


def test_modes_use_only_the_workers_public_names():
    private = []
    modes = sorted((PACKAGE / "modes").glob("*.py"))
    assert len(modes) > 1, f"no mode modules under {PACKAGE / 'modes'}"  # __init__ and modes
    for path in modes:
        for node in ast.walk(_tree(path)):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and isinstance(node.value, ast.Name)
                and node.value.id == "worker"
            ):
                private.append(f"modes/{path.name}:{node.lineno} worker.{node.attr}")
    assert not private, "modes reach into the Worker's private state: " + ", ".join(private)


def test_generate_to_dir_is_exported_by_the_package():
    assert loadgen.generate_to_dir is loadgen.parallel.generate_to_dir
    assert "generate_to_dir" in loadgen.__all__
