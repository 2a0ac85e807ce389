"""The Injector interface every latency backend implements (proxy_injector.py,
netem_injector.py, tbf_injector.py), and what they share: the checks of a probe against the
network in force, the schedule's bookkeeping, and the clean-up at exit of whatever a backend
left (namespaces and qdiscs are no processes, so the supervisor cannot end them).
"""

from __future__ import annotations

import atexit
import weakref
from abc import ABC, abstractmethod

from ..experiment.network import Network
from . import probe as _probe
from .verify import JITTER_MIN_MS, verify, verify_bandwidth

_live: weakref.WeakSet[Injector] = weakref.WeakSet()


def _numeric():
    """(expected.py, distribution.py), loaded on first use: they import numpy, which only a
    probe's checks and a run's record of its network need (`perfctl doctor` and `plan` never
    load it)."""
    from . import distribution, expected  # numpy: a probe's checks only, as above

    return expected, distribution


def bulk_bytes(bps: float, seconds: float = 0.5) -> int:
    """How much the throughput probe sends: `seconds` of the rate, 256 KiB to 64 MiB."""
    return int(min(max(bps / 8 * seconds, 256 * 1024), 64 * 1024 * 1024))


class Injector(ABC):
    """Common interface. Subclasses: ProxyInjector, NetemInjector, TbfInjector."""

    backend: str = ""
    #: network namespace the server must run in (None: the host's)
    netns: str | None = None

    def __init__(self, spec: Network):
        self.spec = spec
        self._started = False
        _live.add(self)

    # -- set-up -------------------------------------------------------------------------
    def prepare(self) -> None:  # noqa: B027 (an optional hook: most backends need nothing)
        """Everything that must exist before the server starts. Idempotent."""

    @property
    def bind_host(self) -> str:
        """Address the server must listen on."""
        return "127.0.0.1"

    def wrap_command(self, argv: list[str]) -> list[str]:
        """argv to start the server with (inside the namespace for netem/tbf)."""
        return list(argv)

    @abstractmethod
    def start(self, target_host: str, target_port: int) -> tuple[str, int]:
        """Put the emulated path in front of the server at target_host:target_port; return the
        (host, port) the client must connect to."""

    @abstractmethod
    def probe(self, samples: int = 20) -> _probe.ProbeResult:
        """RTT samples through the path (and throughput when bandwidth is set)."""

    @abstractmethod
    def stop(self) -> None:
        """Remove everything start()/prepare() created. Idempotent."""

    # -- schedule ------------------------------------------------------------------------
    def start_schedule(self, anchor_ns: int) -> None:  # noqa: B027 (optional: a static path has none)
        """Run spec.schedule from anchor_ns (CLOCK_MONOTONIC, = time.perf_counter_ns()): step k
        takes effect at anchor_ns + at_k. The load generator's start instant is the anchor."""

    def changes(self) -> list[dict]:
        """The schedule steps applied so far: [{step, due_ns, applied_ns}] (step 1 = the first
        `schedule` entry)."""
        return []

    def state_now(self) -> Network:
        """The network in force now: the spec, or its last applied schedule step."""
        done = self.changes()
        return self.spec.schedule[done[-1]["step"] - 1].state if done else self.spec

    # -- checks -------------------------------------------------------------------------
    #: how long a lost probe round trip is held back (proxy: the spec's rto; netem: TCP's
    #: initial SYN retransmission timeout, 1 s, since the probe is a connect())
    def held_back_ms(self, spec: Network) -> float:
        return spec.rto_ms

    def probe_samples(self, spec: Network, samples: int = 20) -> int:
        """Round trips to probe: `samples`, or enough (up to 200, ~4 s of path time) for the
        jitter-shape and loss checks when those apply."""
        if spec.jitter_ms >= JITTER_MIN_MS or spec.has_loss:
            per_ms = max(
                spec.expected_rtt_ms() + 2 * spec.loss_per_chunk * self.held_back_ms(spec), 1.0
            )
            return int(min(200, max(samples, 4000.0 / per_ms)))
        return samples

    @staticmethod
    def probe_pipelines(spec: Network) -> bool:
        """Whether the probe may send its round trips without waiting for each answer
        (probe.pipelined_echo_rtt_samples): only where the path delays every byte alike."""
        return not (spec.jitter_ms or spec.has_loss or spec.reorder or spec.reset or spec.blackhole)

    def check(self, result: _probe.ProbeResult, state: Network | None = None) -> tuple[bool, str]:
        """Every check that applies to `state` (default: the network in force now, state_now()):
        added RTT p50, the jitter distribution, the loss rate, the bandwidth. Returns (ok,
        reasons: the failed checks first)."""
        expected, dist = _numeric()
        spec = state or self.state_now()
        good: list[str] = []
        bad: list[str] = []

        def add(ok_why: tuple[bool, str]) -> None:
            (good if ok_why[0] else bad).append(ok_why[1])

        add(verify(expected.expected_rtt_p50_ms(spec), result.added_p50_ms))
        added = result.added_ms
        if spec.jitter_ms >= JITTER_MIN_MS and len(added) >= 10 and self.checks_jitter_shape(spec):
            add(dist.verify_jitter(added, expected.added_rtt_samples_ms(spec, 20_000)))
        if spec.has_loss and len(added) >= 10:
            held = self.held_back_ms(spec)
            timed = spec.model_copy(update={"rto_ms": held})
            no_loss = timed.model_copy(update={"loss": 0.0, "loss_burst": None})
            thr = dist.held_threshold_ms(expected.added_rtt_samples_ms(no_loss, 20_000), held)
            share = dist.held_back_share(expected.added_rtt_samples_ms(timed, 100_000), thr)
            add(dist.verify_loss(added, thr, share))
        bw = self.probed_bandwidth_bps(spec)
        if bw and result.throughput_bps:
            add(verify_bandwidth(bw, result.throughput_bps))
        return not bad, "; ".join(bad + good)

    @staticmethod
    def expected_p50_ms(spec: Network) -> float:
        """The added RTT p50 a probe should see through spec (expected.py, loaded here)."""
        return _numeric()[0].expected_rtt_p50_ms(spec)

    def probed_bandwidth_bps(self, spec: Network) -> float | None:
        """The rate the probe's bulk transfer should see (proxy echo: out and back)."""
        return spec.path_bandwidth_bps

    def checks_jitter_shape(self, spec: Network) -> bool:
        """Whether this backend's jitter has the spec's exact law (netem's correlation does
        not keep it)."""
        return True

    def describe(self) -> dict:
        """What to record in run.json about the injected network."""
        return {
            "backend": self.backend,
            "spec": self.spec.model_dump(),
            "label": self.spec.describe(),
            "profile_source": self.spec.source(),
            "netns": self.netns,
            "expected_rtt_ms": self.spec.expected_rtt_ms(),
            "expected_rtt_p50_ms": self.expected_p50_ms(self.spec),
            "changes": self.changes(),
        }

    def __enter__(self) -> Injector:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __del__(self) -> None:  # best effort; stop() is the real contract
        try:
            self.stop()
        except Exception:
            pass


@atexit.register
def _stop_all() -> None:
    """Namespaces and qdiscs are no processes, so proc/process.py cannot end them: remove
    them at interpreter exit (their processes are already the supervisor's)."""
    for inj in list(_live):
        try:
            inj.stop()
        except Exception:
            pass
