package perfctl.driver;

import com.sun.management.GarbageCollectionNotificationInfo;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.lang.management.MemoryUsage;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
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
 */
final class SelfChecks {
    private static final long TICK_NS = 10_000_000L;

    private final Histogram lags = new Histogram();
    private final Histogram gcPauses = new Histogram();
    private final Histogram warmupLags = new Histogram();
    private final Histogram warmupGcPauses = new Histogram();
    private volatile long windowStartNs = Long.MAX_VALUE;
    private long heapAfterGcMax;
    private final List<NotificationEmitter> emitters = new ArrayList<>();
    private final NotificationListener onGc = (n, handback) -> {
        if (GarbageCollectionNotificationInfo.GARBAGE_COLLECTION_NOTIFICATION.equals(n.getType())) {
            GarbageCollectionNotificationInfo info = GarbageCollectionNotificationInfo.from((CompositeData) n.getUserData());
            long after = 0;
            for (MemoryUsage u : info.getGcInfo().getMemoryUsageAfterGc().values()) {
                after += u.getUsed();
            }
            synchronized (gcPauses) {
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

    /** Whether the collector bean `name` reports pauses (not concurrent cycles). */
    static boolean isPause(String name) {
        return !name.contains("Cycles") && !name.contains("Concurrent");
    }

    /** Starts the ticker and the GC listener; lag and pauses before windowStartNs count as the
     *  warm-up's. */
    void start(long windowStartNs) {
        this.windowStartNs = windowStartNs;
        for (GarbageCollectorMXBean gc : ManagementFactory.getGarbageCollectorMXBeans()) {
            if (gc instanceof NotificationEmitter) {
                ((NotificationEmitter) gc).addNotificationListener(onGc, null, null);
                emitters.add((NotificationEmitter) gc);
            }
        }
        running = true;
        ticker = new Thread(() -> {
            long expected = System.nanoTime() + TICK_NS;
            while (running) {
                long left;
                while ((left = expected - System.nanoTime()) > 0) {
                    java.util.concurrent.locks.LockSupport.parkNanos(left);
                }
                long now = System.nanoTime();
                synchronized (lags) {
                    (now - windowStartNs >= 0 ? lags : warmupLags).record(now - expected);
                }
                expected = now + TICK_NS;
            }
        }, "lag-ticker");
        ticker.setDaemon(true);
        ticker.start();
    }

    void stop() throws InterruptedException {
        running = false;
        ticker.join(1000);
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

    void into(Map<String, Object> summary) {
        synchronized (lags) {
            summary.put("loop_lag_p99_ms", lags.percentile(99) / 1e6);
            summary.put("loop_lag_max_ms", lags.max() / 1e6);
            summary.put("warmup_loop_lag_p99_ms", warmupLags.percentile(99) / 1e6);
            summary.put("warmup_loop_lag_max_ms", warmupLags.max() / 1e6);
        }
        synchronized (gcPauses) {
            summary.put("gc_pauses", gcPauses.count());
            summary.put("gc_pause_p99_ms", gcPauses.percentile(99) / 1e6);
            summary.put("gc_pause_max_ms", gcPauses.max() / 1e6);
            summary.put("gc_pause_total_ms", gcPauses.sum() / 1e6);
            summary.put("heap_after_gc_max_mb", heapAfterGcMax / 1e6);
            summary.put("warmup_gc_pauses", warmupGcPauses.count());
            summary.put("warmup_gc_pause_max_ms", warmupGcPauses.max() / 1e6);
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
