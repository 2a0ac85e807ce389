"""The manual (docs/, MkDocs): it builds in strict mode, a broken link or anchor fails that
build, and its generated parts cover what they are generated from: every key of every model of
orchestrator/experiment/ in the experiment-file reference (each with a description), every
trials.csv column of results/schema.py, and every package of the tree on the layout page."""

import importlib
import inspect
import os
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

import orchestrator.experiment
from orchestrator.experiment import reference
from orchestrator.results import schema

ROOT = Path(__file__).resolve().parent.parent
# Models of orchestrator/experiment/ that no YAML key reaches, and why.
NOT_IN_THE_FILE = {
    "FrozenModel": "the base class: no fields",
    "Plan": "the compiled experiment perfctl runs",
    "Cell": "one expanded cell",
}


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", config, "-d", site],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


@pytest.fixture(scope="module")
def built_site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    p = mkdocs_build(ROOT / "mkdocs.yml", site)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "WARNING" not in p.stderr, p.stderr
    return site


def experiment_models() -> dict[str, type[BaseModel]]:
    """Every pydantic model defined in a module of orchestrator/experiment/."""
    out = {}
    for info in pkgutil.iter_modules(orchestrator.experiment.__path__):
        mod = importlib.import_module(f"orchestrator.experiment.{info.name}")
        for obj in vars(mod).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseModel)
                and obj.__module__ == mod.__name__
            ):
                out[obj.__name__] = obj
    return out


def keys_missing_from(markdown: str, sections) -> list[str]:
    """`path.key` of every field whose key is not a row of its section's table in markdown."""
    missing = []
    for s in sections:
        heading = f"{{#{s.anchor}}}"
        assert heading in markdown, f"no section {s.anchor} in the reference"
        body = markdown.split(heading, 1)[1].split("\n### ", 1)[0]
        rows = {m for m in re.findall(r"^\| \[?`([^`]+)`", body, re.M)}
        skipped = {name for name, _ in s.not_keys}
        for name, field in s.model.model_fields.items():
            if name not in skipped and reference.key_of(name, field) not in rows:
                missing.append(f"{s.path or '(top)'}.{reference.key_of(name, field)}")
    return missing


def test_the_manual_builds_in_strict_mode_with_its_generated_parts(built_site):
    page = (built_site / "experiment-file" / "index.html").read_text()
    assert 'id="ref-load-ramp"' in page and "max_clock_uncertainty" in page
    assert "perfctl:" not in page, "a directive was left unexpanded"
    results = (built_site / "results" / "index.html").read_text()
    for column in schema.IDENTITY_COLUMNS + schema.MEASUREMENT_COLUMNS + schema.SELF_CHECK_COLUMNS:
        assert f"<code>{column}</code>" in results, column
    drivers = (built_site / "drivers" / "index.html").read_text()
    assert "What it writes into OUT" in drivers  # loadgen/DRIVER.md, included


@pytest.mark.parametrize(
    "broken",
    ["[gone](no-such-page.md)", "[gone](load.md#no-such-anchor)"],
    ids=["page", "anchor"],
)
def test_a_broken_link_fails_the_strict_build(broken, tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs, ignore=shutil.ignore_patterns("hooks"))
    (docs / "index.md").write_text((docs / "index.md").read_text() + f"\n{broken}\n")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config["docs_dir"] = str(docs)
    config["hooks"] = [str(ROOT / "docs" / "hooks" / "perfctl_docs.py")]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    p = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert p.returncode != 0, p.stdout + p.stderr
    assert broken.split("(")[1].rstrip(")") in p.stderr, p.stderr


def test_the_reference_has_a_section_for_every_model_of_the_experiment_file():
    covered = {s.model.__name__ for s in reference.SECTIONS}
    models = set(experiment_models())
    assert models - covered - set(NOT_IN_THE_FILE) == set(), (
        "models with no section in reference.SECTIONS (add one, or say in NOT_IN_THE_FILE "
        "why no YAML key reaches them)"
    )
    assert covered <= models


def test_the_reference_names_every_key_of_every_model():
    assert keys_missing_from(reference.reference_markdown(), reference.SECTIONS) == []


def test_a_key_missing_from_the_reference_is_caught():
    text = reference.reference_markdown()
    broken = re.sub(r"^\| `max_clock_uncertainty` .*\n", "", text, flags=re.M)
    assert broken != text
    assert keys_missing_from(broken, reference.SECTIONS) == ["cluster.max_clock_uncertainty"]


def test_every_key_of_the_experiment_file_has_a_description():
    missing = [
        f"{s.model.__name__}.{name}"
        for s in reference.SECTIONS
        for name, field in s.model.model_fields.items()
        if not (field.description or "").strip() and name not in dict(s.not_keys)
    ]
    assert missing == [], "add Field(description=...) to: " + ", ".join(missing)


def test_the_top_level_keys_link_to_their_sections():
    text = reference.section_markdown(reference.SECTIONS[0])
    for key in ("load", "network", "placement", "cluster", "validity"):
        assert f"[`{key}`](#ref-{key})" in text


def test_the_layout_page_names_every_package_of_the_tree():
    page = (ROOT / "docs" / "layout.md").read_text()
    packages = [
        f"orchestrator/{p.name}/"
        for p in sorted((ROOT / "orchestrator").iterdir())
        if p.is_dir() and any(p.glob("*.py"))
    ]
    missing = [p for p in [*packages, "loadgen/", "models/", "servers/"] if f"`{p}`" not in page]
    assert missing == [], f"docs/layout.md says nothing of {missing}"


def test_the_readmes_link_only_to_files_that_exist():
    """README.md and experiments/README.md are read on the forge, outside the strict build."""
    broken = []
    for doc in (ROOT / "README.md", ROOT / "experiments" / "README.md"):
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            path = target.split("#", 1)[0]
            if path and not re.match(r"^[a-z]+:", path) and not (doc.parent / path).exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert broken == []
