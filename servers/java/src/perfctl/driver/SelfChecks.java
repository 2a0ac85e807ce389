package perfctl.driver;

import com.sun.management.GarbageCollectionNotificationInfo;
import java.lang.management.CompilationMXBean;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.lang.management.MemoryUsage;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.management.NotificationEmitter;
import javax.management.NotificationListener;
import javax.management.openmbean.CompositeData;

/**
 * The driver's own health (loadgen/DRIVER.md summary keys): how late a 10 ms ticker thread
 * wakes (`loop_lag_*`: the JVM or the host kept the driver's threads from running), the
 * garbage collector's pauses and the heap it leaves live, and the process's CPU time. Every
 * distribution is a Histogram, so these cost the same memory in a phase of any length.
 *
 * Lag and pauses are judged over the measured window and the drain after it (from
 * `windowStartNs` until stop()), the time whose requests perfctl reports; those of the warm-up
 * are kept apart (`warmup_*`). The warm-up is where a JVM compiles its hot code: on one pinned
 * core the JIT's compiler threads share the CPU for seconds after start-up (C2 compiled for
 * ~9 s of a 16 s phase at the maximum rate), and the ticker and the collector wait behind them
 * (lag of 10-35 ms in the first 7 s on a busy host, under 3 ms after).
 *
 * GC pauses: each collector's MXBean notifies the end of every collection with its duration
 * (whole ms). A stop-the-world collector's (Serial, Parallel, G1's young and full) are pauses;
 * the concurrent collectors report their pauses on a bean of their own ("ZGC Minor Pauses",
 * "Shenandoah Pauses") beside one for their cycles ("ZGC Major Cycles", "G1 Concurrent GC"),
 * which run beside the application and are not pauses: those are left out. The heap live
 * after a collection (`heap_after_gc_max_mb`, all pools) is the driver's flat-memory witness.
 *
 * Whole milliseconds are too coarse to judge a pause by: the MXBean's duration is the
 * difference of two millisecond clocks, so a 0.3 ms young collection reads 0 or 1 ms, and
 * the validity rule (loadgen/validity.py) then passes or fails a sub-millisecond p99 on
 * that rounding. So the driver also runs with the JVM's own GC log (`-Xlog:gc`, GC_LOG in
 * its output directory, orchestrator/run/driver.py), which times each stop-the-world pause
 * to the microsecond and stamps its end in nanoseconds since the JVM started; for Serial,
 * Parallel and G1 the pauses are read from it (`gc_pause_source`: "log"). Without the log
 * (another collector, or flags that drop it) the MXBean's whole milliseconds are kept
 * ("mxbean").
 *
 * The JIT: how long the JVM's compiler threads compiled in the window and in the warm-up
 * (`jit_compile_ms`, `warmup_jit_compile_ms`: the CompilationMXBean's total, summed over its
 * threads, read at start(), at the ticker's first tick in the window and at stop()). Compiling
 * that goes on into the window takes the pinned core from the clients and the ticker: the
 * ticker's lag then says the driver was late, and this says why (a warm-up too short for the
 * JIT to finish; loadgen/validity.py names it in the lag's reason).
 */
final class SelfChecks {
    private static final long TICK_NS = 10_000_000L;
    /** The JVM's GC log in the driver's output directory (orchestrator/run/driver.py). */
    static final String GC_LOG = "driver-gc.log";
    /** A stop-the-world pause in that log: "[<uptime>ns] GC(7) Pause Young (...) ... 0.295ms". */
    private static final Pattern PAUSE = Pattern.compile("^\\[(\\d+)ns\\] GC\\(\\d+\\) Pause .* ([0-9.]+)ms$");

    private final Histogram lags = new Histogram();
    private final Object gcLock = new Object();
    private Histogram gcPauses = new Histogram();
    private final Histogram warmupLags = new Histogram();
    private Histogram warmupGcPauses = new Histogram();
    private volatile long windowStartNs = Long.MAX_VALUE;
    // the same instants on the JVM's uptime clock (the GC log's), ns
    private long startUptimeNs, windowStartUptimeNs, stopUptimeNs;
    private long heapAfterGcMax;
    private final List<NotificationEmitter> emitters = new ArrayList<>();
    private final NotificationListener onGc = (n, handback) -> {
        if (GarbageCollectionNotificationInfo.GARBAGE_COLLECTION_NOTIFICATION.equals(n.getType())) {
            GarbageCollectionNotificationInfo info = GarbageCollectionNotificationInfo.from((CompositeData) n.getUserData());
            long after = 0;
            for (MemoryUsage u : info.getGcInfo().getMemoryUsageAfterGc().values()) {
                after += u.getUsed();
            }
            synchronized (gcLock) {
                heapAfterGcMax = Math.max(heapAfterGcMax, after);
                if (isPause(info.getGcName())) {
                    Histogram h = System.nanoTime() - windowStartNs >= 0 ? gcPauses : warmupGcPauses;
                    h.record(info.getGcInfo().getDuration() * 1_000_000L);
                }
            }
        }
    };
    private volatile boolean running;
    private Thread ticker;
    private final CompilationMXBean jit = ManagementFactory.getCompilationMXBean();
    // the JIT's total compile time (ms) at start(), at the window's start and at stop(); -1: not read
    private long jitStartMs = -1, jitStopMs = -1;
    private volatile long jitWindowMs = -1;

    /** The JIT's total compile time so far, ms; -1 where the JVM does not time it. */
    private long jitMs() {
        return jit != null && jit.isCompilationTimeMonitoringSupported() ? jit.getTotalCompilationTime() : -1;
    }

    /** Whether the collector bean `name` reports pauses (not concurrent cycles). */
    static boolean isPause(String name) {
        return !name.contains("Cycles") && !name.contains("Concurrent");
    }

