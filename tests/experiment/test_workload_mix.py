"""`workload.requests` and `workload.headers` in the experiment file: what reaches the load
generator, cell ids kept for the one-request form, and every bad input refused before anything
runs with one paragraph naming the file, the key and the fix."""

import json
from pathlib import Path

import pytest
from cli_kit import perfctl

from orchestrator import experiment
from orchestrator.errors import PerfctlError
from orchestrator.experiment.load import to_load_spec

ROOT = Path(__file__).resolve().parents[2]
HEAD = """
name: m
servers:
  py: {impl: python, model: async}
load: {mode: closed, connections: 2, duration: 2s}
"""
MIX = (
    HEAD
    + """
workload:
  headers: {X-Client: perfctl}
  requests:
    - {name: login, weight: 1, method: POST, path: /login,
       body: {user: "{file:users.csv:name}", n: "{int:1..9}", s: "{seq}"}}
    - {name: item, weight: 3, method: PATCH, path: "/item/{int:1..50}", params: {q: "a b"},
       headers: {X-Client: other}}
"""
)


@pytest.fixture
def users(tmp_path):
    (tmp_path / "users.csv").write_text("name,age\nann,3\n")


def spec_of(path):
    plan = experiment.load_plan(path)
    [cell] = plan.cells
    return cell, to_load_spec(cell.load, cell.workload, "h", 1, seed=3, source=plan.source)


def test_a_mix_reaches_the_load_generator(write_yaml, users, tmp_path):
    cell, spec = spec_of(write_yaml(MIX))
    assert cell.workload.endpoints == ["login", "item"]
    login, item = spec.requests
    assert spec.headers == (("X-Client", "perfctl"),)
    assert login.method == "POST" and login.weight == 1.0
    assert dict(login.headers) == {"Content-Type": "application/json"}
    body = json.loads(login.body.replace("{int:1..9}", "5").replace("{seq}", "6"))
    assert body["n"] == 5 and body["s"] == 6  # a numeric field alone is a JSON number
    assert f"{{file:{tmp_path / 'users.csv'}:name}}" in login.body  # made absolute
    assert item.target == "/item/{int:1..50}?q=a%20b"
    assert item.headers == (("X-Client", "other"),)


def test_the_one_request_form_keeps_its_cell_id_and_its_old_path(write_yaml):
    text = HEAD + "workload: {path: /work, params: {spin_us: 10}}\n"
    cell, spec = spec_of(write_yaml(text))
    assert cell.cell_id == experiment.load_plan(write_yaml(text, "b.yaml")).cells[0].cell_id
    assert "headers" not in cell.workload.model_dump() and spec.requests == ()
    with_seq = HEAD + "workload: {path: /r, method: POST, body: 'user=u{seq}'}\n"
    assert spec_of(write_yaml(with_seq, "c.yaml"))[1].requests == ()  # {seq}: as before
    with_uuid = HEAD + "workload: {path: /r, method: POST, body: 'user={uuid}'}\n"
    [one] = spec_of(write_yaml(with_uuid, "d.yaml"))[1].requests
    assert one.name == "/r" and one.body == "user={uuid}"


def test_the_default_workload_hashes_as_before_headers_existed(write_yaml):
    """87c4685d35e8 is the cell id main computed for this file before drivers and mixes."""
    text = HEAD + "workload: {path: /work, params: {spin_us: 10}}\n"
    assert experiment.load_plan(write_yaml(text)).cells[0].cell_id == "87c4685d35e8"


BAD = [
    ('- {name: a, path: "/x/{foo:1}"}', "workload.requests[0].path", "unknown generated field"),
    (
        "- {name: a, path: /x, body: {u: '{file:users.csv:nope}'}}",
        "workload.requests[0].body",
        "no column 'nope'",
    ),
    (
        "- {name: a, path: /x, body: {u: '{file:none.csv:name}'}}",
        "workload.requests[0].body",
        "cannot read the CSV file",
    ),
    ("- {name: a, weight: 0}\n    - {name: b, weight: 0}", "workload.requests", "sum to 0"),
    ("- {name: a, weight: -1}\n    - {name: b}", "workload.requests", "weights must be >= 0"),
    ("- {name: a}\n    - {name: a}", "workload.requests", "a is used twice"),
    (
        "- {name: a, headers: {A: '{env:PERFCTL_UNSET_VAR}'}}",
        "workload.requests[0].headers.A",
        "PERFCTL_UNSET_VAR, which is not set",
    ),
    ("- {name: a, method: 'GE T'}", "workload.requests.0.method", "not an HTTP method"),
]


