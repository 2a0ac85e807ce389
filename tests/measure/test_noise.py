"""Host-noise readings from /proc (measure/schedstat.py, measure/noise.py) on synthetic text and samples,
and the `quiet` verdict's thresholds."""

import dataclasses
import math
import os
import time

import pytest
import quiet_kit

from orchestrator.measure import noise, schedstat
from orchestrator.measure.noise import NoiseSample
from orchestrator.measure.schedstat import USER_HZ, CpuTicks
from orchestrator.proc import procfs
from orchestrator.run.bundled import ROOT

PROC_STAT = """cpu  149335 47 33900 272536 3002 0 7845 311 0 0
cpu0 66873 14 14629 148009 480 0 3771 129 0 0
cpu1 82461 33 19270 124526 2521 7 4074 182 0 0
intr 4061723 0 0 0
ctxt 123
"""

STATUS = """Name:\tpython
State:\tS (sleeping)
voluntary_ctxt_switches:\t354
nonvoluntary_ctxt_switches:\t68
"""


def test_proc_stat_gives_each_cpu_its_idle_steal_and_interrupt_ticks():
    cpus = schedstat.parse_proc_stat(PROC_STAT)
    assert set(cpus) == {0, 1}
    assert cpus[0] == CpuTicks(idle=148009 + 480, steal=129, irq=3771)
    assert cpus[1] == CpuTicks(idle=124526 + 2521, steal=182, irq=7 + 4074)


def test_schedstat_status_and_children_lines():
    assert schedstat.parse_schedstat("347602551 184128 47\n") == (347602551, 184128)
    assert schedstat.parse_involuntary_switches(STATUS) == 68
    assert schedstat.parse_involuntary_switches("Name:\tx\n") == 0
    assert procfs.parse_children("12 345 6789 ") == [12, 345, 6789]
    assert procfs.parse_children("") == []


def _sample(
    t_s,
    server_run_s,
    loadgen_run_s,
    own_run_s,
    idle_s,
    steal_s=0.0,
    irq_s=0.0,
    server_wait_s=0.0,
    loadgen_wait_s=0.0,
    switches=(0, 0),
):
    ns = lambda s: int(round(s * 1e9))  # noqa: E731
    ticks = lambda s: int(round(s * USER_HZ))  # noqa: E731
    return NoiseSample(
        ns(t_s),
        (ns(server_run_s), ns(server_wait_s), switches[0]),
        (ns(loadgen_run_s), ns(loadgen_wait_s), switches[1]),
        ns(own_run_s),
        CpuTicks(idle=ticks(idle_s), steal=ticks(steal_s), irq=ticks(irq_s)),
    )


def test_readings_split_the_cpus_time_into_ours_and_foreign():
    """2 CPUs for 2 s = 4 CPU-seconds: 1 s idle, 0.1 s stolen, 0.2 s in interrupts leaves
    2.7 s of tasks; ours ran 1.3 s, so others ran 1.4 s: 70% of one CPU."""
    a = _sample(10.0, 5.0, 3.0, 1.0, 100.0, 1.0, 1.0)
    b = _sample(
        12.0,
        5.8,
        3.4,
        1.1,
        101.0,
        1.1,
        1.2,
        server_wait_s=0.2,
        loadgen_wait_s=0.04,
        switches=(30, 10),
    )
    row = noise.readings(a, b, requests=1000, window_s=2.0, cpus={0, 1})
    assert row["noise_foreign_cpu_pct"] == pytest.approx(70.0, abs=0.5)
    assert row["noise_steal_pct"] == pytest.approx(2.5, abs=0.1)
    assert row["noise_server_runqueue_wait_ms_per_s"] == pytest.approx(100.0)
    assert row["noise_loadgen_runqueue_wait_ms_per_s"] == pytest.approx(20.0)
    assert row["noise_runqueue_wait_us_per_request"] == pytest.approx(240.0)  # 240 ms / 1000
    assert row["noise_server_involuntary_switches_per_s"] == 15
    assert row["noise_loadgen_involuntary_switches_per_s"] == 5
    assert row["noise_cpus"] == "0,1"
    assert all(math.isfinite(v) for k, v in row.items() if k not in noise.OPTIONAL)
    assert math.isnan(row["noise_loadgen_cpu_others_pct"])  # no CPUs of its own: not read


