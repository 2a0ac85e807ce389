package perfctl.server;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.Properties;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * The plain Java servers' JDBC connections for /db (models single, thread, pool, virtual, rmi,
 * rmi-single): a fixed set of `size` slots in a blocking queue. A slot holds an open connection,
 * or nothing (the server starts while the database is down); {@link #warm} opens them at
 * start, and an empty slot is (re)opened by the request that takes it. A
 * request takes a slot, waiting at most {@link #WAIT_MS}, and gives it back after its query.
 *
 * Why not a real pool (HikariCP, as the servers on real stacks use): the plain server is built by
 * javac alone with no dependencies, and only the PostgreSQL driver jar joins it at run time. What
 * /db needs from a pool is small: a bound on connections (the database's own concurrency is an
 * experiment's variable: --db-pool), reuse across requests, and recovery from a database that
 * went away. A fixed queue of slots gives exactly that: a connection whose query failed is
 * closed and its slot emptied, so the next request opens a new one (PROTOCOL.md: a database that
 * comes back is used again). No idle eviction, no validation query, no background threads: the
 * only cost on the request path is one queue take and one put.
 */
final class DbPool implements Db.Connections {
    /** How long a request waits for a free slot (HikariCP's connectionTimeout on the stacks). */
    static final long WAIT_MS = 2000;
    private static final Object EMPTY = new Object(); // a slot with no open connection

    private final String url;
    private final Properties props = new Properties();
    private final int size;
    private final BlockingQueue<Object> slots;

    DbPool(String url, String user, String password, int size) {
        this.url = url;
        this.size = size;
        if (user != null) {
            props.setProperty("user", user);
        }
        if (password != null) {
            props.setProperty("password", password);
        }
        props.setProperty("connectTimeout", "2");     // pgjdbc: seconds to connect
        props.setProperty("loginTimeout", "3");       // and to finish the start-up exchange
        props.setProperty("tcpKeepAlive", "true");
        props.setProperty("ApplicationName", "perfctl-server");
        slots = new ArrayBlockingQueue<>(size);
        for (int i = 0; i < size; i++) {
            slots.add(EMPTY);
        }
    }

    /**
     * Opens one connection now, before the server listens (that loads the JDBC driver, the
     * slow part: ~0.5 s on a cold JVM), and the other slots' on a background thread, so that a
     * trial's first requests do not pay for it (HikariCP fills its pool at start too). Stops
     * at the first failure (the database is down or unreachable: the server starts anyway and
     * /db answers 503 until it is up); the reason goes to stderr.
     */
    void warm() {
        if (!openOne()) {
            return;
        }
        Thread rest = new Thread(() -> {
            for (int i = 1; i < size && openOne(); i++) {
                // one slot at a time; a request may be opening another meanwhile
            }
        }, "db-pool-warm");
        rest.setDaemon(true);
        rest.start();
    }

    /** Opens the connection of one empty slot, if there is a free one; false on failure. */
    private boolean openOne() {
        Object slot = slots.poll();
        if (slot == null) {
            return true; // every slot is in use: nothing to warm
        }
        if (slot != EMPTY) {
            slots.add(slot);
            return true;
        }
        try {
            Connection c = DriverManager.getConnection(url, props);
            c.setAutoCommit(true);
            slots.add(c);
            return true;
        } catch (SQLException | RuntimeException e) {
            slots.add(EMPTY);
            System.err.println("perfctl-server: /db: no database connection at start ("
                    + e.getMessage() + "); /db answers 503 until the database is up");
            return false;
        }
    }

    @Override
    public Connection take() throws SQLException {
        Object slot;
        try {
            slot = slots.poll(WAIT_MS, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new SQLException("interrupted while waiting for a database connection");
        }
        if (slot == null) {
            throw new SQLException("no database connection free within " + WAIT_MS + " ms (all "
                    + size + " in use; --db-pool)");
        }
        if (slot != EMPTY) {
            return (Connection) slot;
        }
        try {
            Connection c = DriverManager.getConnection(url, props);
            c.setAutoCommit(true);
            return c;
        } catch (SQLException | RuntimeException e) {
            slots.add(EMPTY); // the slot stays free for the next try
            if (e instanceof SQLException) {
                throw (SQLException) e;
            }
            throw new SQLException(e.toString(), e);
        }
    }

    @Override
    public void give(Connection c, boolean broken) {
        if (broken) {
            try {
                c.close();
            } catch (SQLException ignored) {
                // dropping it anyway
            }
            slots.add(EMPTY);
            // a broken connection mostly means the database went away: every idle one is stale
            // too, so they are dropped now and reopened on their next use
            for (int i = 0; i < size; i++) {
                Object idle = slots.poll();
                if (idle == null) {
                    break;
                }
                if (idle != EMPTY) {
                    try {
                        ((Connection) idle).close();
                    } catch (SQLException ignored) {
                        // dropping it anyway
                    }
                }
                slots.add(EMPTY);
            }
        } else {
            slots.add(c);
        }
    }
}
