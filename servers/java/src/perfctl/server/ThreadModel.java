package perfctl.server;

import java.util.concurrent.atomic.AtomicInteger;

/** `thread`: a new platform thread per accepted connection. */
final class ThreadModel implements Model {
    private final AtomicInteger live = new AtomicInteger();
    private final AtomicInteger serial = new AtomicInteger();

    @Override
    public void dispatch(Connection c) {
        Thread t = new Thread(() -> {
            try {
                c.run();
            } finally {
                live.decrementAndGet();
            }
        }, "conn-" + serial.incrementAndGet());
        t.setDaemon(true);
        live.incrementAndGet();
        try {
            t.start();
        } catch (Throwable e) { // e.g. OutOfMemoryError: unable to create native thread
            live.decrementAndGet();
            System.err.println("perfctl-server: cannot start a thread: " + e);
            c.reject("server overloaded: cannot start a thread");
        }
    }

    @Override
    public int threads() {
        return live.get();
    }

    @Override
    public int queueLength() {
        return 0;
    }
}
