package perfctl.driver;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

/**
 * The requests the RMI driver sends: the spec's `requests` mix (loadgen/DRIVER.md), or its one
 * `target` and `body` when it has none. Request n of the phase (n = 0, 1, ... in the order the
 * clients take them) is drawn by weight from a generator seeded with the spec's seed and n, and
 * its generated fields rendered from the same generator: `{seq}` becomes n, `{uuid}` a version-4
 * UUID. So one seed gives the same requests and the same bytes, whichever thread takes them.
 * The experiment layer refuses the other fields for this driver before anything runs.
 *
 * Thread-safe: immutable once built; `request(n)` allocates only the rendered strings.
 */
final class Mix {
    /** One rendered request: its index in the mix (the `request` column), target and body. */
    static final class Request {
        final int index;
        final String method;
        final String target;
        final byte[] body;

        Request(int index, String method, String target, byte[] body) {
            this.index = index;
            this.method = method;
            this.target = target;
            this.body = body;
        }
    }

    private final String[] methods;
    private final String[] targets;
    private final String[] bodies;
    private final double[] cumulative; // cumulative[k]: the weights of requests 0..k, over their sum
    private final boolean[] templated;
    private final byte[][] fixedBodies;
    private final long seed;

    private Mix(List<String[]> requests, List<Double> weights, long seed) {
        int n = requests.size();
        methods = new String[n];
        targets = new String[n];
        bodies = new String[n];
        cumulative = new double[n];
        templated = new boolean[n];
        fixedBodies = new byte[n][];
        double total = weights.stream().mapToDouble(Double::doubleValue).sum();
        double sum = 0;
        for (int k = 0; k < n; k++) {
            String[] r = requests.get(k);
            methods[k] = r[0];
            targets[k] = r[1];
            bodies[k] = r[2];
            sum += weights.get(k);
            cumulative[k] = sum / total;
            templated[k] = (r[1] + r[2]).indexOf('{') >= 0;
            fixedBodies[k] = r[2].getBytes(StandardCharsets.ISO_8859_1);
        }
        cumulative[n - 1] = 1.0;
        this.seed = seed;
    }

    /** The spec's mix; its one request (index 0) when `requests` is absent or empty. */
    static Mix of(Map<String, Object> spec, String method, String target, String body, long seed) {
        List<String[]> requests = new ArrayList<>();
        List<Double> weights = new ArrayList<>();
        Object mix = spec.get("requests");
        if (mix instanceof List && !((List<?>) mix).isEmpty()) {
            for (Object o : (List<?>) mix) {
                if (!(o instanceof Map)) {
                    throw new IllegalArgumentException("each of `requests` must be a JSON object");
                }
                Map<?, ?> r = (Map<?, ?>) o;
                Object w = r.get("weight");
                double weight = w == null ? 1.0 : (Double) w;
                if (!(weight >= 0)) {
                    throw new IllegalArgumentException("a request's weight must be >= 0");
                }
                requests.add(new String[] {str(r, "method", "GET"), str(r, "target", "/"), str(r, "body", "")});
                weights.add(weight);
            }
            if (weights.stream().mapToDouble(Double::doubleValue).sum() <= 0) {
                throw new IllegalArgumentException("the weights of `requests` sum to 0");
            }
        } else {
            requests.add(new String[] {method, target, body});
            weights.add(1.0);
        }
        return new Mix(requests, weights, seed);
    }

    private static String str(Map<?, ?> m, String k, String dflt) {
        Object v = m.get(k);
        return v == null ? dflt : v.toString();
    }

    int size() {
        return targets.length;
    }

    /** Request n of the phase (n >= 0). */
    Request request(long n) {
        SplittableRandom rnd = null;
        int k = 0;
        if (targets.length > 1) {
            rnd = random(n);
            double u = rnd.nextDouble();
            while (u >= cumulative[k] && k < cumulative.length - 1) {
                k++;
            }
        }
        if (!templated[k]) {
            return new Request(k, methods[k], targets[k], fixedBodies[k]);
        }
        if (rnd == null) {
            rnd = random(n);
        }
        String seq = Long.toString(n);
        String target = render(targets[k], seq, rnd);
        String body = render(bodies[k], seq, rnd);
        return new Request(k, methods[k], target, body.getBytes(StandardCharsets.ISO_8859_1));
    }

    private SplittableRandom random(long n) {
        return new SplittableRandom(seed * 0x9E3779B97F4A7C15L + n);
    }

    /** {seq} and {uuid} filled in, left to right (each {uuid} its own). */
    static String render(String template, String seq, SplittableRandom rnd) {
        if (template.indexOf('{') < 0) {
            return template;
        }
        StringBuilder b = new StringBuilder(template.length() + 32);
        int at = 0;
        while (true) {
            int open = template.indexOf('{', at);
            if (open < 0) {
                break;
            }
            b.append(template, at, open);
            if (template.startsWith("{seq}", open)) {
                b.append(seq);
                at = open + 5;
            } else if (template.startsWith("{uuid}", open)) {
                uuid(b, rnd);
                at = open + 6;
            } else {
                b.append('{');
                at = open + 1;
            }
        }
        return b.append(template, at, template.length()).toString();
    }

    /** A version-4 UUID (RFC 9562: 122 random bits, version 4, variant 10), lower-case hex. */
    private static void uuid(StringBuilder b, SplittableRandom rnd) {
        long hi = (rnd.nextLong() & ~0xF000L) | 0x4000L;
        long lo = (rnd.nextLong() & 0x3FFFFFFFFFFFFFFFL) | 0x8000000000000000L;
        hex(b, hi >>> 32, 8);
        b.append('-');
        hex(b, (hi >>> 16) & 0xFFFF, 4);
        b.append('-');
        hex(b, hi & 0xFFFF, 4);
        b.append('-');
        hex(b, lo >>> 48, 4);
        b.append('-');
        hex(b, lo & 0xFFFFFFFFFFFFL, 12);
    }

    private static void hex(StringBuilder b, long v, int digits) {
        for (int s = (digits - 1) * 4; s >= 0; s -= 4) {
            b.append(Character.forDigit((int) (v >>> s) & 0xF, 16));
        }
    }
}