def test_others_on_the_load_generators_own_cpu_are_its_busy_time_less_the_generator():
    """CPU 1 is the load generator's: over 2 s it was idle 0.3 s, in interrupts 0.1 s; the
    generator ran 1.4 s, so others ran 0.2 s there: 10% of one CPU."""
    a, b = _sample(10.0, 0, 3.0, 0, 0), _sample(12.0, 0, 4.4, 0, 0)
    a = dataclasses.replace(
        a, loadgen_cpus=CpuTicks(idle=1000, steal=5, irq=50), loadgen_cpu_count=1
    )
    b = dataclasses.replace(
        b, loadgen_cpus=CpuTicks(idle=1030, steal=5, irq=60), loadgen_cpu_count=1
    )
    row = noise.readings(a, b, requests=10, window_s=2.0, cpus={0, 1})
    assert row["noise_loadgen_cpu_others_pct"] == pytest.approx(10.0)


def test_foreign_time_is_never_negative():
    """Tick sampling can put our run time above the CPUs' busy time: that reads 0, not < 0."""
    a = _sample(0.0, 0.0, 0.0, 0.0, 0.0)
    b = _sample(1.0, 0.9, 0.9, 0.1, 0.5)
    assert noise.readings(a, b, 10, 1.0, {0, 1})["noise_foreign_cpu_pct"] == 0.0


def test_window_samples_bracket_the_measured_window():
    samples = [_sample(t, 0, 0, 0, 0) for t in (0.0, 0.25, 0.5, 0.75, 1.0, 1.25)]
    first, last = noise.window_samples(samples, int(0.3e9), int(0.9e9))
    assert (first.t_ns, last.t_ns) == (int(0.25e9), int(1.0e9))
    first, last = noise.window_samples(samples, -5, int(9e9))  # sampling began late
    assert (first.t_ns, last.t_ns) == (0, int(1.25e9))
    assert noise.window_samples(samples[:1], 0, 1) is None


QUIET = {
    "noise_steal_pct": 0.1,
    "noise_foreign_cpu_pct": 1.5,
    "noise_server_runqueue_wait_ms_per_s": 300.0,  # the server waiting for itself
    "noise_loadgen_runqueue_wait_ms_per_s": 12.0,
    "noise_runqueue_wait_us_per_request": 5.0,
    "noise_server_involuntary_switches_per_s": 900.0,
    "noise_loadgen_involuntary_switches_per_s": 9.0,
    "noise_cpus": "0,1",
}


def test_a_quiet_host_reads_quiet_even_when_the_server_waits_for_itself():
    assert noise.noise_reasons(QUIET, loadgen_has_own_cpus=True) == []


@pytest.mark.parametrize(
    "column, value, words",
    [
        ("noise_steal_pct", 7.5, "CPU steal 7.5%"),
        ("noise_foreign_cpu_pct", 48.0, "other processes used 48% of a CPU on CPUs 0,1"),
        ("noise_loadgen_runqueue_wait_ms_per_s", 230.0, "load generator waited 230 ms/s"),
    ],
)
def test_each_noise_reading_past_its_threshold_is_a_reason(column, value, words):
    reasons = noise.noise_reasons({**QUIET, column: value}, loadgen_has_own_cpus=True)
    assert len(reasons) == 1 and words in reasons[0]


def test_on_many_watched_cpus_the_foreign_limit_is_a_share_of_them():
    """An unpinned trial on a 64-CPU host watches all 64: one busy CPU elsewhere is 1.6% of
    them, not noise; 4 busy CPUs (6%) is."""
    many = {**QUIET, "noise_cpus": ",".join(map(str, range(64)))}
    assert noise.noise_reasons({**many, "noise_foreign_cpu_pct": 100.0}, True) == []
    [reason] = noise.noise_reasons({**many, "noise_foreign_cpu_pct": 400.0}, True)
    assert "(> 320%)" in reason


