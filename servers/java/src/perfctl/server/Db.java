package perfctl.server;

import java.net.URI;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;

/**
 * GET /db (servers/PROTOCOL.md) over JDBC, shared by every Java server: the plain HTTP models
 * and the RMI server take their connections from {@link DbPool} (java.sql only, the PostgreSQL
 * driver jar on the runtime classpath), the servers on real stacks from HikariCP
 * (stacks/HikariConnections). Connections are opened lazily: a server starts even while the
 * database is down, and /db answers 503 with the reason until it is up.
 */
final class Db implements Router.DbEndpoint {
    static final int MAX_ROWS = 1000;
    private static final String COLUMNS = "id, name, email, city, score";
    private static final String POINT = "SELECT " + COLUMNS + " FROM participants WHERE id = ?";
    private static final String RANGE = "SELECT " + COLUMNS + " FROM participants WHERE id >= ? ORDER BY id LIMIT ?";
    private static final String INSERT = "INSERT INTO registrations (participant_id, note) VALUES (?, 'perfctl /db insert') RETURNING id";
    private static final String DELETE = "DELETE FROM registrations WHERE id = (SELECT id FROM registrations ORDER BY id"
            + " LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id";

    /** Where /db gets a connection for one query, and gives it back. */
    interface Connections {
        /** A connection (autocommit) for one request; SQLException (with the reason) when none. */
        Connection take() throws SQLException;

        /** Hand c back; broken: a query on it failed, so drop it (the next take opens a new one). */
        void give(Connection c, boolean broken);
    }

    private final Connections source; // null: no --db
    private volatile int participants; // read once from perfctl_meta

    Db(Connections source) {
        this.source = source;
    }

    /** The plain servers' /db: a {@link DbPool} of --db-pool (default --threads) connections. */
    static Db plain(Config config) throws Config.Error {
        if (config.db == null) {
            return new Db(null);
        }
        DbPool pool = new DbPool(jdbcUrl(config.db), user(config.db), password(config.db), config.dbPool > 0 ? config.dbPool : config.threads);
        pool.warm();
        return new Db(pool);
    }

    /** postgresql://USER@HOST:PORT/DB -> jdbc:postgresql://HOST:PORT/DB (pgjdbc takes no user there). */
    static String jdbcUrl(String uri) throws Config.Error {
        try {
            URI u = new URI(uri);
            if (!"postgresql".equals(u.getScheme()) && !"postgres".equals(u.getScheme()) || u.getHost() == null) {
                throw new Config.Error("bad value for --db (expected postgresql://USER@HOST:PORT/DB)");
            }
            String port = u.getPort() > 0 ? ":" + u.getPort() : "";
            return "jdbc:postgresql://" + u.getHost() + port + (u.getRawPath() == null ? "/" : u.getRawPath())
                    + (u.getRawQuery() == null ? "" : "?" + u.getRawQuery());
        } catch (URISyntaxException e) {
            throw new Config.Error("bad value for --db: " + e.getMessage());
        }
    }

    /**
     * The password: the URI's (postgresql://USER:PASSWORD@...) or else $PGPASSWORD, where perfctl
     * puts a service's password to keep it off the command line (libpq reads it there too).
     */
    static String password(String uri) {
        try {
            String info = new URI(uri).getUserInfo();
            if (info != null && info.contains(":")) {
                return info.split(":", 2)[1];
            }
        } catch (URISyntaxException e) {
            // a bad URI is reported by jdbcUrl
        }
        return System.getenv("PGPASSWORD");
    }

    static String user(String uri) {
        try {
            String info = new URI(uri).getUserInfo();
            return info == null ? null : info.split(":", 2)[0];
        } catch (URISyntaxException e) {
            return null;
        }
    }

    @Override
    public HttpResponse handle(String query) throws HttpError {
        Map<String, String> p = Query.parse(query == null ? "" : query);
        String kind = p.get("query");
        if (kind == null || !(kind.equals("point") || kind.equals("range") || kind.equals("insert")
                || kind.equals("delete"))) {
            throw HttpError.badRequest("bad parameter: query");
        }
        int rows = kind.equals("range") ? 10 : 1;
        String raw = p.get("rows");
        if (raw != null) {
            rows = rowsOf(raw);
        }
        if (source == null) {
            return HttpResponse.unavailable("no database configured (start the server with --db URI)", -1);
        }
        return query(kind, rows, true);
    }

    private HttpResponse query(String kind, int rows, boolean retry) {
        Connection conn;
        try {
            conn = source.take();
        } catch (SQLException e) {
            return HttpResponse.unavailable(reason(e), -1);
        }
        long t0 = System.nanoTime();
        boolean broken = true;
        try {
            int n = participants(conn);
            ThreadLocalRandom rnd = ThreadLocalRandom.current();
            int got;
            t0 = System.nanoTime();
            switch (kind) {
                case "point":
                    got = count(conn, POINT, 1 + rnd.nextInt(n), -1);
                    break;
                case "range":
                    got = count(conn, RANGE, 1 + rnd.nextInt(Math.max(1, n - rows + 1)), rows);
                    break;
                case "delete":
                    got = count(conn, DELETE, -1, -1);
                    break;
                default:
                    got = count(conn, INSERT, 1 + rnd.nextInt(n), -1);
            }
            long dbNanos = System.nanoTime() - t0;
            broken = false;
            byte[] body = ("{\"query\": \"" + kind + "\", \"rows\": " + got + "}\n").getBytes(StandardCharsets.US_ASCII);
            HttpResponse r = new HttpResponse(200, HttpResponse.JSON, body, body.length, null, false);
            r.dbNanos = dbNanos;
            return r;
        } catch (SQLException e) {
            if (retry) {
                // the connection may have been left over from before the database restarted:
                // drop it (and the idle ones with it) and try once more on a fresh one
                source.give(conn, true);
                conn = null;
                return query(kind, rows, false);
            }
            return HttpResponse.unavailable(reason(e), System.nanoTime() - t0);
        } finally {
            if (conn != null) {
                source.give(conn, broken);
            }
        }
    }

    /** The first line of the driver's message, at most 200 characters. */
    static String reason(SQLException e) {
        String why = e.getMessage() == null ? e.toString() : e.getMessage().split("\n", 2)[0];
        return why.length() > 200 ? why.substring(0, 200) : why;
    }

    private static int rowsOf(String raw) throws HttpError {
        boolean digits = !raw.isEmpty() && raw.length() <= 4;
        for (int i = 0; digits && i < raw.length(); i++) {
            digits = raw.charAt(i) >= '0' && raw.charAt(i) <= '9';
        }
        int v = digits ? Integer.parseInt(raw) : -1;
        if (v < 1 || v > MAX_ROWS) {
            throw HttpError.badRequest("bad parameter: rows");
        }
        return v;
    }

    private int participants(Connection conn) throws SQLException {
        int n = participants;
        if (n > 0) {
            return n;
        }
        try (PreparedStatement s = conn.prepareStatement("SELECT participants FROM perfctl_meta");
             ResultSet rs = s.executeQuery()) {
            n = rs.next() ? Math.max(1, rs.getInt(1)) : 1;
        }
        participants = n;
        return n;
    }

    private static int count(Connection conn, String sql, int key, int limit) throws SQLException {
        try (PreparedStatement s = conn.prepareStatement(sql)) {
            if (key > 0) {
                s.setInt(1, key);
            }
            if (limit > 0) {
                s.setInt(2, limit);
            }
            int n = 0;
            try (ResultSet rs = s.executeQuery()) {
                while (rs.next()) {
                    n++;
                }
            }
            return n;
        }
    }
}
