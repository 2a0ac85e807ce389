package perfctl.driver;

/**
 * Non-negative ns values counted in log-linear buckets (HdrHistogram's layout): exact below
 * 1024 ns, then 512 buckets per power of two, so a percentile is within 0.2% of the value, in
 * a fixed 115 KB whatever the count. The driver's self-checks (send lateness per arrival, ticker
 * lag, GC pauses) keep their distributions here rather than one value per event. Not
 * thread-safe: one thread records, or the caller locks.
 */
final class Histogram {
    private static final int SUB_BITS = 10;                 // 1024 exact values, then 512 a doubling
    private static final int SUB = 1 << SUB_BITS;
    private static final int HALF = SUB >> 1;
    private final int[] counts = new int[SUB + (64 - SUB_BITS) * HALF];
    private long n;
    private long max;
    private double sum;

    void record(long ns) {
        long v = Math.max(0, ns);
        counts[index(v)]++;
        n++;
        max = Math.max(max, v);
        sum += v;
    }

    long count() {
        return n;
    }

    long max() {
        return max;
    }

    double sum() {
        return sum;
    }

    /** The q-th percentile (0..100), the inverted CDF as numpy's method="inverted_cdf": the
     *  highest value of the bucket holding rank ceil(q/100 * n), at most the max; 0 when empty. */
    long percentile(double q) {
        if (n == 0) {
            return 0;
        }
        long rank = Math.min(n, Math.max(1, (long) Math.ceil(q / 100.0 * n)));
        long seen = 0;
        for (int i = 0; i < counts.length; i++) {
            seen += counts[i];
            if (seen >= rank) {
                return Math.min(max, highest(i));
            }
        }
        return max;
    }

    private static int index(long v) {
        if (v < SUB) {
            return (int) v;
        }
        int shift = 64 - Long.numberOfLeadingZeros(v) - SUB_BITS;   // v >> shift in [512, 1024)
        return SUB + (shift - 1) * HALF + (int) ((v >> shift) - HALF);
    }

    private static long highest(int i) {
        if (i < SUB) {
            return i;
        }
        int shift = (i - SUB) / HALF + 1;
        long m = (i - SUB) % HALF + HALF;
        return ((m + 1) << shift) - 1;
    }
}