@pytest.mark.parametrize("requests, key, needle", BAD)
def test_a_bad_workload_is_refused_naming_file_key_and_fix(
    write_yaml, users, requests, key, needle
):
    path = write_yaml(HEAD + f"workload:\n  requests:\n    {requests}\n")
    with pytest.raises(PerfctlError) as e:
        experiment.load_plan(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: key `{key}`") and needle in msg and "Fix: " in msg, msg
    assert "\n" not in msg


def test_a_mix_needs_the_http_generator(write_yaml):
    text = HEAD.replace("mode: closed", "driver: {cmd: 'd {spec} {out}'}, mode: closed")
    path = write_yaml(text + "workload: {headers: {A: b}}\n")
    with pytest.raises(PerfctlError, match=r"key `workload.headers`.*load.driver: http"):
        experiment.load_plan(path)


RMI = """
name: r
servers:
  rmi: {impl: java, model: rmi, threads: 2}
load: {driver: rmi, mode: closed, connections: 2, duration: 2s}
"""


def test_the_rmi_driver_takes_a_mix_with_seq_and_uuid(write_yaml):
    text = RMI + (
        "workload:\n  requests:\n"
        "    - {name: get, weight: 3, path: /db, params: {query: range}}\n"
        "    - {name: add, method: POST, path: /register, body: 'user={uuid}-{seq}'}\n"
    )
    [cell] = experiment.load_plan(write_yaml(text)).cells
    spec = to_load_spec(cell.load, cell.workload, "h", 1, seed=3)
    assert [(r.name, r.weight, r.body) for r in spec.requests] == [
        ("get", 3.0, ""),
        ("add", 1.0, "user={uuid}-{seq}"),
    ]


RMI_BAD = [
    ("{path: '/work', params: {n: '{int:1..9}'}}", "workload.params.n", "not {int}"),
    ("{path: /register, method: POST, body: 'user={text:8}'}", "workload.body", "not {text}"),
    ("{path: /work, headers: {A: b}}", "workload.headers", "cannot send headers"),
    ("{requests: [{name: a, headers: {A: b}}]}", "workload.headers", "cannot send headers"),
]


@pytest.mark.parametrize("workload, key, needle", RMI_BAD)
def test_what_the_rmi_driver_cannot_render_is_refused(write_yaml, workload, key, needle):
    path = write_yaml(RMI + f"workload: {workload}\n")
    with pytest.raises(PerfctlError) as e:
        experiment.load_plan(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: key `{key}`") and needle in msg and "Fix: " in msg, msg


def test_a_driver_command_gets_no_mix_and_no_uuid(write_yaml):
    text = HEAD.replace("mode: closed", "driver: {cmd: 'd {spec} {out}'}, mode: closed")
    with pytest.raises(PerfctlError, match=r"key `workload.requests`.*cannot send a mix"):
        experiment.load_plan(write_yaml(text + "workload: {requests: [{name: a}]}\n"))
    with pytest.raises(PerfctlError, match=r"key `workload.body`.*renders only \{seq\}"):
        experiment.load_plan(write_yaml(text + "workload: {method: POST, body: 'u={uuid}'}\n"))


def test_perfctl_plan_exits_2_on_an_unknown_field(write_yaml, perfctl_env, assert_clean_error):
    path = write_yaml(HEAD + "workload: {path: '/x/{foo:1}'}\n")
    proc = perfctl("plan", str(path), env=perfctl_env, timeout=60)
    assert_clean_error(proc, "workload.path", "unknown generated field {foo:1}", "Fix:")


def test_a_replay_reaches_the_load_generator_with_its_endpoints(write_yaml, tmp_path):
    (tmp_path / "t.txt").write_text("/search?q=1\n/health\n")
    text = HEAD + "workload: {replay: t.txt, replay_order: shuffle}\n"
    _, spec = spec_of(write_yaml(text))
    assert spec.replay_file == str(tmp_path / "t.txt") and spec.replay_order == "shuffle"
    assert spec.replay_names == ("/search", "/health") and spec.templated


@pytest.mark.parametrize(
    "workload, files, key, needle",
    [
        ("{replay: none.txt}", {}, "workload.replay", "cannot read the replay file"),
        ("{replay: e.txt}", {"e.txt": "\n# nothing\n"}, "workload.replay", "holds no request"),
        (
            "{replay: b.jsonl}",
            {"b.jsonl": '{"path": "/a"}\nnot json\n'},
            "workload.replay",
            "line 2 of",
        ),
        ("{replay: t.txt, path: /x}", {"t.txt": "/a\n"}, "workload.path", "has no use"),
    ],
)
def test_a_bad_replay_is_refused_naming_file_key_and_fix(
    write_yaml, tmp_path, workload, files, key, needle
):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    path = write_yaml(HEAD + f"workload: {workload}\n")
    with pytest.raises(PerfctlError) as e:
        experiment.load_plan(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: key `{key}`") and needle in msg and "Fix: " in msg, msg


def test_a_one_off_probe_gets_a_literal_target(write_yaml, users, tmp_path):
    cell, _ = spec_of(write_yaml(MIX))
    assert cell.workload.probe_target == "/login"  # its fields are in the body
    literal = HEAD + "workload:\n  requests:\n    - {name: a, path: '/x/{uuid}'}\n"
    literal += "    - {name: b, path: /y, params: {k: 1}}\n"
    assert spec_of(write_yaml(literal, "l.yaml"))[0].workload.probe_target == "/y?k=1"
    one = HEAD + "workload: {path: /w, params: {spin_us: 5}}\n"
    assert spec_of(write_yaml(one, "o.yaml"))[0].workload.probe_target == "/w?spin_us=5"