def test_the_load_generator_waiting_for_itself_is_not_noise():
    """At its maximum closed-loop rate the event loop and the writer thread share one CPU: a
    C epoll trial at 107k req/s on an idle host waited 58 ms/s with others at 1% of the CPU.
    Only the wait others could have caused (at most the time they ran there) is judged: perfctl
    itself at 23% of the CPU (a /proc/net/tcp poll) made the load generator wait 90 ms/s."""
    itself = {
        **QUIET,
        "noise_loadgen_runqueue_wait_ms_per_s": 58.0,
        "noise_loadgen_cpu_others_pct": 1.0,
    }
    assert noise.noise_reasons(itself, loadgen_has_own_cpus=True) == []
    crowded = {
        **itself,
        "noise_loadgen_runqueue_wait_ms_per_s": 90.0,
        "noise_loadgen_cpu_others_pct": 23.0,
    }
    [reason] = noise.noise_reasons(crowded, loadgen_has_own_cpus=True)
    assert reason == (
        "load generator waited 90 ms/s for its own CPU while others ran 230 ms/s there (> 50 ms/s)"
    )
    # others ran 49 ms/s there: at most that much of the wait can be theirs, under the limit
    assert noise.noise_reasons({**crowded, "noise_loadgen_cpu_others_pct": 4.9}, True) == []
    # not measured (a row from before the column): the whole wait is judged, as it was
    unknown = {**itself, "noise_loadgen_cpu_others_pct": math.nan}
    assert "waited 58 ms/s for its own CPU (> 50" in noise.noise_reasons(unknown, True)[0]


def test_load_generator_wait_is_judged_only_when_it_has_cpus_of_its_own():
    row = {**QUIET, "noise_loadgen_runqueue_wait_ms_per_s": 230.0}
    assert noise.noise_reasons(row, loadgen_has_own_cpus=False) == []


def test_unmeasured_noise_is_not_quiet():
    assert noise.noise_reasons(noise.not_measured(), True) == ["host noise not measured"]


def test_the_readers_work_on_this_machine():
    cpus = schedstat.read_cpu_ticks()
    assert cpus and all(t.idle >= 0 for t in cpus.values())
    import os

    threads = schedstat.read_threads(os.getpid())
    assert os.getpid() in threads and threads[os.getpid()][0] > 0
    assert schedstat.read_threads(2**22 + 12345) == {}


def test_the_process_stat_parser_counts_past_a_comm_with_spaces_and_parentheses():
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    text = "4242 (java (x) y) S 1 4242 4242 0 -1 4194560 10 0 0 0 150 25 3 4 20 0 9 0 77\n"
    assert schedstat.parse_process_cpu_ticks(text) == 175
    assert schedstat.read_process_cpu_ns(os.getpid()) > 0
    assert schedstat.read_process_cpu_ns(2**22 + 12345) is None


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_threads_that_start_and_end_between_samples_still_count_as_the_process_s():
    """A thread-per-request server's threads live a few ms, between two samples: counted by
    thread alone, their CPU time was nobody's, so perfctl read it as other processes' and
    called quiet trials of the seed's thread-per-request server noisy (CI: 'other processes
    used 90% of a CPU'). Here 40 threads spin 5 ms of CPU each, one after another, between
    two samples of this process: the 200 ms are counted (to the tick, 10 ms)."""
    import threading

    totals = noise.ThreadTotals()
    totals.update([os.getpid()])
    before = totals.totals()[0]
    for _ in range(40):
        t = threading.Thread(target=_spin, args=(0.005,))
        t.start()
        t.join()
    totals.update([os.getpid()])
    counted_ms = (totals.totals()[0] - before) / 1e6
    assert counted_ms >= 200 - 2 * 1000 / USER_HZ, counted_ms
    # and no thread is counted twice: a thread seen, then ended, is not also unseen
    cpu_ms = schedstat.read_process_cpu_ns(os.getpid()) / 1e6
    assert totals.totals()[0] / 1e6 <= cpu_ms + 2 * 1000 / USER_HZ + 1


