package perfctl.server;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import java.sql.Connection;
import java.sql.SQLException;

/**
 * /db's connections on the servers on real stacks: a HikariCP pool of --db-pool connections
 * (default --threads) that starts without the database (/db answers 503 until it is up).
 */
final class HikariConnections implements Db.Connections {
    private final HikariDataSource pool;

    private HikariConnections(HikariDataSource pool) {
        this.pool = pool;
    }

    /** The /db endpoint of a stack server: no --db, no pool. */
    static Db endpoint(Config config) throws Config.Error {
        if (config.db == null) {
            return new Db(null);
        }
        int size = config.dbPool > 0 ? config.dbPool : config.threads;
        HikariConfig c = new HikariConfig();
        c.setJdbcUrl(Db.jdbcUrl(config.db));
        String user = Db.user(config.db);
        if (user != null) {
            c.setUsername(user);
        }
        String password = Db.password(config.db);
        if (password != null) {
            c.setPassword(password);
        }
        c.setMaximumPoolSize(size);
        c.setMinimumIdle(size);
        c.setConnectionTimeout(DbPool.WAIT_MS);
        c.setInitializationFailTimeout(-1); // start without the database; /db says 503
        c.setAutoCommit(true);
        c.setPoolName("perfctl-db");
        return new Db(new HikariConnections(new HikariDataSource(c)));
    }

    @Override
    public Connection take() throws SQLException {
        return pool.getConnection();
    }

    @Override
    public void give(Connection c, boolean broken) {
        if (broken) {
            pool.evictConnection(c); // a query on it failed: the next take gets a fresh one
            return;
        }
        try {
            c.close(); // back to the pool
        } catch (SQLException ignored) {
            // the pool drops it
        }
    }
}
