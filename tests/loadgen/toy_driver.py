"""A toy load driver for the contract suite (loadgen/DRIVER.md): closed load, one blocking
HTTP/1.1 connection, written in plain Python with no perfctl imports, as an outsider would.

`python toy_driver.py HOW SPEC OUT`: HOW = good writes honest output (requests.csv and
summary.json); every other HOW breaks the contract in one way, on purpose:
exit (exits 1 after a message), no-column (no done_ns column), malformed (a time that is
not a number), no-summary (no summary.json), short (fewer rows than summary.json says),
no-self-checks (summary.json without the self-check keys), garbage (random bytes in
requests.parquet and no summary.json).
"""

import csv
import gc
import http.client
import json
import os
import resource
import sys
import time

HOW = (
    "good",
    "exit",
    "no-column",
    "malformed",
    "no-summary",
    "short",
    "no-self-checks",
    "garbage",
)


def main(how: str, spec_path: str, out: str) -> int:
    if how not in HOW:
        print(f"toy driver: HOW must be one of {HOW}", file=sys.stderr)
        return 2
    if how == "exit":
        print("toy driver: giving up on purpose", file=sys.stderr)
        return 1
    if how == "garbage":
        with open(os.path.join(out, "requests.parquet"), "wb") as f:
            f.write(os.urandom(4096))
        return 0
    spec = json.load(open(spec_path))
    if spec["mode"] != "closed":
        print("toy driver: closed mode only", file=sys.stderr)
        return 2
    start = time.perf_counter_ns() + 20_000_000
    measure_start = start + int(spec["warmup_s"] * 1e9)
    end = measure_start + int(spec["duration_s"] * 1e9)
    conn = http.client.HTTPConnection(spec["host"], spec["port"], timeout=spec["timeout_s"])
    rows, lags, gc_ms, gc_t0 = [], [], [0.0], [0.0]

    def on_gc(phase, info):  # the longest pause of Python's cyclic collector
        if phase == "start":
            gc_t0[0] = time.perf_counter()
        else:
            gc_ms[0] = max(gc_ms[0], (time.perf_counter() - gc_t0[0]) * 1e3)

    gc.callbacks.append(on_gc)
    ru0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    while time.perf_counter_ns() < start:
        pass
    intended = start
    while intended < end and len(rows) < spec["max_requests"]:
        sent = time.perf_counter_ns()
        try:
            conn.request(spec["method"], spec["target"])
            resp = conn.getresponse()
            first = time.perf_counter_ns()
            body = resp.read()
            rows.append([intended, sent, first, time.perf_counter_ns(), resp.status, 0, len(body)])
        except OSError:
            rows.append([intended, sent, 0, time.perf_counter_ns(), 0, 2, 0])
            conn.close()
        wake = time.perf_counter_ns() + 5_000_000  # a 5 ms pause, and how late it ends
        time.sleep(0.005)
        now = time.perf_counter_ns()
        lags.append((now - wake) / 1e6)
        intended = now
    ru1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - wall0
    columns = ["intended_ns", "sent_ns", "first_byte_ns", "done_ns", "status", "error", "bytes"]
    if how == "no-column":
        columns.remove("done_ns")
        rows = [r[:3] + r[4:] for r in rows]
    if how == "malformed":
        rows[len(rows) // 2][0] = "soon"
    with open(os.path.join(out, "requests.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        w.writerows(rows[:-1] if how == "short" else rows)
    lags.sort()
    summary = {
        "start_ns": start,
        "measure_start_ns": measure_start,
        "measure_end_ns": end,
        "requests_recorded": len(rows),
        "loadgen_cpu_pct": 100 * (ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime) / wall,
        "loop_lag_p99_ms": lags[int(0.99 * (len(lags) - 1))] if lags else 0.0,
        "gc_pause_max_ms": gc_ms[0],
    }
    if how == "no-self-checks":
        for k in ("loadgen_cpu_pct", "loop_lag_p99_ms", "gc_pause_max_ms"):
            del summary[k]
    if how != "no-summary":
        with open(os.path.join(out, "summary.json"), "w") as f:
            json.dump(summary, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
