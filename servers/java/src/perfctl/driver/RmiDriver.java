package perfctl.driver;

import java.io.IOException;
import java.nio.LongBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.lang.management.CompilationMXBean;
import java.lang.management.ManagementFactory;

/**
 * `java perfctl.driver.RmiDriver SPEC OUT`: perfctl's bundled Java RMI load driver
 * (loadgen/DRIVER.md). One JVM, platform threads: closed load is `connections` client threads,
 * open load a dispatcher on perfctl's schedule feeding a pool of `connections` client threads,
 * burst load `connections` threads released together per burst, each a new client. Streams
 * requests.csv into OUT as rows finish (RowWriter: memory flat whatever the phase's length),
 * then writes summary.json. Exit 0 when written, 2 on a bad spec, 3 when OUT cannot be written.
 */
public final class RmiDriver {
    private static final long START_DELAY_NS = 50_000_000L;
    private static final long SPIN_NS = 200_000L;    // closer than this to an instant: spin, not park
    private static final long GRACE_NS = 2_000_000_000L;

    private final Spec spec;
    private final SelfChecks checks = new SelfChecks();
    private final AtomicLong seq = new AtomicLong();
    private final RowWriter rows;
    private final Path out;
    private final Map<String, Object> summary = new java.util.LinkedHashMap<>();
    private long startNs;
    private long measureStartNs;
    private long endNs;

    private RmiDriver(Spec spec, RowWriter rows, Path out) {
        this.spec = spec;
        this.rows = rows;
        this.out = out;
    }

    public static void main(String[] args) {
        if (args.length != 2) {
            System.err.println("usage: java perfctl.driver.RmiDriver SPEC.json OUT_DIR");
            System.exit(2);
        }
        Spec spec;
        LongBuffer schedule = null;
        try {
            spec = new Spec(Paths.get(args[0]));
            if (spec.mode.equals("open")) {
                schedule = spec.schedule();
            } else if (!spec.mode.equals("closed") && !spec.mode.equals("burst")) {
                throw new IllegalArgumentException("the rmi driver has no " + spec.mode + " mode (closed, open, burst)");
            }
        } catch (IOException | RuntimeException e) {
            System.err.println("rmi driver: bad spec " + args[0] + ": " + e.getMessage());
            System.exit(2);
            return;
        }
        int timeoutMs = (int) Math.max(1, Math.min(Integer.MAX_VALUE, spec.timeoutS * 1000));
        // before RMI's transport classes load: they read these once. The handshake on a new
        // connection (which waits while the server has not accepted it) and the answer are
        // both bounded by the spec's timeout, as every attempt must be.
        System.setProperty("sun.rmi.transport.tcp.handshakeTimeout", Integer.toString(timeoutMs));
        System.setProperty("sun.rmi.transport.tcp.responseTimeout", Integer.toString(timeoutMs));
        try {
            Class.forName("perfctl.driver.Client");   // fails here, not in every client thread
        } catch (ClassNotFoundException | ExceptionInInitializerError e) {
            System.err.println("rmi driver: cannot reach the JDK's RMI reference classes (run with "
                    + "--add-exports=java.rmi/sun.rmi.{server,transport,transport.tcp}=ALL-UNNAMED): " + e);
            System.exit(2);
        }
        Client.connectTimeoutMs = timeoutMs;
        Client.readTimeoutMs = timeoutMs;
        Client.timeoutNs = timeoutMs * 1_000_000L;
        Path out = Paths.get(args[1]);
        RmiDriver d;
        try {
            Files.createDirectories(out);
            d = new RmiDriver(spec, new RowWriter(out, spec.mode.equals("closed") ? spec.connections : 1), out);
        } catch (IOException e) {
            System.err.println("rmi driver: cannot write " + out + ": " + e);
            System.exit(3);
            return;
        }
        try {
            d.run(schedule);
            Path tmp = out.resolve("summary.json.tmp");
            Files.write(tmp, d.summaryJson().getBytes(StandardCharsets.UTF_8));
            Files.move(tmp, out.resolve("summary.json"), StandardCopyOption.REPLACE_EXISTING,
                    StandardCopyOption.ATOMIC_MOVE);
        } catch (IOException e) {
            System.err.println("rmi driver: cannot write " + out + ": " + e);
            System.exit(3);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            System.exit(1);
        }
        System.exit(0);
    }

