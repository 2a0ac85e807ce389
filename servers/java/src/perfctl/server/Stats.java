package perfctl.server;

import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.IntSupplier;

/** The server's shared counters and the /stats body. */
final class Stats {
    private final String model;
    private final LongAdder requests = new LongAdder();
    private final AtomicLong workRequests = new AtomicLong();
    private final AtomicLongArray counters;
    private final AtomicInteger connections = new AtomicInteger();
    private Model concurrency; // set once before the first connection is accepted
    private Registry registry;
    private IntSupplier openConnections; // a container's own count (servlet, spring), else null

    Stats(String model, int buckets) {
        this.model = model;
        this.counters = new AtomicLongArray(buckets);
    }

    void attach(Model concurrency, Registry registry) {
        this.concurrency = concurrency;
        this.registry = registry;
    }

    /** Take `connections` from a container that accepts connections itself. */
    void connectionsFrom(IntSupplier source) {
        this.openConnections = source;
    }

    /** One response was written (any endpoint, any status). */
    void responded() {
        requests.increment();
    }

    void connectionOpened() {
        connections.incrementAndGet();
    }

    void connectionClosed() {
        connections.decrementAndGet();
    }

    int buckets() {
        return counters.length();
    }

    /** Counts one /work request; returns its running number (0-based). */
    long nextWork() {
        return workRequests.getAndIncrement();
    }

    void bump(int bucket) {
        counters.incrementAndGet(bucket);
    }

    String json() {
        long sum = 0;
        for (int i = 0, n = counters.length(); i < n; i++) {
            sum += counters.get(i);
        }
        return "{\"impl\": \"java\", \"model\": \"" + model + "\", \"threads\": " + concurrency.threads()
                + ", \"requests\": " + requests.sum() + ", \"work_requests\": " + workRequests.get()
                + ", \"bucket_sum\": " + sum + ", \"buckets\": " + counters.length()
                + ", \"queue_length\": " + concurrency.queueLength() + ", \"users\": " + registry.size()
                + ", \"connections\": " + (openConnections != null ? openConnections.getAsInt() : connections.get())
                + "}";
    }
}
