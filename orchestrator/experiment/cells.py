"""Cells: one combination of axis values, resolved and validated (`Cell`), and a plan's cells
as a lazy sequence (`Cells`).

`Cells` never holds the matrix: len() counts it (matrix.count) and iteration compiles one cell
at a time. Each section of a cell (its server, workload, load, placement, network) depends only
on the axes its placeholders name, so a section is substituted and validated once per distinct
combination of those axes and then shared: a 1000 x 100 matrix whose `load:` names one axis
validates 1000 Load models, not 100000. The cell id hashes the same JSON as ever (each
section's JSON is kept with its validated model), so ids stay stable across versions.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from typing import Any

from pydantic import ValidationError

from . import matrix
from .base import FrozenModel
from .catalogue import RMI_MODELS
from .document import Scalar, fail, placeholders, substitute, validation_error
from .load import AUTO_MAX_S, AUTO_PHASE_WARMUP_S, Load, Workload
from .network import Network
from .placement import Placement
from .servers import BundledServer, CommandServer, ServerConfig
from .workload import check_workload

BODY_SECTIONS = {"workload": Workload, "load": Load, "placement": Placement}


class Cell(FrozenModel):
    """One combination of axis values, fully resolved and validated."""

    cell_id: str
    values: dict[str, Scalar]  # the axis values, in matrix order
    server_name: str
    server: ServerConfig
    workload: Workload
    load: Load
    network: Network
    placement: Placement

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.values.items()) or self.server_name

    def precision_metric(self, exp) -> str:
        """The trials.csv column whose precision `repeats: auto` watches: the experiment's
        precision_metric, else throughput for closed load (the server sets the rate) and p50
        latency for the others (the rate is given)."""
        if exp.precision_metric:
            return exp.precision_metric
        return "throughput_rps" if self.load.mode == "closed" else "latency_p50_ms"


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


class Cells(Sequence):
    """The cells of an experiment, compiled on demand (module docstring).

    Raises PerfctlError on construction when the matrix is over matrix.MAX_CELLS, and from
    validate() (or while iterating) on the first cell whose document does not validate.
    """

    def __init__(self, exp, doc: dict, source: str) -> None:
        self.exp, self.doc, self.source = exp, doc, source
        self._len = matrix.check_size(exp, source)
        self._memo: dict[tuple, tuple[Any, str]] = {}  # section key -> (model, its JSON)
        self._uses: dict[str, list[str]] = {}  # section -> the axes it names
        self._checked: set[tuple[int, str]] = set()  # (memoised) workloads checked, by driver

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Cell]:
        for values in matrix.combos(self.exp, self.source):
            yield self._cell(values)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return list(itertools.islice(self, *i.indices(self._len)))
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError("cell index out of range")
        return next(itertools.islice(self, i, None))

    def validate(self) -> None:
        """Compile every cell once (PerfctlError on the first problem), keeping none."""
        for _ in self:
            pass

    def _section(self, section: str, raw: Any, values: dict, compile_):
        """The compiled section for these axis values, from the memo when already seen."""
        uses = self._uses.get(section)
        if uses is None:
            uses = self._uses[section] = sorted(placeholders(raw) & set(values))
        key = (section, *((type(values[a]).__name__, values[a]) for a in uses))
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = compile_(substitute(raw, values, self.source, section))
        return hit

    def _cell(self, values: dict[str, Scalar]) -> Cell:
        label = ", ".join(f"{k}={v}" for k, v in values.items())
        name = values["server"]
        key = f"servers.{name}"

        def server_(doc):
            model = _validate_server(doc, self.source, key, label)
            return model, _dumps(server_dump(model))

        server, server_json = self._section(key, self.exp.servers[name], values, server_)
        parts: dict[str, tuple[Any, str]] = {}
        context = {"search": self.exp.search is not None}
        for section, model_cls in BODY_SECTIONS.items():

            def body_(doc, section=section, model_cls=model_cls):
                try:  # under search: the search gives open load its rates
                    model = model_cls.model_validate(doc, context=context)
                except ValidationError as e:
                    raise validation_error(self.source, section, e, label) from None
                return model, _dumps(model.model_dump())

            parts[section] = self._section(section, self.doc.get(section, {}), values, body_)

        def network_(doc):
            # The id hashes the network block as written (unit strings), as it always has, so
            # cells keep their ids across perfctl versions and `compare` can match them.
            return _validate_network(doc, self.source, label), _dumps(dict(doc))

        network, network_json = self._section(
            "network", self.doc.get("network", {}), values, network_
        )
        _check_driver_speaks_to(server, parts["load"][0], self.source, key, label)
        load = parts["load"][0]
        driver = load.driver if isinstance(load.driver, str) else "cmd"
        if (id(parts["workload"][0]), driver) not in self._checked:  # once per workload, driver
            check_workload(parts["workload"][0], driver, self.source, label)
            self._checked.add((id(parts["workload"][0]), driver))
        blob = (
            f'{{"load": {parts["load"][1]}, "network": {network_json}, '
            f'"placement": {parts["placement"][1]}, "server": {server_json}, '
            f'"values": {_dumps(values)}, "workload": {parts["workload"][1]}}}'
        )
        if "warmup" not in self.doc.get("load", {}) and jit_warms_up(server, load):
            # a JIT server or driver warms up until steady unless the file says otherwise; the
            # id hashes the load as written, so such a cell keeps the id it always had
            load = load.model_copy(
                update={"warmup_s": AUTO_PHASE_WARMUP_S, "warmup_auto_max_s": AUTO_MAX_S}
            )
        return Cell.model_construct(
            cell_id=matrix.cell_id_of_json(blob),
            values=values,
            server_name=name,
            server=server,
            workload=parts["workload"][0],
            load=load,
            network=network,
            placement=parts["placement"][0],
        )


def jit_warms_up(server: ServerConfig, load: Load) -> bool:
    """Whether the server or the driver runs on a JVM, whose JIT compiles under the first
    seconds of load: a bundled Java server, or the `rmi` driver. Their warm-up is `auto` by
    default (loadgen/prewarm.py, RmiDriver.prewarm)."""
    java_server = isinstance(server, BundledServer) and server.impl == "java"
    return java_server or load.driver == "rmi"


def _check_driver_speaks_to(
    server: ServerConfig, load: Load, source: str, key: str, label: str
) -> None:
    """A bundled server speaks HTTP or, for the RMI models, Java RMI: the driver must match.
    An HTTPS server (`tls: true`) is loaded by perfctl's own load generator only."""
    if server.tls and load.driver != "http":
        raise fail(
            source,
            f"{key}.tls",
            f"server `{key}` speaks HTTPS, which only perfctl's own load generator "
            f"(driver http) speaks, but the load driver is {load.driver_label!r} (in cell {label})",
            "drop `load.driver`, or `tls: true` on this server",
        )
    if not isinstance(server, BundledServer) or not isinstance(load.driver, str):
        return
    rmi_server = server.concurrency_model in RMI_MODELS
    if rmi_server and load.driver != "rmi":
        raise fail(
            source,
            "load.driver",
            f"server `{key}` (java, model "
            f"{server.concurrency_model}) speaks Java RMI, but the load driver is "
            f"{load.driver!r} (in cell {label})",
            "set `load.driver: rmi` for RMI "
            "servers (make it an axis to compare HTTP and RMI in one experiment)",
        )
    if load.driver == "rmi" and not rmi_server:
        raise fail(
            source,
            "load.driver",
            f"the rmi driver speaks Java RMI, but server `{key}` "
            f"({server.label}) speaks HTTP (in cell {label})",
            "use an RMI server (impl: java, model: rmi or rmi-single) with driver rmi",
        )


