package perfctl.server;

import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * `pool`: a ThreadPoolExecutor of N threads taking whole connections from a bounded
 * ArrayBlockingQueue of `backlog` connections. When the queue is full the new connection is
 * answered 503 (Connection: close) by the accepting thread and closed.
 */
final class PoolModel implements Model {
    private final int threads;
    private final ThreadPoolExecutor executor;

    PoolModel(int threads, int backlog) {
        this.threads = threads;
        AtomicInteger serial = new AtomicInteger();
        this.executor = new ThreadPoolExecutor(threads, threads, 0L, TimeUnit.MILLISECONDS,
                new ArrayBlockingQueue<>(backlog), r -> {
                    Thread t = new Thread(r, "pool-" + serial.incrementAndGet());
                    t.setDaemon(true);
                    return t;
                }, new ThreadPoolExecutor.AbortPolicy());
        executor.prestartAllCoreThreads();
    }

    @Override
    public void dispatch(Connection c) {
        try {
            executor.execute(c);
        } catch (RejectedExecutionException e) {
            c.reject("server overloaded: connection queue full");
        }
    }

    @Override
    public int threads() {
        return threads;
    }

    @Override
    public int queueLength() {
        return executor.getQueue().size();
    }
}
