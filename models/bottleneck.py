"""What limits a cell: the utilisation of every resource the run measured, the one closest to
saturation named the bottleneck, and the operational laws checked on the measured figures.

Resources (each only when the run measured what it needs):
- ``cpu``: the server's CPU per core, server_cpu_pct / 100 / cores;
- ``workers``: the worker pool, U = X S / c (the utilization law, S from Server-Timing or the
  other service estimate; c the requests the station serves at once);
- ``database``: X D / c_db (D the database's time per request, Server-Timing `db`);
- ``accept queue``: the listen queue's peak fill, tcp_accept_queue_max / backlog (and its
  overflows);
- ``load generator``: its CPU, loadgen_cpu_pct / 100 (a saturated client measures itself);
- ``injected delay``: not a utilisation but the share of the response time spent in the
  injected round trip, rtt / R: a cell whose latency is mostly delay is limited by the network.

Checks, flagged where the measured figures disagree:
- utilization law for the CPU: with a known CPU demand per request (spin), X spin / cores
  should be the measured CPU per core (more: CPU outside the service, parsing and the kernel;
  less: the spin was not CPU, or the sampler missed it);
- utilization law for the workers: X S / c cannot exceed 1;
- Little's law for a closed loop: N = X (R + Z) (users that are neither thinking nor waiting
  for an answer are lost somewhere the latency does not see: connects, a client that falls
  behind);
- flow balance for open load: the throughput X should be the offered rate (less: the server
  refused or dropped requests, or the client could not send them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loadgen.floats import float_or_nan

__all__ = ["Utilisation", "utilisations", "bottleneck_line", "law_checks"]

SATURATED = 0.8  # a resource this busy is the bottleneck's candidate
LAW_TOLERANCE = 0.15  # relative disagreement flagged
DELAY_DOMINATES = 0.5  # injected delay this share of R: the network limits the latency


@dataclass(frozen=True)
class Utilisation:
    resource: str
    value: float  # 0..1 (injected delay: share of the response time)
    detail: str  # how it was measured, in words


def utilisations(row, service=None, servers: float = math.nan, db_servers: float = math.nan):
    """Every resource's utilisation the row's readings allow (module docstring)."""
    out = []
    x = float_or_nan(row.get("throughput_rps"))
    cores = float_or_nan(row.get("server_cores"))
    cpu = float_or_nan(row.get("server_cpu_pct"))
    if cpu >= 0 and cores > 0:
        out.append(
            Utilisation("cpu", cpu / 100.0 / cores, f"{cpu / 100:.2f} of {cores:.0f} core(s)")
        )
    if service is not None and x > 0 and servers > 0 and math.isfinite(servers):
        u = x * service.mean_s / servers
        out.append(
            Utilisation(
                "workers",
                u,
                f"X S / c = {x:.0f}/s x {service.mean_s * 1e3:.3g} ms / {servers:.0f}",
            )
        )
    if service is not None and getattr(service, "has_db", False) and x > 0 and db_servers > 0:
        if math.isfinite(db_servers):
            u = x * service.db_mean_s / db_servers
            out.append(
                Utilisation("database", u, f"X D / c_db with {db_servers:.0f} connection(s)")
            )
    peak, backlog = (
        float_or_nan(row.get("tcp_accept_queue_max")),
        float_or_nan(row.get("server_backlog")),
    )
    over = float_or_nan(row.get("tcp_listen_overflows"))
    if peak >= 0 and backlog > 0:
        detail = f"peak {peak:.0f} of {backlog:.0f}"
        if over > 0:
            detail += f", {over:.0f} overflows"
        out.append(Utilisation("accept queue", min(peak / backlog, 1.0), detail))
    lg = float_or_nan(row.get("loadgen_cpu_pct"))
    if lg >= 0:
        out.append(Utilisation("load generator", lg / 100.0, f"{lg:.0f}% of a CPU"))
    rtt = float_or_nan(row.get("rtt_measured_ms"))
    if not rtt > 0:
        rtt = float_or_nan(row.get("rtt_expected_ms"))
    r = float_or_nan(row.get("measured_mean_ms"))
    if not r > 0:
        r = float_or_nan(row.get("latency_mean_ms"))
    if rtt > 0 and r > 0:
        out.append(Utilisation("injected delay", min(rtt / r, 1.0), f"{rtt:.3g} ms of {r:.3g} ms"))
    return out


def bottleneck(utils: list[Utilisation]) -> Utilisation | None:
    """The busiest resource at or above SATURATED (the injected delay when it dominates the
    response time and nothing is saturated); None when nothing limits the cell."""
    busy = [u for u in utils if u.resource != "injected delay" and u.value >= SATURATED]
    if busy:
        return max(busy, key=lambda u: u.value)
    delay = [u for u in utils if u.resource == "injected delay" and u.value >= DELAY_DOMINATES]
    return delay[0] if delay else None


def bottleneck_line(utils: list[Utilisation]) -> str:
    """One line: the bottleneck, then every measured utilisation, e.g.
    'bottleneck: workers 92% | cpu 31% (0.31 of 1 core(s)) | accept queue 0% (...)'."""
    top = bottleneck(utils)
    head = (
        f"bottleneck: {top.resource} {100 * top.value:.0f}%"
        if top
        else "bottleneck: none saturated"
    )
    parts = [f"{u.resource} {100 * u.value:.0f}% ({u.detail})" for u in utils if u is not top]
    return " | ".join([head, *parts])


def law_checks(row, service=None, servers: float = math.nan) -> list[str]:
    """The operational laws on the measured figures, one line per disagreement (module
    docstring); empty when they agree or cannot be checked."""
    out = []
    x = float_or_nan(row.get("throughput_rps"))
    cores, cpu = float_or_nan(row.get("server_cores")), float_or_nan(row.get("server_cpu_pct"))
    spin = float_or_nan(row.get("work_spin_us"))
    if x > 0 and spin > 0 and cores > 0 and cpu >= 0:
        want = x * spin / 1e6 / cores
        got = cpu / 100.0 / cores
        if abs(got - want) > LAW_TOLERANCE * max(want, 0.05):
            out.append(
                f"utilization law (CPU): X x spin / cores = {100 * want:.0f}% per core, "
                f"measured {100 * got:.0f}%"
                + (
                    " (CPU outside the service: parsing, the kernel, the runtime)"
                    if got > want
                    else " (less CPU than the spin needs: the sampler or the workload?)"
                )
            )
    if service is not None and x > 0 and servers > 0 and math.isfinite(servers):
        u = x * service.mean_s / servers
        if u > 1.0 + LAW_TOLERANCE / 3:
            out.append(
                f"utilization law (workers): X S / c = {u:.2f} > 1: the service time or the "
                f"number of workers ({servers:.0f}) is wrong"
            )
    mode = str(row.get("load_mode", ""))
    n = float_or_nan(row.get("connections"))
    r = float_or_nan(row.get("measured_mean_ms"))
    if not r > 0:
        r = float_or_nan(row.get("latency_mean_ms"))
    z = float_or_nan(row.get("think_time_s"))
    z = z if z >= 0 else 0.0
    if mode == "closed" and x > 0 and n > 0 and r > 0:
        little = x * (r / 1e3 + z)
        if abs(little / n - 1.0) > LAW_TOLERANCE:
            out.append(
                f"Little's law: X (R + Z) = {little:.3g} users busy, but N = {n:.0f}: "
                "users spent time neither thinking nor in the measured latency"
                if little < n
                else f"Little's law: X (R + Z) = {little:.3g} > N = {n:.0f}"
            )
    rate = float_or_nan(row.get("target_rate"))
    if mode == "open" and x > 0 and rate > 0 and x < (1.0 - LAW_TOLERANCE / 3) * rate:
        out.append(
            f"flow balance: throughput {x:.0f}/s below the offered {rate:.0f}/s "
            "(requests refused, failed or never sent)"
        )
    return out