    private void run(LongBuffer schedule) throws InterruptedException, IOException {
        // the row blocks the phase needs (closed: one per client and one waiting to be written;
        // open: the dispatcher's and a few held by slow answers), then one collection so that
        // they, and all else made so far, are old before the phase: young collections during
        // it then copy only the calls in flight (RowWriter)
        rows.prepare(spec.mode.equals("closed") ? 2 * spec.connections + 2
                : spec.mode.equals("open") ? spec.connections + 4 : 0);
        if (spec.warmupAutoMaxS > 0 && spec.startAtNs == 0) {
            prewarm();
        }
        System.gc();
        // burst: the first release's clients exist before the start instant is chosen
        Release first = spec.mode.equals("burst") ? new Release(0) : null;
        startNs = spec.startAtNs > 0 ? spec.startAtNs : System.nanoTime() + START_DELAY_NS;
        measureStartNs = startNs + (long) (spec.warmupS * 1e9);
        endNs = measureStartNs + (long) (spec.windowS() * 1e9);
        checks.start(measureStartNs);
        long cpu0 = SelfChecks.cpuNs();
        long wall0 = System.nanoTime();
        switch (spec.mode) {
            case "closed": closed(); break;
            case "open": open(schedule); break;
            default: burst(first); break;
        }
        double wall = System.nanoTime() - wall0;
        long cpu = SelfChecks.cpuNs() - cpu0;
        checks.stop();
        long closedOut = rows.finish(System.nanoTime(), (long) (spec.timeoutS * 1e9));
        summary.put("start_ns", startNs);
        summary.put("measure_start_ns", measureStartNs);
        summary.put("measure_end_ns", endNs);
        summary.put("loadgen_cpu_pct", wall > 0 ? 100.0 * cpu / wall : 0.0);
        summary.put("requests_recorded", rows.rows());
        summary.put("closed_out", closedOut);
        summary.put("driver", "rmi");
        summary.put("virtual_threads", Threads.virtual() ? 1 : 0);
        checks.into(summary, out);
        rows.into(summary);
    }

    // --- warmup: auto -------------------------------------------------------------------------
    private static final long WARM_SLICE_NS = 250_000_000L;
    private static final int WARM_SLICES = 4;          // steady over the last second
    private static final double WARM_JIT_SHARE = 0.03; // compile time: at most 3% of that second
    private static final double WARM_SPREAD = 0.15;    // calls per slice: max / min at most 1.15

