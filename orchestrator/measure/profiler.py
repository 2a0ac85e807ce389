"""A server's profile for one trial (`profile: true`, or `perfctl run --profile-server`).

While the load runs, a sampling profiler records where the server process spends its time:

- Python servers: py-spy (`record --format raw`, 100 Hz, --nonblocking so the server is never
  paused, --subprocesses for worker processes);
- Java servers: JDK Flight Recorder, started and stopped through `jcmd` (settings=profile:
  an execution sample every 10 ms per running thread), read back with `jfr print --json`;
- C servers and any other command: `perf record -g` at 99 Hz, read back with `perf script`,
  where the kernel allows perf events; where it does not, a note says so.

Every profiler leaves the same two files in the trial directory: `profile.folded` (one line
per distinct stack, `root;caller;callee count`, the format flame-graph tools share) and
`profile.json`: the tool, its sampling rate, the samples, and its measured cost: the CPU time
the profiler process(es) used over the load (`profiler_cpu_s`, and as % of one CPU), which on
a machine with few cores is time the server and the load generator could not use. (What the
profiler costs the server's throughput is measured side by side in
benchmarks/profile_overhead.py.) The SVG flame graph is drawn from profile.folded
(analysis/flamegraph.py) after the trials, and report.html links it.

Nothing here may fail a trial: a profiler that cannot start or read back leaves a note.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from ..errors import PerfctlError
from ..proc.process import run_to_files, spawn, terminate

RATE_HZ = 100
PERF_RATE_HZ = 99
READ_BACK_TIMEOUT_S = 120.0
FOLDED = "profile.folded"
INFO = "profile.json"


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of pids (and their reaped children) so far."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
        except (OSError, IndexError, ValueError):
            continue
    return total


def kind_of(argv: list[str], impl: str | None) -> str:
    """python | java | native: which profiler fits the server."""
    if impl in ("python", "java"):
        return impl
    if impl == "c":
        return "native"
    exe = Path(argv[0]).name if argv else ""
    if exe.startswith("python"):
        return "python"
    if exe == "java":
        return "java"
    return "native"


class Profiler:
    """start() when the load starts, stop() when it ends; then profile.folded + profile.json."""

    tool = ""
    rate_hz = 0

    def __init__(self, pid: int, tdir: Path, argv: list[str]) -> None:
        self.pid, self.tdir, self.argv = pid, Path(tdir), argv
        self.note = ""
        self.proc: subprocess.Popen | None = None
        self._t0 = 0.0
        self._window_s = 0.0
        self._cpu_s = 0.0
        self.cost_note = "the profiler's own process; the server is not paused"

    # --- the recording ----------------------------------------------------------------
    def _record_argv(self) -> list[str] | None:
        raise NotImplementedError

    def start(self) -> Profiler:
        argv = self._record_argv()
        if argv is None:
            return self
        try:
            self.proc = spawn(argv, self.tdir / "profiler.log", None, cwd=self.tdir)
        except (OSError, PerfctlError) as e:
            self.note = f"{self.tool} could not start: {e}"
            return self
        self._t0 = time.monotonic()
        return self

    def stop(self) -> None:
        """End the recording (SIGINT: the profiler writes what it has) and read it back."""
        if self.proc is None:
            self._write({})
            return
        self._window_s = time.monotonic() - self._t0
        self._cpu_s = _cpu_s([self.proc.pid])
        try:
            self._end_recording()
            folded = self._read_back()
        except (OSError, ValueError, subprocess.SubprocessError, PerfctlError) as e:
            folded = Counter()
            self.note = self.note or f"{self.tool}: could not read the profile back ({e})"
        if not folded and not self.note:
            log = self.tdir / "profiler.log"
            tail = (
                log.read_text(errors="replace").strip().splitlines()[-3:] if log.is_file() else []
            )
            self.note = f"{self.tool} recorded no samples" + (
                f": {' / '.join(tail)}" if tail else ""
            )
        self._write(folded)

    def _end_recording(self) -> None:
        try:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(READ_BACK_TIMEOUT_S)
        except (subprocess.TimeoutExpired, OSError):
            terminate(self.proc)

    def _read_back(self) -> Counter:
        raise NotImplementedError

    def _write(self, folded: Counter) -> None:
        with open(self.tdir / FOLDED, "w") as f:
            for stack, n in sorted(folded.items()):
                f.write(f"{stack} {n}\n")
        info = {
            "tool": self.tool,
            "rate_hz": self.rate_hz,
            "pid": self.pid,
            "samples": int(sum(folded.values())),
            "stacks": len(folded),
            "window_s": round(self._window_s, 3),
            "profiler_cpu_s": round(self._cpu_s, 3),
            "profiler_cpu_pct_of_one_cpu": round(100 * self._cpu_s / self._window_s, 2)
            if self._window_s
            else None,
            "cost": self.cost_note,
            "note": self.note,
        }
        (self.tdir / INFO).write_text(json.dumps(info, indent=1))


class PySpy(Profiler):
    tool = "py-spy"
    rate_hz = RATE_HZ

    def _exe(self) -> str | None:
        here = Path(sys.executable).parent / "py-spy"
        return str(here) if here.is_file() else shutil.which("py-spy")

    def _record_argv(self) -> list[str] | None:
        exe = self._exe()
        if exe is None:
            self.note = (
                "py-spy is not installed (it comes with perfctl's Python packages: make setup)"
            )
            return None
        return [
            exe,
            "record",
            "--pid",
            str(self.pid),
            "--rate",
            str(self.rate_hz),
            "--format",
            "raw",
            "--output",
            str(self.tdir / "py-spy.raw"),
            "--nonblocking",
            "--subprocesses",
        ]

    def _read_back(self) -> Counter:
        out: Counter = Counter()
        raw = self.tdir / "py-spy.raw"
        if not raw.is_file():
            return out
        for line in raw.read_text(errors="replace").splitlines():
            stack, _, n = line.rpartition(" ")
            if stack and n.isdigit():
                out[stack] += int(n)
        raw.unlink()
        return out


class Jfr(Profiler):
    """JDK Flight Recorder through jcmd: nothing to add to the server's command line."""

    tool = "jfr"
    rate_hz = 100  # settings=profile: jdk.ExecutionSample every 10 ms

    def _bin(self, name: str) -> str | None:
        if self.argv and Path(self.argv[0]).name == "java":
            sibling = Path(self.argv[0]).parent / name
            if sibling.is_file():
                return str(sibling)
        return shutil.which(name)

    def _record_argv(self) -> list[str] | None:
        jcmd = self._bin("jcmd")
        if jcmd is None or self._bin("jfr") is None:
            self.note = "jcmd/jfr not found next to the server's java or on PATH"
            return None
        self._jfr_file = self.tdir / "server.jfr"
        # jcmd returns once the recording runs; the Profiler then watches jcmd's own cost
        return [
            jcmd,
            str(self.pid),
            "JFR.start",
            "name=perfctl",
            "settings=profile",
            f"filename={self._jfr_file}",
        ]

    def start(self) -> Profiler:
        super().start()
        if self.proc is not None:
            try:
                self.proc.wait(READ_BACK_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                terminate(self.proc)
            self.cost_note = (
                "JFR samples inside the server's JVM: its cost is part of the "
                "server's own CPU (benchmarks/profile_overhead.py measures it)"
            )
        return self

    def _end_recording(self) -> None:
        _run([self._bin("jcmd"), str(self.pid), "JFR.stop", "name=perfctl"], self.tdir)

    def _read_back(self) -> Counter:
        jfr = self._bin("jfr")
        if not self._jfr_file.is_file():
            self.note = "the JVM wrote no recording (did it exit before the load ended?)"
            return Counter()
        text = _run(
            [jfr, "print", "--json", "--events", "jdk.ExecutionSample", str(self._jfr_file)],
            self.tdir,
        )
        return fold_jfr_json(text)


def fold_jfr_json(text: str) -> Counter:
    """`jfr print --json --events jdk.ExecutionSample` -> folded stacks (root first)."""
    doc = json.loads(text)
    out: Counter = Counter()
    for ev in doc.get("recording", {}).get("events", []):
        frames = ((ev.get("values") or {}).get("stackTrace") or {}).get("frames") or []
        names = []
        for fr in frames:
            m = fr.get("method") or {}
            cls = (m.get("type") or {}).get("name") or "?"
            names.append(f"{cls}.{m.get('name', '?')}".replace(";", ":").replace(" ", "_"))
        if names:
            out[";".join(reversed(names))] += 1
    return out


class Perf(Profiler):
    tool = "perf"
    rate_hz = PERF_RATE_HZ

    def _record_argv(self) -> list[str] | None:
        exe = shutil.which("perf")
        if exe is None:
            self.note = (
                "perf is not installed (Debian: linux-perf; make apt installs it), so "
                "this C server was not profiled"
            )
            return None
        paranoid = _read_int("/proc/sys/kernel/perf_event_paranoid")
        if os.geteuid() != 0 and paranoid is not None and paranoid > 1:
            self.note = (
                f"the kernel does not let this user record perf events "
                f"(kernel.perf_event_paranoid = {paranoid}; 1 or lower allows it, or "
                "run perfctl as root), so this server was not profiled"
            )
            return None
        return [
            exe,
            "record",
            "-F",
            str(self.rate_hz),
            "-g",
            "-p",
            str(self.pid),
            "-o",
            str(self.tdir / "perf.data"),
        ]

    def _read_back(self) -> Counter:
        data = self.tdir / "perf.data"
        if not data.is_file():
            log = self.tdir / "profiler.log"
            why = log.read_text(errors="replace").strip()[-300:] if log.is_file() else ""
            self.note = f"perf could not record here (the kernel refused perf events?): {why}"
            return Counter()
        folded = fold_perf_script(
            _run([shutil.which("perf") or "perf", "script", "-i", str(data)], self.tdir)
        )
        data.unlink()
        return folded


_PERF_FRAME = re.compile(r"^\s*[0-9a-f]+\s+(.+?)\s+\((.*)\)\s*$")


def fold_perf_script(text: str) -> Counter:
    """`perf script` output (a header line, then one frame per line, leaf first, a blank line
    between samples) -> folded stacks (root first)."""
    out: Counter = Counter()
    frames: list[str] = []
    comm = ""

    def flush() -> None:
        if frames:
            out[";".join([comm, *reversed(frames)])] += 1

    for line in text.splitlines():
        if not line.strip():
            flush()
            frames, comm = [], ""
            continue
        if not line[0].isspace():
            comm = line.split()[0].replace(";", ":")
            continue
        m = _PERF_FRAME.match(line)
        if m:
            sym = m.group(1)
            if sym == "[unknown]":
                sym = f"[{Path(m.group(2)).name}]"
            frames.append(re.sub(r"\+0x[0-9a-f]+$", "", sym).replace(";", ":").replace(" ", "_"))
    flush()
    return out


def _run(argv: list[str], tdir: Path) -> str:
    """argv's stdout, run under perfctl's supervisor (its stderr goes to profiler.log);
    ValueError when it fails."""
    out = tdir / "profiler.out"
    try:
        code = run_to_files(argv, out, tdir / "profiler.log", READ_BACK_TIMEOUT_S)
        text = out.read_text(errors="replace")
    finally:
        out.unlink(missing_ok=True)
    if code != 0:
        log = (tdir / "profiler.log").read_text(errors="replace").strip()[-300:]
        raise ValueError(f"{Path(argv[0]).name} {argv[1]} exited {code}: {log}")
    return text


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def for_server(pid: int, tdir: Path, argv: list[str], impl: str | None) -> Profiler:
    """The profiler that fits the server (kind_of)."""
    cls = {"python": PySpy, "java": Jfr, "native": Perf}[kind_of(argv, impl)]
    return cls(pid, tdir, argv)
