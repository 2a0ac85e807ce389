package perfctl.driver;

import java.io.IOException;
import java.nio.ByteOrder;
import java.nio.LongBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Map;

/** The keys of spec.json the RMI driver reads (loadgen/DRIVER.md), in seconds and counts. */
final class Spec {
    final String host;
    final int port;
    final String target;
    final String method;
    final String body;
    final String mode;
    final int connections;
    final double thinkTimeS;
    final boolean thinkExp;
    final double rateRps;
    final int maxOutstanding;
    final double durationS;
    final double warmupS;
    /** warmup: auto: warm up until steady, at most this long, before the phase (0: off). */
    final double warmupAutoMaxS;
    final double timeoutS;
    final boolean keepalive;
    final long seed;
    final long maxRequests;
    final int bursts;
    final double burstIntervalS;
    final Path scheduleFile;
    final long startAtNs;
    /** The requests to send: the `requests` mix, else target and body (Mix). */
    final Mix mix;

    Spec(Path path) throws IOException {
        Object parsed = Json.parse(new String(Files.readAllBytes(path), StandardCharsets.UTF_8));
        if (!(parsed instanceof Map)) {
            throw new IllegalArgumentException("spec is not a JSON object");
        }
        @SuppressWarnings("unchecked")
        Map<String, Object> m = (Map<String, Object>) parsed;
        host = str(m, "host", "127.0.0.1");
        port = (int) num(m, "port", 0);
        target = str(m, "target", "/");
        method = str(m, "method", "GET");
        body = str(m, "body", "");
        mode = str(m, "mode", "closed");
        connections = Math.max(1, (int) num(m, "connections", 1));
        thinkTimeS = num(m, "think_time_s", 0);
        thinkExp = str(m, "think_dist", "fixed").equals("exp");
        rateRps = num(m, "rate_rps", 0);
        int cap = (int) num(m, "max_outstanding", 0);
        maxOutstanding = cap > 0 ? cap : 100 * connections;
        durationS = num(m, "duration_s", 10);
        warmupS = num(m, "warmup_s", 0);
        warmupAutoMaxS = num(m, "warmup_auto_max_s", 0);
        timeoutS = num(m, "timeout_s", 5);
        keepalive = !Boolean.FALSE.equals(m.get("keepalive"));
        seed = (long) num(m, "seed", 1);
        maxRequests = (long) num(m, "max_requests", 50_000_000);
        bursts = Math.max(1, (int) num(m, "bursts", 1));
        burstIntervalS = num(m, "burst_interval_s", 1);
        startAtNs = (long) num(m, "start_at_ns", 0);
        String sched = str(m, "schedule_file", "");
        scheduleFile = sched.isEmpty() ? null : path.toAbsolutePath().getParent().resolve(sched);
        mix = Mix.of(m, method, target, body, seed);
    }

    /** The measured window in seconds: duration, or all bursts. */
    double windowS() {
        return mode.equals("burst") ? bursts * burstIntervalS : durationS;
    }

    /** The open-load schedule perfctl wrote: ns offsets from the start instant, memory-mapped
     *  (read from the page cache as the dispatcher walks it, not copied onto the heap). */
    LongBuffer schedule() throws IOException {
        if (scheduleFile == null) {
            throw new IllegalArgumentException("open mode needs `schedule_file` in the spec (perfctl writes it)");
        }
        try (FileChannel ch = FileChannel.open(scheduleFile, StandardOpenOption.READ)) {
            long size = ch.size();
            if (size % 8 != 0 || size / 8 > Integer.MAX_VALUE) {
                throw new IllegalArgumentException(scheduleFile + " is not a whole number of int64 offsets");
            }
            return ch.map(FileChannel.MapMode.READ_ONLY, 0, size).order(ByteOrder.LITTLE_ENDIAN).asLongBuffer();
        }
    }

    private static String str(Map<String, Object> m, String k, String dflt) {
        Object v = m.get(k);
        return v == null ? dflt : v.toString();
    }

    private static double num(Map<String, Object> m, String k, double dflt) {
        Object v = m.get(k);
        if (v == null) {
            return dflt;
        }
        if (!(v instanceof Double)) {
            throw new IllegalArgumentException("spec key " + k + " must be a number");
        }
        return (Double) v;
    }
}
