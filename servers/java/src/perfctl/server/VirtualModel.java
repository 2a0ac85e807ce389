package perfctl.server;

import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * `virtual`: a virtual thread per connection. The classes are compiled for Java 17, so the
 * executor is looked up by reflection; on a JVM older than 21 this model refuses to start.
 */
final class VirtualModel implements Model {
    static final int MIN_JAVA = 21;

    private final ExecutorService executor;
    private final AtomicInteger live = new AtomicInteger();

    VirtualModel() throws Config.Error {
        int feature = Runtime.version().feature();
        if (feature < MIN_JAVA) {
            throw new Config.Error("model virtual needs a JDK >= " + MIN_JAVA + " (virtual threads); this JVM is Java "
                    + feature + " (" + System.getProperty("java.home") + ")");
        }
        try {
            executor = (ExecutorService) Executors.class.getMethod("newVirtualThreadPerTaskExecutor").invoke(null);
        } catch (ReflectiveOperationException e) {
            throw new Config.Error("model virtual: cannot create the virtual-thread executor: " + e);
        }
    }

    @Override
    public void dispatch(Connection c) {
        live.incrementAndGet();
        try {
            executor.execute(() -> {
                try {
                    c.run();
                } finally {
                    live.decrementAndGet();
                }
            });
        } catch (RejectedExecutionException | OutOfMemoryError e) {
            live.decrementAndGet();
            System.err.println("perfctl-server: cannot start a virtual thread: " + e);
            c.reject("server overloaded: cannot start a virtual thread");
        }
    }

    @Override
    public int threads() {
        return live.get();
    }

    @Override
    public int queueLength() {
        return 0; // a connection gets its own virtual thread at once
    }
}
