"""Fuzzing the experiment loader (orchestrator/experiment/): random YAML documents, random
mutations of every example file (experiments.yaml, experiments/*.yaml) in their parsed tree and
in their text. The only outcomes allowed: a Plan, or PerfctlError with one paragraph naming the
file; never another exception, never a hang (a per-example deadline far above the loader's
milliseconds). In-process for speed, plus a few `perfctl plan` runs for the exit codes.

Budgets (fixed, derandomized): MUTATIONS examples of tree mutations, TEXT_MUTATIONS of text
mutations, RANDOM_DOCS random documents; CLI_RUNS `perfctl plan` runs."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from cli_kit import perfctl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator import experiment
from orchestrator.errors import PerfctlError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [ROOT / "experiments.yaml", *sorted((ROOT / "experiments").glob("*.yaml"))]
MUTATIONS = 150
TEXT_MUTATIONS = 100
RANDOM_DOCS = 100
CLI_RUNS = 3
HANG_S = 20_000  # ms: a hang guard, thousands of times what loading a file takes

FUZZ = settings(
    max_examples=MUTATIONS,
    deadline=HANG_S,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        [
            "{x}",
            "{services.db.dsn}",
            "1ms",
            "-5s",
            "10%",
            "1e400",
            "c",
            "epoll",
            "open",
            "0",
            "{connections}",
            "../../etc",
            "http://x/",
            "2000/s",
            "inf",
            "nan",
            "",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def outcome(path: Path) -> str:
    """'plan' or 'error'; anything else than PerfctlError propagates (and fails the test)."""
    try:
        experiment.load_plan(path)
        return "plan"
    except PerfctlError as e:
        msg = str(e)
        assert msg.strip() and "Traceback" not in msg, msg
        assert "\n\n" not in msg.strip(), msg  # one paragraph
        assert str(path) in msg or path.name in msg, msg  # names the file
        return "error"


def _nodes(doc, path=()):
    """Every (path, node) of a parsed document."""
    yield path, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _nodes(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _nodes(v, (*path, i))


def _mutate(doc, data) -> object:
    """One random edit of doc: a value replaced, a key dropped or renamed, a list item
    duplicated or dropped."""
    doc = copy.deepcopy(doc)
    nodes = list(_nodes(doc))
    path, node = data.draw(st.sampled_from(nodes))
    op = data.draw(st.sampled_from(["replace", "drop", "rename", "dup"]))
    if not path:
        return data.draw(values) if op == "replace" else doc
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    last = path[-1]
    if op == "replace":
        parent[last] = data.draw(values)
    elif op == "drop":
        del parent[last]
    elif op == "rename" and isinstance(parent, dict):
        parent[data.draw(st.text(max_size=10))] = parent.pop(last)
    elif op == "dup" and isinstance(parent, list):
        parent.insert(last, copy.deepcopy(node))
    return doc


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_loads_as_shipped(example):
    assert outcome(example) == "plan"


@FUZZ
@given(data=st.data())
def test_tree_mutations_of_the_examples_load_or_fail_with_a_paragraph(tmp_path, data):
    example = data.draw(st.sampled_from(EXAMPLES))
    doc = yaml.safe_load(example.read_text())
    for _ in range(data.draw(st.integers(1, 3))):
        doc = _mutate(doc, data)
    f = tmp_path / example.name
    f.write_text(yaml.safe_dump(doc, allow_unicode=True))
    outcome(f)


@settings(FUZZ, max_examples=TEXT_MUTATIONS)
@given(data=st.data())
def test_text_mutations_of_the_examples_load_or_fail_with_a_paragraph(tmp_path, data):
    example = data.draw(st.sampled_from(EXAMPLES))
    text = example.read_text()
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        op = data.draw(st.sampled_from(["cut", "insert", "truncate"]))
        if op == "cut":
            text = text[:at] + text[at + data.draw(st.integers(1, 40)) :]
        elif op == "insert":
            alphabet = st.sampled_from(list(":{}[],-#&*!|>'\"\t\n %@`?") + ["\x00", "é", "{x}"])
            text = text[:at] + "".join(data.draw(st.lists(alphabet, max_size=6))) + text[at:]
        else:
            text = text[:at]
    f = tmp_path / example.name
    f.write_text(text)
    outcome(f)


@settings(FUZZ, max_examples=RANDOM_DOCS)
@given(doc=values)
def test_random_yaml_documents_load_or_fail_with_a_paragraph(tmp_path, doc):
    f = tmp_path / "random.yaml"
    f.write_text(yaml.safe_dump(doc, allow_unicode=True))
    outcome(f)


@pytest.mark.parametrize("seed", range(CLI_RUNS))
def test_perfctl_plan_on_a_mutated_example_exits_0_or_2_without_a_traceback(
    tmp_path, perfctl_env, seed
):
    """The CLI end of it: one mutated file per run, `perfctl plan` as a user runs it."""
    import random  # a fixed mutation per seed, without hypothesis's machinery

    rng = random.Random(seed)
    example = EXAMPLES[seed % len(EXAMPLES)]
    lines = example.read_text().splitlines()
    i = rng.randrange(len(lines))
    lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)] + rng.choice([": [", "{x}", "-1", ""])
    f = tmp_path / example.name
    f.write_text("\n".join(lines))
    done = perfctl("plan", str(f), env=perfctl_env, timeout=120)
    assert done.returncode in (0, 2), done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    if done.returncode == 2:
        assert str(f) in done.stderr or f.name in done.stderr, done.stderr
