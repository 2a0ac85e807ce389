package perfctl.driver;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The RMI driver's parts, one at a time, for tests/servers_java/test_java_rmi_driver.py (which
 * compiles this against the driver's classes; it is in the driver's package to reach them).
 *
 *   histogram             ns values on stdin, one a line -> "p50 p99 max count"
 *   is-pause NAME...      each collector bean name -> "NAME=true|false"
 *   rows DIR PRODUCERS    writes known rows through a RowWriter into DIR, prints its summary keys
 *   bounded DIR PRODUCERS takes blocks until block() would wait; prints how many it got
 *   mix SPEC N            requests 0..N-1 of the spec's Mix -> "INDEX METHOD TARGET BODY" a line
 */
public final class DriverUnits {
    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "histogram": histogram(); break;
            case "is-pause":
                for (int i = 1; i < args.length; i++) {
                    System.out.println(args[i] + "=" + SelfChecks.isPause(args[i]));
                }
                break;
            case "rows": rows(Paths.get(args[1]), Integer.parseInt(args[2])); break;
            case "bounded": bounded(Paths.get(args[1]), Integer.parseInt(args[2])); break;
            case "mix":
                Mix mix = new Spec(Paths.get(args[1])).mix;
                for (long n = 0; n < Long.parseLong(args[2]); n++) {
                    Mix.Request r = mix.request(n);
                    System.out.println(r.index + " " + r.method + " " + r.target + " "
                            + new String(r.body, StandardCharsets.ISO_8859_1));
                }
                break;
            default: throw new IllegalArgumentException(args[0]);
        }
    }

    private static void histogram() throws Exception {
        Histogram h = new Histogram();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        for (String line; (line = in.readLine()) != null; ) {
            if (!line.isBlank()) {
                h.record(Long.parseLong(line.strip()));
            }
        }
        System.out.println(h.percentile(50) + " " + h.percentile(99) + " " + h.max() + " " + h.count());
    }

    /** Rows through every path: answered (ms columns from ns, none, negative), failed, ended
     *  out of order by other threads, sealed before or after their last row ends, and left open
     *  for finish() to close out. Row k's intended_ns is k + 1, so the test can find each. */
    private static void rows(Path dir, int producers) throws Exception {
        RowWriter w = new RowWriter(dir, producers);
        w.prepare(2);
        long k = 1;
        // 1: three full blocks and a part, answered in order by the producer
        Rows b = w.block();
        for (int n = 0; n < 3 * b.capacity() + 5; n++) {
            if (b.full()) {
                b.seal();
                b = w.block();
            }
            int i = b.add(k++);
            b.sent[i] = 10;
            b.firstByte[i] = 11;
            b.done[i] = 12;
            b.status[i] = 200;
            b.bytes[i] = 3;
            b.conn[i] = 7;
            b.svcNs[i] = 1_234_567L;           // 1.234567 ms
            b.queueNs[i] = n % 2 == 0 ? Rows.NONE : 5L;   // empty, or 0.000005 ms
            b.dbNs[i] = -2_500_000L;           // -2.500000 ms
            b.end(i);
        }
        b.seal();
        // 2: ended by other threads after the block is sealed (open load), one failure
        Rows o = w.block();
        List<Integer> idx = new ArrayList<>();
        for (int n = 0; n < 100; n++) {
            idx.add(o.add(k++));
        }
        o.seal();
        List<Thread> ts = new ArrayList<>();
        for (int t = 0; t < 4; t++) {
            int from = t;
            Rows rows = o;
            ts.add(new Thread(() -> {
                for (int j = from; j < idx.size(); j += 4) {
                    int i = idx.get(j);
                    if (i == 50) {
                        rows.fail(i, Rows.DROPPED, 99);
                    } else {
                        rows.sent[i] = 20;
                        rows.done[i] = 21;
                        rows.status[i] = 503;
                        rows.end(i);
                    }
                }
            }));
        }
        ts.forEach(Thread::start);
        for (Thread t : ts) {
            t.join();
        }
        // 3: left open: one sent long ago (timeout), one never sent (unfinished), one answered
        Rows open = w.block();
        int late = open.add(k++);
        open.sent[late] = 1;
        open.add(k++);
        int ok = open.add(k++);
        open.sent[ok] = 30;
        open.done[ok] = 31;
        open.status[ok] = 200;
        open.end(ok);
        long closedOut = w.finish(10_000_000_000L, 5_000_000_000L);
        Map<String, Object> s = new TreeMap<>();
        w.into(s);
        s.put("closed_out", closedOut);
        s.put("rows", w.rows());
        s.put("rows_added", k - 1);
        s.forEach((key, v) -> System.out.println(key + "=" + v));
    }

    private static void bounded(Path dir, int producers) throws Exception {
        RowWriter w = new RowWriter(dir, producers);
        List<Rows> taken = new ArrayList<>();
        Thread taker = new Thread(() -> {
            while (true) {
                Rows r = w.block();     // never sealed: none is written or comes back
                synchronized (taken) {
                    taken.add(r);
                }
            }
        });
        taker.setDaemon(true);
        taker.start();
        while (taker.getState() != Thread.State.WAITING) {   // only block() waits
            Thread.sleep(1);
        }
        int last;
        synchronized (taken) {
            last = taken.size();
        }
        System.out.println("taken=" + last);
        System.out.println("state=" + taker.getState());
        Map<String, Object> s = new TreeMap<>();
        w.into(s);
        s.forEach((key, v) -> System.out.println(key + "=" + v));
        System.exit(0);
    }
}