@pytest.mark.needs_quiet
def test_a_local_cluster_counts_the_whole_run_tree_as_ours(tmp_path):
    """cluster/local.py sets PERFCTL_RUN_ROOT: a probe in a worker (a grandchild here) counts a
    sibling's busy loop (another "host's" load generator on this machine) as ours, not foreign;
    a value naming a process that is not above the probe is ignored. The sibling's CPU time
    over the probe's window is read beside it (psutil), so the bar is what it really ran: on
    a busy host it gets less of a CPU.

    Needs quiet: the sibling running at least 60 ms of the probe's 0.6 s window (else ours and
    foreign are too close to tell); measured again (quiet_kit), then the test fails."""
    import subprocess
    import sys

    code = (
        "import os, sys, time, psutil; from orchestrator.measure import noise\n"
        "spin = psutil.Process(int(sys.argv[1]))\n"
        "p = noise.NoiseProbe({0}); s0 = sum(spin.cpu_times()[:2]); a = p.sample(0, [], [])\n"
        "time.sleep(0.6); b = p.sample(1, [], []); s1 = sum(spin.cpu_times()[:2])\n"
        "print(p.root == int(os.environ.get('PERFCTL_RUN_ROOT', '0')), "
        "(b.own_run_ns - a.own_run_ns) / 1e9, s1 - s0)\n"
    )
    spin = subprocess.Popen(
        [sys.executable, "-c", "import time\nt = time.time() + 15\nwhile time.time() < t: pass"]
    )
    try:
        env = {**os.environ, noise.RUN_ROOT_ENV: str(os.getpid())}
        out = quiet_kit.until_quiet(
            lambda attempt: subprocess.run(
                [sys.executable, "-c", code, str(spin.pid)],
                env=env,
                capture_output=True,
                text=True,
                cwd=ROOT,
                timeout=30,
                check=True,
            ).stdout.split(),
            # the sibling must have run a tenth of the window to tell
            lambda out: None if float(out[2]) >= 0.06 else f"the sibling ran {out[2]} s",
            "a sibling running 60 ms of the 0.6 s window",
        )
        # the sibling's CPU is ours: all it ran in the window, give or take the sampling edges
        assert out[0] == "True" and float(out[1]) >= 0.8 * float(out[2]), out
        env[noise.RUN_ROOT_ENV] = str(spin.pid)  # alive, but not an ancestor
        out = subprocess.run(
            [sys.executable, "-c", code, str(spin.pid)],
            env=env,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=30,
            check=True,
        ).stdout.split()
        assert out[0] == "False" and float(out[1]) < 0.2, out
    finally:
        spin.kill()
        spin.wait()


@pytest.mark.needs_quiet
@pytest.mark.usefixtures("live")
def test_others_on_the_load_generators_cpu_are_read_from_this_machine():
    """A process busy on the load generator's CPU is time others ran there; the generator's
    own busy threads are not. What the host's other processes ran there meanwhile counts as
    others too: the generator's reading may be what its own spinner left to them (100% less
    the spinner's measured share) and 15%, or 30% on an idle host; counted wrongly, the
    spinner's own time would make it ~100%.

    Needs quiet: the generator's spinner getting at least 35% of its CPU (else the right and
    the wrong reading are too close to tell apart); measured again (quiet_kit), then the test
    fails with the readings."""
    import subprocess
    import sys

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs 2 CPUs")
    lg = cpus[-1]
    busy = "import time\nt = time.time() + 10\nwhile time.time() < t: pass"
    probe = noise.NoiseProbe(set(cpus), loadgen_cpus={lg})

    def others_pct(as_loadgen: bool) -> tuple[float, float]:
        """The column over 1.5 s of a busy process on the load generator's CPU, sampled while
        it runs (as the trial's sampler does), and the share of a CPU the spinner got."""
        import time

        import psutil

        spin = subprocess.Popen(["taskset", "-c", str(lg), sys.executable, "-c", busy])
        try:
            pids = [spin.pid] if as_loadgen else []
            cpu_a = sum(psutil.Process(spin.pid).cpu_times()[:2])
            a = probe.sample(time.perf_counter_ns(), [], pids)
            time.sleep(1.5)  # the measured window
            b = probe.sample(time.perf_counter_ns(), [], pids)
            spin_pct = 100 * (sum(psutil.Process(spin.pid).cpu_times()[:2]) - cpu_a) / 1.5
        finally:
            spin.kill()
            spin.wait()
        assert (a.loadgen_cpu_count, b.loadgen_cpu_count) == (1, 1)
        row = noise.readings(a, b, requests=1, window_s=1.5, cpus=set(cpus))
        return row["noise_loadgen_cpu_others_pct"], spin_pct

    stranger, _ = others_pct(as_loadgen=False)
    assert stranger > 50.0  # a stranger spun there for ~1.5 s
    own, spin_pct = quiet_kit.until_quiet(
        lambda attempt: others_pct(as_loadgen=True),  # the load generator itself spinning
        lambda r: None if r[1] >= 35.0 else f"the spinner got {r[1]:.0f}% (others {r[0]:.0f}%)",
        "a spinner getting 35% of its CPU",
    )
    assert own < max(30.0, 100.0 - spin_pct + 15.0), (own, spin_pct)