    /** warmup: auto. Every client calls the server back to back, nothing recorded, until both
     *  this JVM's JIT and the server are steady: over the last WARM_SLICES slices this JVM's
     *  compiler took at most WARM_JIT_SHARE of the time (the CompilationMXBean's total) and the
     *  calls per slice varied by at most WARM_SPREAD (the server's own JIT shows there); at most
     *  warmup_auto_max_s. The phase, with its own short warm-up, starts after it (DRIVER.md). */
    private void prewarm() throws InterruptedException {
        CompilationMXBean jit = ManagementFactory.getCompilationMXBean();
        boolean timed = jit != null && jit.isCompilationTimeMonitoringSupported();
        AtomicBoolean stop = new AtomicBoolean();
        AtomicLong calls = new AtomicLong();
        AtomicLong warmSeq = new AtomicLong(1L << 40); // not the phase's request numbers
        List<Thread> threads = new ArrayList<>();
        for (int c = 0; c < spec.connections; c++) {
            int id = c;
            threads.add(daemon("warm-" + c, () -> {
                Client client = new Client(id, spec.host, spec.port);
                Rows scratch = new Rows(1, null); // reused: never sealed, never written
                while (!stop.get()) {
                    scratch.reset();
                    int i = scratch.add(System.nanoTime());
                    Mix.Request req = spec.mix.request(warmSeq.getAndIncrement());
                    Client one = spec.keepalive ? client : new Client(id, spec.host, spec.port);
                    one.attempt(scratch, i, req.method, req.target, req.body);
                    if (!spec.keepalive) {
                        one.close();
                    }
                    calls.incrementAndGet();
                }
                client.close();
            }));
        }
        long t0 = System.nanoTime();
        long jit0 = timed ? jit.getTotalCompilationTime() : 0;
        threads.forEach(Thread::start);
        List<long[]> slices = new ArrayList<>(); // {calls, compile ms} at each slice's end
        boolean steady = false;
        long maxNs = (long) (spec.warmupAutoMaxS * 1e9);
        while (System.nanoTime() - t0 < maxNs) {
            Thread.sleep(WARM_SLICE_NS / 1_000_000L);
            slices.add(new long[] {calls.get(), timed ? jit.getTotalCompilationTime() : 0});
            int k = slices.size();
            if (k > WARM_SLICES) {
                long[] a = slices.get(k - 1 - WARM_SLICES), b = slices.get(k - 1);
                double jitShare = (b[1] - a[1]) / (WARM_SLICES * WARM_SLICE_NS / 1e6);
                long lo = Long.MAX_VALUE, hi = 0;
                for (int j = k - WARM_SLICES; j < k; j++) {
                    long n = slices.get(j)[0] - slices.get(j - 1)[0];
                    lo = Math.min(lo, n);
                    hi = Math.max(hi, n);
                }
                if (jitShare <= WARM_JIT_SHARE && lo > 0 && hi <= (1 + WARM_SPREAD) * lo) {
                    steady = true;
                    break;
                }
            }
        }
        stop.set(true);
        joinUntil(threads, System.nanoTime() + attemptBoundNs() + GRACE_NS);
        summary.put("warmup_auto_s", (System.nanoTime() - t0) / 1e9);
        summary.put("warmup_auto_settled", steady);
        summary.put("warmup_auto_calls", calls.get());
        summary.put("warmup_auto_jit_compile_ms", timed ? jit.getTotalCompilationTime() - jit0 : -1);
    }

    // --- the request a client sends -----------------------------------------------------------
    /** The phase's next request (Mix: drawn and rendered from the seed and its number). */
    private Mix.Request next() {
        return spec.mix.request(seq.getAndIncrement());
    }

    private static void sleepUntil(long t) {
        long left;
        while ((left = t - System.nanoTime()) > SPIN_NS) {
            LockSupport.parkNanos(left - SPIN_NS);
        }
        while (System.nanoTime() - t < 0) {
            Thread.onSpinWait();
        }
    }

    /** The longest one attempt can block: its connect and the rest of it each get the timeout
     *  (connect, RMI handshake, answer: each bounded by it; Client records an answer later
     *  than the timeout as a timeout). */
    private long attemptBoundNs() {
        return 3 * (long) (spec.timeoutS * 1e9);
    }

    private Thread daemon(String name, Runnable r) {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        return t;
    }

    /** Wait for the threads to end, at most until `deadline`; true when they all ended. */
    private static boolean joinUntil(List<Thread> threads, long deadline) throws InterruptedException {
        for (Thread t : threads) {
            long left = deadline - System.nanoTime();
            if (left > 0) {
                TimeUnit.NANOSECONDS.timedJoin(t, left);
            }
        }
        return threads.stream().noneMatch(Thread::isAlive);
    }