def server_dump(server: ServerConfig) -> dict:
    """The server's fields as the cell id hashes them: a bundled server without `db` (or
    `db_pool`), and any server without `tls`, hashes as it did before they existed, so cell
    ids stay stable across versions."""
    out = server.model_dump()
    if isinstance(server, BundledServer):
        for key in ("db", "db_pool"):
            if getattr(server, key) is None:
                out.pop(key)
    if not server.tls:
        out.pop("tls")
    return out


def _validate_server(doc: Any, source: str, key: str, label: str) -> ServerConfig:
    if not isinstance(doc, dict) or ("impl" in doc) == ("cmd" in doc):
        raise fail(
            source,
            key,
            "a server is either a bundled one (`impl: c|java|python`) or "
            'a command (`cmd: "... {port} ..."`), exactly one of the two',
            "give `impl:` or `cmd:`",
        )
    model = BundledServer if "impl" in doc else CommandServer
    try:
        return model.model_validate(doc)
    except ValidationError as e:
        raise validation_error(source, key, e, label) from None


def _validate_network(doc: Any, source: str, label: str) -> Network:
    if not isinstance(doc, dict):
        raise fail(source, "network", "must be a mapping", "e.g. network: {delay: 10ms}")
    return Network.from_config(doc, where=f"{source}: key `network` (cell {label})")
