"""The netem backend: `tc qdisc ... netem` on both veth ends of the server's namespace
(tc_injector.py): real packet delay, jitter, loss and reordering, and a schedule applied by
`tc qdisc change` at each step's instant. Needs root and sch_netem in the kernel.
"""

from __future__ import annotations

import threading
import time

from ..errors import PerfctlError
from ..experiment.network import Network
from .commands import netem_qdisc_commands, netem_schedule_commands
from .namespace import Netns, run
from .tc_injector import TcInjector


class NetemInjector(TcInjector):
    """tc netem on both veth ends: delay_up on the host end, delay_down in the namespace.
    Loss here is real packet loss (TCP retransmits on its own RTO); rto is ignored."""

    backend = kind = "netem"

    def __init__(self, spec: Network):
        if spec.proxy_only:
            raise PerfctlError(
                "reset and blackhole are faults only the proxy injects (tc netem "
                "has none); use `backend: proxy` in the network block"
            )
        super().__init__(spec)
        self._applied: list[dict] = []
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None

    def qdisc_commands(self, ns: Netns) -> list[list[str]]:
        return netem_qdisc_commands(self.spec, ns.name, ns.host_if, ns.ns_if)

    def checks_jitter_shape(self, spec: Network) -> bool:
        return not spec.jitter_correlation  # netem's correlation narrows the marginal law

    def start_schedule(self, anchor_ns: int) -> None:
        """A thread runs `tc qdisc change` for each step at anchor_ns + at (netem_schedule_commands)."""
        if not self.spec.schedule or self._thread is not None:
            return
        self.prepare()
        plan = netem_schedule_commands(self.spec, self.ns.name, self.ns.host_if, self.ns.ns_if)

        def runner() -> None:
            for k, (at_s, cmds) in enumerate(plan, start=1):
                due = anchor_ns + int(at_s * 1e9)
                if self._cancel.wait(max(0.0, (due - time.perf_counter_ns()) / 1e9)):
                    return
                for cmd in cmds:
                    run(cmd)
                self._applied.append(
                    {"step": k, "due_ns": due, "applied_ns": time.perf_counter_ns()}
                )

        self._thread = threading.Thread(target=runner, name="netem-schedule", daemon=True)
        self._thread.start()

    def changes(self) -> list[dict]:
        return list(self._applied)

    def stop(self) -> None:
        self._cancel.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        super().stop()