    // --- closed: each client sends, waits, thinks, sends again ----------------------------------
    private void closed() throws InterruptedException {
        List<Thread> threads = new ArrayList<>();
        AtomicLong budget = new AtomicLong(spec.maxRequests);
        for (int c = 0; c < spec.connections; c++) {
            int id = c;
            threads.add(daemon("client-" + c, () -> {
                SplittableRandom rnd = new SplittableRandom(spec.seed * 1009 + id);
                Client client = new Client(id, spec.host, spec.port);
                Rows block = rows.block();
                long intended = startNs;
                sleepUntil(startNs);
                while (intended < endNs && budget.getAndDecrement() > 0) {
                    Mix.Request req = next();
                    if (block.full()) {
                        block.seal();
                        block = rows.block();
                    }
                    int i = block.add(intended);
                    block.request[i] = (short) req.index;
                    Client one = spec.keepalive ? client : new Client(id, spec.host, spec.port);
                    one.attempt(block, i, req.method, req.target, req.body);
                    if (!spec.keepalive) {
                        one.close();
                    }
                    long think = (long) (spec.thinkTimeS * 1e9 * (spec.thinkExp ? -Math.log(1 - rnd.nextDouble()) : 1));
                    intended = System.nanoTime() + think;
                    if (think > 0 && intended < endNs) {
                        sleepUntil(intended);
                    }
                }
                block.seal();
                client.close();
            }));
        }
        threads.forEach(Thread::start);
        joinUntil(threads, endNs + attemptBoundNs() + GRACE_NS);
        summary.putAll(Map.of("scheduled_in_window", 0, "dropped", 0, "send_lateness_p50_ms", 0.0,
                "send_lateness_p99_ms", 0.0, "send_lateness_max_ms", 0.0));
    }

    // --- open: arrivals on perfctl's schedule, a pool of clients --------------------------------
    /** An arrival handed to a client: row i of a block (rows null: the client stops). */
    private record Arrival(Rows rows, int i) {
    }