    /** Starts the ticker and the GC listener; lag and pauses before windowStartNs count as the
     *  warm-up's. */
    void start(long windowStartNs) {
        this.windowStartNs = windowStartNs;
        startUptimeNs = uptimeNs();
        windowStartUptimeNs = startUptimeNs + (windowStartNs - System.nanoTime());
        for (GarbageCollectorMXBean gc : ManagementFactory.getGarbageCollectorMXBeans()) {
            if (gc instanceof NotificationEmitter) {
                ((NotificationEmitter) gc).addNotificationListener(onGc, null, null);
                emitters.add((NotificationEmitter) gc);
            }
        }
        jitStartMs = jitMs();
        running = true;
        ticker = new Thread(() -> {
            long expected = System.nanoTime() + TICK_NS;
            while (running) {
                long left;
                while ((left = expected - System.nanoTime()) > 0) {
                    java.util.concurrent.locks.LockSupport.parkNanos(left);
                }
                long now = System.nanoTime();
                boolean inWindow = now - windowStartNs >= 0;
                if (inWindow && jitWindowMs < 0) {
                    jitWindowMs = jitMs(); // within a tick (and its lag) of the window's start
                }
                synchronized (lags) {
                    (inWindow ? lags : warmupLags).record(now - expected);
                }
                expected = now + TICK_NS;
            }
        }, "lag-ticker");
        ticker.setDaemon(true);
        ticker.start();
    }

    /** The JVM's uptime, ns: the GC log's clock (HotSpot reads both from its elapsed counter),
     *  known here to the millisecond, so its middle is taken. */
    private static long uptimeNs() {
        return ManagementFactory.getRuntimeMXBean().getUptime() * 1_000_000L + 500_000L;
    }

    void stop() throws InterruptedException {
        stopUptimeNs = uptimeNs();
        running = false;
        ticker.join(1000);
        jitStopMs = jitMs();
        for (NotificationEmitter e : emitters) {
            try {
                e.removeNotificationListener(onGc);
            } catch (javax.management.ListenerNotFoundException ignored) {
                // already gone
            }
        }
    }

    /** This process's CPU time (user + system), ns. */
    static long cpuNs() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }

    /** The pauses the GC log in dir holds between start() and stop(), sorted into the window's
     *  and the warm-up's (by when each began): true when there is such a log to read. */
    boolean readGcLog(Path dir) {
        Path log = dir.resolve(GC_LOG);
        String gc = collector();
        if (!Files.isRegularFile(log) || !(gc.equals("serial") || gc.equals("parallel") || gc.equals("g1"))) {
            return false;
        }
        Histogram window = new Histogram();
        Histogram warmup = new Histogram();
        try {
            for (String line : Files.readAllLines(log, StandardCharsets.UTF_8)) {
                Matcher m = PAUSE.matcher(line.strip());
                if (!m.matches()) {
                    continue;
                }
                long endNs = Long.parseLong(m.group(1));
                long pauseNs = Math.round(Double.parseDouble(m.group(2)) * 1e6);
                long beganNs = endNs - pauseNs;
                if (beganNs < startUptimeNs || beganNs > stopUptimeNs) {
                    continue; // before the checks began (the phase's set-up) or after they ended
                }
                (beganNs >= windowStartUptimeNs ? window : warmup).record(pauseNs);
            }
        } catch (IOException | RuntimeException e) {
            return false;
        }
        synchronized (gcLock) {
            gcPauses = window;
            warmupGcPauses = warmup;
        }
        return true;
    }

    void into(Map<String, Object> summary, Path dir) {
        summary.put("gc_pause_source", readGcLog(dir) ? "log" : "mxbean");
        synchronized (lags) {
            summary.put("loop_lag_p99_ms", lags.percentile(99) / 1e6);
            summary.put("loop_lag_max_ms", lags.max() / 1e6);
            summary.put("warmup_loop_lag_p99_ms", warmupLags.percentile(99) / 1e6);
            summary.put("warmup_loop_lag_max_ms", warmupLags.max() / 1e6);
        }
        synchronized (gcLock) {
            summary.put("gc_pauses", gcPauses.count());
            summary.put("gc_pause_p99_ms", gcPauses.percentile(99) / 1e6);
            summary.put("gc_pause_max_ms", gcPauses.max() / 1e6);
            summary.put("gc_pause_total_ms", gcPauses.sum() / 1e6);
            summary.put("heap_after_gc_max_mb", heapAfterGcMax / 1e6);
            summary.put("warmup_gc_pauses", warmupGcPauses.count());
            summary.put("warmup_gc_pause_max_ms", warmupGcPauses.max() / 1e6);
        }
        if (jitStartMs >= 0 && jitStopMs >= 0) {
            long atWindow = jitWindowMs >= 0 ? jitWindowMs : jitStopMs; // no tick in the window: none
            summary.put("jit_compile_ms", jitStopMs - atWindow);
            summary.put("warmup_jit_compile_ms", atWindow - jitStartMs);
        }
        summary.put("gc", collector());
        summary.put("jdk", Runtime.version().feature());
    }

    /** The collector in use: serial, parallel, g1, z, shenandoah (or its first bean's name). */
    static String collector() {
        String first = ManagementFactory.getGarbageCollectorMXBeans().get(0).getName();
        for (String[] known : new String[][] {{"Copy", "serial"}, {"MarkSweepCompact", "serial"},
                {"PS ", "parallel"}, {"G1 ", "g1"}, {"ZGC", "z"}, {"Shenandoah", "shenandoah"}}) {
            if (first.startsWith(known[0])) {
                return known[1];
            }
        }
        return first;
    }
}
