package perfctl.server;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.locks.LockSupport;
import java.util.regex.Pattern;

/** GET /work: spin, then sleep, then count one bucket, then a body of `size` bytes. */
final class Work {
    static final long MAX_US = 10_000_000L;
    static final long MAX_SIZE = 16L << 20;
    private static final byte[] OK = "ok".getBytes(StandardCharsets.US_ASCII);
    private static final Pattern REAL = Pattern.compile("(?:[0-9]+(?:\\.[0-9]*)?|\\.[0-9]+)(?:[eE][+-]?[0-9]+)?");
    /** Upper bound of one spin or sleep after the dist factor: keeps nanosecond sums from overflowing. */
    private static final double MAX_NS = 1e15;

    private final Stats stats;
    private final int buckets;
    private final SplittableRandom master;
    private final ThreadLocal<SplittableRandom> random;
    private static volatile byte[] xs = new byte[0];

    Work(Stats stats, long seed) {
        this.stats = stats;
        this.buckets = stats.buckets();
        this.master = new SplittableRandom(seed);
        this.random = ThreadLocal.withInitial(this::split);
    }

    private SplittableRandom split() {
        synchronized (master) {
            return master.split();
        }
    }

    HttpResponse handle(String query) throws HttpError {
        Map<String, String> q = Query.parse(query);
        long spinUs = number(q, "spin_us", 0, MAX_US);
        long sleepUs = number(q, "sleep_us", 0, MAX_US);
        long size = number(q, "size", -1, MAX_SIZE);
        String bucketText = q.get("bucket");
        int bucket = bucketText == null ? -1 : modulo(bucketText, buckets);
        double factor = factor(q.get("dist"));

        spin(nanos(spinUs, factor));
        sleep(nanos(sleepUs, factor));
        long n = stats.nextWork();
        stats.bump(bucket >= 0 ? bucket : (int) (n % buckets));

        if (size < 0) {
            return HttpResponse.text(200, OK);
        }
        return new HttpResponse(200, HttpResponse.TEXT, xs((int) size), (int) size, null, false);
    }

    /** The dist factor: 1 for fixed, one Exp(1) draw for exp, one U[A, B] draw for uniform:A:B. */
    private double factor(String dist) throws HttpError {
        if (dist == null || dist.equals("fixed")) {
            return 1.0;
        }
        if (dist.equals("exp")) {
            return -Math.log(1.0 - random.get().nextDouble());
        }
        if (dist.startsWith("uniform:")) {
            String[] ab = dist.substring(8).split(":", -1);
            if (ab.length == 2 && REAL.matcher(ab[0]).matches() && REAL.matcher(ab[1]).matches()) {
                double a = Double.parseDouble(ab[0]);
                double b = Double.parseDouble(ab[1]);
                if (Double.isFinite(a) && Double.isFinite(b) && a <= b) {
                    return a == b ? a : a + (b - a) * random.get().nextDouble();
                }
            }
        }
        throw HttpError.badRequest("bad value for dist: expected fixed, exp or uniform:A:B with 0 <= A <= B");
    }

    private static long nanos(long us, double factor) {
        return (long) Math.min(MAX_NS, us * 1000.0 * factor);
    }

    private static void spin(long ns) {
        if (ns <= 0) {
            return;
        }
        long end = System.nanoTime() + ns;
        while (System.nanoTime() - end < 0) {
            // busy: the point is to burn CPU for ns of wall-clock time
        }
    }

    private static void sleep(long ns) {
        if (ns <= 0) {
            return;
        }
        long end = System.nanoTime() + ns;
        long left;
        while ((left = end - System.nanoTime()) > 0) {
            LockSupport.parkNanos(left);
            if (Thread.currentThread().isInterrupted()) {
                return;
            }
        }
    }

    /** A decimal integer >= 0 and <= max; absent gives dflt. */
    private static long number(Map<String, String> q, String name, long dflt, long max) throws HttpError {
        String s = q.get(name);
        if (s == null) {
            return dflt;
        }
        if (!isDecimal(s) || s.length() > 18 || Long.parseLong(s) > max) {
            throw HttpError.badRequest("bad value for " + name + ": expected a decimal integer 0.." + max);
        }
        return Long.parseLong(s);
    }

    /** bucket mod buckets for a decimal integer of any length. */
    private static int modulo(String s, int m) throws HttpError {
        if (!isDecimal(s)) {
            throw HttpError.badRequest("bad value for bucket: expected a decimal integer >= 0");
        }
        long r = 0;
        for (int i = 0; i < s.length(); i++) {
            r = (r * 10 + (s.charAt(i) - '0')) % m;
        }
        return (int) r;
    }

    private static boolean isDecimal(String s) {
        if (s.isEmpty()) {
            return false;
        }
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c < '0' || c > '9') {
                return false;
            }
        }
        return true;
    }

    /** A shared array of at least n 'x' bytes (grown on demand, never shrunk, never written after). */
    private static byte[] xs(int n) {
        byte[] a = xs;
        if (a.length >= n) {
            return a;
        }
        synchronized (Work.class) {
            a = xs;
            if (a.length < n) {
                a = new byte[(int) Math.min(MAX_SIZE, Math.max(n, Math.max(4096L, 2L * a.length)))];
                Arrays.fill(a, (byte) 'x');
                xs = a;
            }
            return a;
        }
    }
}
