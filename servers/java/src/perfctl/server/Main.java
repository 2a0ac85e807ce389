package perfctl.server;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketException;

/**
 * perfctl's bundled Java server (servers/PROTOCOL.md): parse flags, load the corpus, listen,
 * print the listening line, accept forever; SIGTERM/SIGINT close the listener and exit 0.
 */
public final class Main {
    private static volatile int exitStatus = 0;

    private Main() {
    }

    public static void main(String[] args) {
        Config config;
        Model model;
        Search search;
        Db db;
        try {
            config = Config.parse(args);
            HttpInput.idleTimeoutMs = config.idleTimeoutMs;
            if (config.model.startsWith("rmi")) { // Java RMI instead of HTTP (RmiServer)
                RmiServer.run(config, Search.load(config.corpus, config.byType), Db.plain(config));
                return;
            }
            model = Model.create(config); // `virtual` on a JVM < 21 fails here
            search = Search.load(config.corpus, config.byType);
            db = Db.plain(config);
        } catch (Config.Error e) {
            System.err.println("perfctl-server: " + e.getMessage());
            System.exit(2);
            return;
        } catch (IOException e) {
            System.err.println("perfctl-server: bad value for --corpus: cannot read it: " + e);
            System.exit(2);
            return;
        }

        ServerSocket listener;
        try {
            listener = new ServerSocket();
            listener.setReuseAddress(true);
            listener.bind(new InetSocketAddress(config.host, config.port), config.backlog);
        } catch (IOException | IllegalArgumentException | SecurityException e) {
            System.err.println("perfctl-server: cannot listen on " + config.host + ":" + config.port + ": " + e.getMessage());
            System.exit(1);
            return;
        }
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                listener.close();
            } catch (IOException ignored) {
                // exiting anyway
            }
            System.out.flush();
            System.err.flush();
            Runtime.getRuntime().halt(exitStatus); // SIGTERM / SIGINT: status 0, open connections dropped
        }, "shutdown"));

        Stats stats = new Stats(config.model, config.buckets);
        Registry registry = new Registry();
        stats.attach(model, registry);
        Router router = new Router(new Work(stats, config.seed), search, registry, stats, db);

        System.out.println("perfctl-server listening on " + config.host + ":" + listener.getLocalPort()
                + " impl=java model=" + config.model + " threads=" + config.threads + " backlog=" + config.backlog);
        System.out.flush();

        acceptLoop(listener, model, router, stats);
    }

    private static void acceptLoop(ServerSocket listener, Model model, Router router, Stats stats) {
        long lastComplaint = 0;
        while (!listener.isClosed()) {
            Socket s;
            try {
                s = listener.accept();
            } catch (IOException e) {
                if (listener.isClosed()) {
                    break;
                }
                long now = System.nanoTime();
                if (now - lastComplaint > 1_000_000_000L) { // e.g. EMFILE: complain once a second
                    System.err.println("perfctl-server: accept failed: " + e.getMessage());
                    lastComplaint = now;
                }
                pause();
                continue;
            }
            long acceptedAt = System.nanoTime();
            stats.connectionOpened();
            Connection c = new Connection(s, acceptedAt, router, stats);
            try {
                s.setTcpNoDelay(true);
                s.setSoTimeout(HttpInput.idleTimeoutMs);
            } catch (SocketException e) {
                c.reject("socket setup failed");
                continue;
            }
            model.dispatch(c);
        }
    }

    private static void pause() {
        try {
            Thread.sleep(10);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
