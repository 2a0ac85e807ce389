"""servers/c builds warning-free with -Werror from scratch, and its table-driven C parser test
(`make -C servers/c test`) passes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import setup_kit

from .conftest import run_make

C_DIR = Path(__file__).resolve().parents[2] / "servers" / "c"


def _make(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return run_make(list(args), timeout)


@pytest.fixture(autouse=True)
def _need_gcc():
    setup_kit.require_tools("gcc", package="gcc")
    setup_kit.require_tools("make", package="make")


def test_c_werror_build_from_scratch(tmp_path):
    # a private build directory forces every file to compile with -Wall -Wextra -Werror
    proc = _make(f"BUILD={tmp_path}", "all")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "warning" not in (proc.stdout + proc.stderr).lower()
    binary = tmp_path / "perfctl-server"
    assert binary.is_file()
    for flag in ("-Wall", "-Wextra", "-Werror", "-std=gnu11", "-pthread", "-O2"):
        assert flag in proc.stdout, f"{flag} missing from the compile lines"


def test_c_parser_table_test():
    proc = _make("test")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "passed" in proc.stdout


def test_c_sources_layout():
    # one .c/.h pair per concern; a checked-in .clang-format
    assert (C_DIR / ".clang-format").is_file()
    for mod in (
        "http_parse",
        "url",
        "conn",
        "handler",
        "work",
        "search",
        "registry",
        "stats",
        "models",
    ):
        assert (C_DIR / f"{mod}.c").is_file() and (C_DIR / f"{mod}.h").is_file(), mod


def test_c_sources_formatted():
    setup_kit.require(
        bool(shutil.which("clang-format") or shutil.which("clang-format-14")),
        "clang-format",
        "clang-format",
    )
    proc = _make("-s", "format-check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
