"""A load driver that sends every open-load arrival LATE_US late (loadgen/DRIVER.md), in plain
Python with no perfctl imports: a client whose timer is that coarse. It honours the contract
otherwise (the schedule perfctl hands over, every row, honest self-checks), so a trial it
drives shows what a known send lateness does to the figures.

`python late_driver.py LATE_US SPEC OUT`: each arrival at start + offset[k] is sent, on a
new connection by one of WORKERS threads started beforehand (starting a thread per arrival
made the next send wait for it to start: milliseconds on a busy host), once
start + offset[k] + LATE_US has passed (slept to within SPIN_S, then spun), and recorded with
intended_ns = start + offset[k].
"""

import csv
import gc
import http.client
import json
import os
import queue
import resource
import sys
import threading
import time
from array import array

WORKERS = 16
SPIN_S = 0.001  # sleep to within this of each send, then spin (a spinning thread is preempted)


def main(late_us: str, spec_path: str, out: str) -> int:
    spec = json.load(open(spec_path))
    if spec["mode"] != "open":
        print("late driver: open mode only", file=sys.stderr)
        return 2
    offsets = array("q")
    with open(os.path.join(os.path.dirname(spec_path), spec["schedule_file"]), "rb") as f:
        offsets.frombytes(f.read())
    if sys.byteorder != "little":
        offsets.byteswap()
    late_ns = int(float(late_us) * 1000)
    start = time.perf_counter_ns() + 50_000_000
    measure_start = start + int(spec["warmup_s"] * 1e9)
    end = measure_start + int(spec["duration_s"] * 1e9)
    rows, lock, lateness = [], threading.Lock(), []
    todo: queue.SimpleQueue = queue.SimpleQueue()

    def worker() -> None:
        while (job := todo.get()) is not None:
            exchange(*job)

    def exchange(intended: int, sent: int) -> None:
        conn = http.client.HTTPConnection(spec["host"], spec["port"], timeout=spec["timeout_s"])
        try:
            conn.request(spec["method"], spec["target"], headers={"Connection": "close"})
            resp = conn.getresponse()
            first = time.perf_counter_ns()
            body = resp.read()
            row = [intended, sent, first, time.perf_counter_ns(), resp.status, 0, len(body)]
        except OSError:
            row = [intended, sent, 0, time.perf_counter_ns(), 0, 2, 0]
        finally:
            conn.close()
        with lock:
            rows.append(row)

    threads = [threading.Thread(target=worker) for _ in range(WORKERS)]
    for t in threads:
        t.start()
    ru0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for off in offsets:
        intended = start + off
        due = intended + late_ns
        wait_s = (due - time.perf_counter_ns()) / 1e9 - SPIN_S
        if wait_s > 0:
            time.sleep(wait_s)
        while time.perf_counter_ns() < due:
            pass
        sent = time.perf_counter_ns()
        if measure_start <= intended < end:
            lateness.append((sent - intended) / 1e6)
        todo.put((intended, sent))
    for _ in threads:
        todo.put(None)
    for t in threads:
        t.join()
    ru1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - wall0
    with open(os.path.join(out, "requests.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            ["intended_ns", "sent_ns", "first_byte_ns", "done_ns", "status", "error", "bytes"]
        )
        w.writerows(rows)
    lateness.sort()

    def q(p: float) -> float:
        return lateness[min(len(lateness) - 1, int(p * len(lateness)))] if lateness else 0.0

    summary = {
        "start_ns": start,
        "measure_start_ns": measure_start,
        "measure_end_ns": end,
        "requests_recorded": len(rows),
        "loadgen_cpu_pct": 100 * (ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime) / wall,
        "loop_lag_p99_ms": 0.0,  # no event loop: every send is timed above
        "gc_pause_max_ms": 0.0,
        "scheduled_in_window": sum(1 for o in offsets if measure_start <= start + o < end),
        "dropped": 0,
        "send_lateness_p50_ms": q(0.50),
        "send_lateness_p99_ms": q(0.99),
        "send_lateness_max_ms": lateness[-1] if lateness else 0.0,
    }
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f)
    return 0


if __name__ == "__main__":
    gc.disable()  # a short run: no collector pauses to report
    sys.setswitchinterval(5e-5)  # the sending thread waits at most this long for the GIL
    sys.exit(main(*sys.argv[1:]))
