package perfctl.driver;

import com.sun.management.GarbageCollectionNotificationInfo;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import javax.management.NotificationEmitter;
import javax.management.NotificationListener;
import javax.management.openmbean.CompositeData;

/**
 * The driver's own health (loadgen/DRIVER.md summary keys): how late a 10 ms ticker thread
 * wakes (`loop_lag_*`: the JVM or the host kept the driver's threads from running), the
 * garbage collector's pauses, and the process's CPU time.
 */
final class SelfChecks {
    private static final long TICK_NS = 10_000_000L;

    private final List<Long> lagsNs = new ArrayList<>();
    private final List<Double> gcPausesMs = new ArrayList<>();
    private final List<NotificationEmitter> emitters = new ArrayList<>();
    private final NotificationListener onGc = (n, handback) -> {
        if (GarbageCollectionNotificationInfo.GARBAGE_COLLECTION_NOTIFICATION.equals(n.getType())) {
            GarbageCollectionNotificationInfo info = GarbageCollectionNotificationInfo.from((CompositeData) n.getUserData());
            synchronized (gcPausesMs) {
                gcPausesMs.add((double) info.getGcInfo().getDuration());
            }
        }
    };
    private volatile boolean running;
    private Thread ticker;

    void start() {
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
                synchronized (lagsNs) {
                    lagsNs.add(now - expected);
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

    /** The q-th percentile (0..100) of sorted values, the inverted CDF; 0 when empty. */
    static double percentile(long[] sorted, double q) {
        if (sorted.length == 0) {
            return 0.0;
        }
        int k = (int) Math.min(sorted.length, Math.max(1, Math.ceil(q / 100.0 * sorted.length)));
        return sorted[k - 1];
    }

    void into(Map<String, Object> summary) {
        long[] lags;
        synchronized (lagsNs) {
            lags = lagsNs.stream().mapToLong(Long::longValue).toArray();
        }
        Arrays.sort(lags);
        summary.put("loop_lag_p99_ms", percentile(lags, 99) / 1e6);
        summary.put("loop_lag_max_ms", lags.length == 0 ? 0.0 : lags[lags.length - 1] / 1e6);
        synchronized (gcPausesMs) {
            summary.put("gc_pauses", gcPausesMs.size());
            summary.put("gc_pause_max_ms", gcPausesMs.stream().mapToDouble(Double::doubleValue).max().orElse(0.0));
            summary.put("gc_pause_total_ms", gcPausesMs.stream().mapToDouble(Double::doubleValue).sum());
        }
    }
}