def test_load_generator_wait_is_judged_only_when_nothing_of_the_trial_shares_its_cpu(write_yaml):
    """The wait rule's premise (nothing of the trial competes for the load generator's CPU)
    holds for the HTTP generator pinned apart from the server; not for a driver whose own
    threads queue behind each other (rmi), nor beside an unpinned service (PostgreSQL)."""
    from orchestrator import experiment
    from orchestrator.run.trial import _watched_cpus

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs for a split placement")
    text = (
        "name: w\nservers: {j: {impl: java, model: SERVER}}\n"
        "load: {driver: DRIVER, mode: closed, connections: 4, duration: 1s}\n"
        "placement: {server_cpus: [0], loadgen_cpus: [1]}\n"
    )
    http = experiment.load_plan(
        write_yaml(text.replace("DRIVER", "http").replace("SERVER", "pool"), "h.yaml")
    ).cells[0]
    rmi = experiment.load_plan(
        write_yaml(text.replace("DRIVER", "rmi").replace("SERVER", "rmi"), "r.yaml")
    ).cells[0]
    assert _watched_cpus(http, (1,)) == ({0, 1}, True)
    assert _watched_cpus(http, (1,), services_running=True) == ({0, 1}, False)
    assert _watched_cpus(rmi, (1,)) == ({0, 1}, False)


def test_cpu_columns_average_the_measured_window_not_the_start_up_and_drain():
    """server_cpu_pct and service_NAME_cpu_pct: the mean of the samples inside the measured
    window (a PostgreSQL idle through the load generator's start-up and drain read low)."""
    from orchestrator.measure.sampler import ResourceSampler

    s = ResourceSampler(os.getpid(), services={"db": os.getpid()}, interval_s=0.25)
    step = 250_000_000
    cpu = [0, 5, 5, 80, 90, 100, 90, 5, 0]  # idle, start-up, load (3-6), drain
    s.samples = [(i * 0.25, c, 100.0 + i, 4) for i, c in enumerate(cpu)]
    s.sample_ns = [10**12 + i * step for i in range(len(cpu))]
    s.service_samples["db"] = [(i * 0.25, c / 2, 50.0, 0) for i, c in enumerate(cpu)]
    window = (10**12 + 2 * step, 10**12 + 6 * step)  # samples 3..6 cover it
    out = s.summary(window)
    assert out["server_cpu_pct"] == pytest.approx((80 + 90 + 100 + 90) / 4)
    assert out["service_db_cpu_pct"] == pytest.approx((80 + 90 + 100 + 90) / 8)
    assert out["server_rss_mb"] == 108.0  # the peak of the whole trial
    assert s.summary()["server_cpu_pct"] == pytest.approx(sum(cpu[1:]) / 8)


@pytest.mark.usefixtures("live")
def test_the_walk_of_our_tree_stops_at_the_trials_trees():
    """descendants(prune=...) lists a pruned process but not what is below it: the noise
    probe's walk of perfctl's tree skips the server's (a 200-thread JVM is 200 reads a walk)."""
    import subprocess

    sh = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 10
        while len(procfs.descendants(sh.pid) or []) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)  # until sh has started both
        below = procfs.descendants(sh.pid)
        assert len(below) == 2, below
        everything = procfs.descendants(os.getpid())
        assert sh.pid in everything and set(below) <= set(everything)
        pruned = procfs.descendants(os.getpid(), prune={sh.pid})
        assert sh.pid in pruned and not set(below) & set(pruned)
        assert procfs.descendants(sh.pid, prune={sh.pid}) == below  # the root is walked
    finally:
        for p in procfs.descendants(sh.pid) or []:
            os.kill(p, 9)
        sh.kill()
        sh.wait()