    private void open(LongBuffer offsets) throws InterruptedException {
        int n = (int) Math.min(offsets.limit(), spec.maxRequests);
        Histogram late = new Histogram();   // the window's arrivals: dispatched - intended
        BlockingQueue<Arrival> queue = new ArrayBlockingQueue<>(spec.maxOutstanding + spec.connections + 1);
        AtomicInteger outstanding = new AtomicInteger();
        List<Thread> pool = new ArrayList<>();
        for (int c = 0; c < spec.connections; c++) {
            int id = c;
            pool.add(daemon("client-" + c, () -> {
                Client client = new Client(id, spec.host, spec.port);
                try {
                    while (true) {
                        Arrival a = queue.take();
                        if (a.rows == null) {
                            break;
                        }
                        Mix.Request req = next();
                        a.rows.request[a.i] = (short) req.index;
                        Client one = spec.keepalive ? client : new Client(id, spec.host, spec.port);
                        one.attempt(a.rows, a.i, req.method, req.target, req.body);
                        if (!spec.keepalive) {
                            one.close();
                        }
                        outstanding.decrementAndGet();
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                client.close();
            }));
        }
        pool.forEach(Thread::start);
        int dropped = 0;
        Rows block = rows.block();
        for (int k = 0; k < n; k++) {
            long intended = startNs + offsets.get(k);
            sleepUntil(intended);
            long now = System.nanoTime();
            if (intended >= measureStartNs && intended < endNs) {
                late.record(now - intended);
            }
            if (block.full()) {
                block.seal();
                block = rows.block();
            }
            int i = block.add(intended);
            if (outstanding.get() >= spec.maxOutstanding) {
                block.fail(i, Rows.DROPPED, now);
                dropped++;
            } else {
                outstanding.incrementAndGet();
                queue.add(new Arrival(block, i));
            }
        }
        block.seal();
        sleepUntil(endNs);
        // arrived in the window, still waiting for a client: they take the clients freed while
        // the window drains, for the spec's timeout (as the HTTP generator's do); those still
        // waiting then are unfinished (ended here, before the clients stop: no client touches
        // them after)
        long drainUntil = endNs + (long) (spec.timeoutS * 1e9);
        while (!queue.isEmpty() && System.nanoTime() < drainUntil) {
            Thread.sleep(1);
        }
        List<Arrival> left = new ArrayList<>();
        queue.drainTo(left);
        long now = System.nanoTime();
        for (Arrival a : left) {
            a.rows.fail(a.i, Rows.UNFINISHED, now);
        }
        for (int c = 0; c < pool.size(); c++) {
            queue.add(new Arrival(null, -1));
        }
        joinUntil(pool, System.nanoTime() + attemptBoundNs() + GRACE_NS);
        summary.put("scheduled_in_window", late.count());
        summary.put("dropped", dropped);
        summary.put("send_lateness_p50_ms", late.percentile(50) / 1e6);
        summary.put("send_lateness_p99_ms", late.percentile(99) / 1e6);
        summary.put("send_lateness_max_ms", late.max() / 1e6);
        summary.put("send_lateness_p999_ms", late.percentile(99.9) / 1e6);
        summary.put("send_lateness_mean_ms", late.count() > 0 ? late.sum() / late.count() / 1e6 : 0.0);
    }

    // --- burst: `connections` new clients released together, one request each -------------------
    /** One release's clients: threads made and started, waiting on the latch. */
    private final class Release {
        final Rows block = rows.block(spec.connections);
        final CountDownLatch latch = new CountDownLatch(1);
        final List<Thread> threads = new ArrayList<>();
        final AtomicLong firstSentNs = new AtomicLong(Long.MAX_VALUE);
        final AtomicLong lastSentNs = new AtomicLong(Long.MIN_VALUE);

        Release(int b) {
            for (int c = 0; c < spec.connections; c++) {
                int i = block.add(0);
                int id = c;
                Mix.Request req = next(); // rendered before the release, not during it
                block.request[i] = (short) req.index;
                threads.add(Threads.client("burst-" + b + "-" + c, () -> {
                    try {
                        latch.await();
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        return;
                    }
                    Client one = new Client(id, spec.host, spec.port);
                    long sent = one.attempt(block, i, req.method, req.target, req.body);
                    firstSentNs.accumulateAndGet(sent, Math::min);
                    lastSentNs.accumulateAndGet(sent, Math::max);
                    one.close();
                }));
            }
            threads.forEach(Thread::start);
        }

        /** Release the clients now; every one of them is intended at this instant (set before
         *  any can end its row and so let the block be written). */
        void release() {
            long t = System.nanoTime();
            Arrays.fill(block.intended, 0, block.n, t);
            block.seal();
            latch.countDown();
        }

        /** First to last connect of this release, ms (0 when none was sent). */
        double spreadMs() {
            long lo = firstSentNs.get();
            long hi = lastSentNs.get();
            return hi >= lo ? (hi - lo) / 1e6 : 0.0;
        }
    }

    private void burst(Release first) throws InterruptedException {
        List<Thread> all = new ArrayList<>();
        List<Release> releases = new ArrayList<>();
        Release r = first;
        for (int b = 0; b < spec.bursts; b++) {
            if (r == null) {          // the next release's clients are made shortly before it
                r = new Release(b);
            }
            sleepUntil(measureStartNs + (long) (b * spec.burstIntervalS * 1e9));
            r.release();
            all.addAll(r.threads);
            releases.add(r);
            r = null;
            if (b + 1 < spec.bursts) {
                sleepUntil(measureStartNs + (long) ((b + 1) * spec.burstIntervalS * 1e9) - 200_000_000L);
            }
        }
        joinUntil(all, endNs + attemptBoundNs() + GRACE_NS);
        double spreadMax = 0;
        double spreadSum = 0;
        for (Release rel : releases) {
            spreadMax = Math.max(spreadMax, rel.spreadMs());
            spreadSum += rel.spreadMs();
        }
        summary.putAll(Map.of("scheduled_in_window", 0, "dropped", 0, "send_lateness_p50_ms", 0.0,
                "send_lateness_p99_ms", 0.0, "send_lateness_max_ms", 0.0));
        summary.put("release_spread_ms_max", spreadMax);
        summary.put("release_spread_ms_mean", releases.isEmpty() ? 0.0 : spreadSum / releases.size());
    }

    private String summaryJson() {
        StringBuilder b = new StringBuilder("{");
        for (Map.Entry<String, Object> e : summary.entrySet()) {
            if (b.length() > 1) {
                b.append(",\n ");
            }
            b.append('"').append(e.getKey()).append("\": ");
            Object v = e.getValue();
            if (v instanceof Double) {
                double d = (Double) v;
                b.append(Double.isFinite(d) ? String.format(Locale.ROOT, "%.6f", d) : "0.0");
            } else if (v instanceof Number || v instanceof Boolean) {
                b.append(v);
            } else {
                b.append('"').append(v).append('"');
            }
        }
        return b.append("}\n").toString();
    }
}
