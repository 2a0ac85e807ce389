package perfctl.server;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.rmi.AlreadyBoundException;
import java.rmi.Remote;
import java.rmi.RemoteException;
import java.rmi.registry.LocateRegistry;
import java.rmi.registry.Registry;
import java.rmi.server.ObjID;
import java.rmi.server.RMIClientSocketFactory;
import java.rmi.server.RMIServerSocketFactory;
import java.util.Arrays;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * The Java RMI server (models `rmi` and `rmi-single`): an RMI registry and the {@link RmiService}
 * object on one port, behind {@link RmiServerSockets}. Requests go through the same {@link Router}
 * as HTTP, so /work, /search, /health, /stats and /db mean what servers/PROTOCOL.md says (/db: the
 * same {@link Db} over JDBC as the plain HTTP models, its time in the database in
 * {@link RmiReply#dbNs}); POST /register binds the user's name in the RMI registry.
 *
 * The object is exported under a well-known object number with the JDK's own export machinery
 * (sun.rmi.server.UnicastServerRef, as the registry itself is exported), reached by reflection:
 * the JVM needs `--add-exports java.rmi/sun.rmi.server=ALL-UNNAMED --add-exports
 * java.rmi/sun.rmi.transport=ALL-UNNAMED` (perfctl passes them).
 */
final class RmiServer {
    private static final byte[] CREATED = "created\n".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] EXISTS = "exists\n".getBytes(StandardCharsets.US_ASCII);

    private RmiServer() {
    }

    static void run(Config config, Search search, Db db) {
        int slots = config.model.equals("rmi-single") ? 1 : config.threads;
        RmiServerSockets sockets = new RmiServerSockets(config.host, config.backlog, slots);
        Stats stats = new Stats(config.model, config.buckets);
        stats.attach(new Model() {
            @Override
            public void dispatch(Connection c) {
                throw new UnsupportedOperationException("RMI dispatches its own connections");
            }

            @Override
            public int threads() {
                return slots;
            }

            @Override
            public int queueLength() {
                return sockets.waiting();
            }
        }, new perfctl.server.Registry());
        Router router = new Router(new Work(stats, config.seed), search, new perfctl.server.Registry(), stats, db);
        int port;
        Registry registry;
        Service service;
        try {
            port = config.port != 0 ? config.port : anyFreePort(config.host);
            registry = LocateRegistry.createRegistry(port, null, sockets);
            service = new Service(router, stats, registry);
            exportWellKnown(service, port, sockets);
            registry.rebind(RmiService.NAME, service);
        } catch (IOException | ReflectiveOperationException e) {
            Throwable cause = e.getCause() != null ? e.getCause() : e;
            System.err.println("perfctl-server: cannot listen on " + config.host + ":" + config.port + ": " + cause);
            System.exit(1);
            return;
        }
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            System.out.flush();
            System.err.flush();
            Runtime.getRuntime().halt(0); // SIGTERM / SIGINT: status 0, open connections dropped
        }, "shutdown"));
        System.out.println("perfctl-server listening on " + config.host + ":" + port + " impl=java model="
                + config.model + " threads=" + config.threads + " backlog=" + config.backlog);
        System.out.flush();
        try {
            new CountDownLatch(1).await(); // RMI's threads serve; this one only keeps main alive
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static int anyFreePort(String host) throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getByName(host))) {
            return s.getLocalPort();
        }
    }

    /** Export `impl` as object number OBJ_NUM on the registry's endpoint (port, factories). */
    private static void exportWellKnown(Remote impl, int port, RMIServerSocketFactory ssf)
            throws ReflectiveOperationException {
        Class<?> liveRef = Class.forName("sun.rmi.transport.LiveRef");
        Object ref = liveRef.getConstructor(ObjID.class, int.class, RMIClientSocketFactory.class,
                RMIServerSocketFactory.class).newInstance(new ObjID(RmiService.OBJ_NUM), port, null, ssf);
        Class<?> serverRef = Class.forName("sun.rmi.server.UnicastServerRef");
        Object exporter = serverRef.getConstructor(liveRef).newInstance(ref);
        serverRef.getMethod("exportObject", Remote.class, Object.class, boolean.class)
                .invoke(exporter, impl, null, true); // permanent: not subject to distributed GC
    }

    /** The remote object. Runs on RMI's connection threads. */
    static final class Service implements RmiService {
        private final Router router;
        private final Stats stats;
        private final Registry registry;
        // RMI's registry accepts binds from this host only, judged by the calling client's
        // address; from a thread outside any RMI call the bind is a local one, whatever
        // network (namespace) the client came through.
        private final ExecutorService binder = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "registry-bind");
            t.setDaemon(true);
            return t;
        });

        Service(Router router, Stats stats, Registry registry) {
            this.router = router;
            this.stats = stats;
            this.registry = registry;
        }

        @Override
        public RmiReply call(String method, String target, byte[] body) {
            long t0 = System.nanoTime();
            int status;
            byte[] out;
            long dbNs = -1;
            try {
                if (target.equals("/register") || target.startsWith("/register?")) {
                    status = method.equals("POST") ? register(body) : 405;
                    out = status == 201 ? CREATED : status == 409 ? EXISTS : new byte[0];
                } else {
                    HttpResponse r = router.route(new HttpRequest(method, target, true, true,
                            body == null ? HttpRequest.NO_BODY : body));
                    status = r.status;
                    out = Arrays.copyOf(r.body, r.bodyLength);
                    dbNs = r.dbNanos;
                }
            } catch (HttpError e) {
                status = e.status;
                out = (e.getMessage() + "\n").getBytes(StandardCharsets.UTF_8);
            }
            stats.responded();
            return new RmiReply(status, out, System.nanoTime() - t0, -1, dbNs);
        }

        /** 201 when `user` was bound in the RMI registry now, 409 when it was already. */
        private int register(byte[] body) throws HttpError {
            Map<String, String> form = Query.parse(new String(body == null ? HttpRequest.NO_BODY : body,
                    StandardCharsets.ISO_8859_1));
            String user = form.get("user");
            if (user == null || user.isEmpty() || user.getBytes(StandardCharsets.UTF_8).length
                    > perfctl.server.Registry.MAX_USER_BYTES) {
                throw HttpError.badRequest("user must be 1.." + perfctl.server.Registry.MAX_USER_BYTES + " bytes");
            }
            Future<Integer> done = binder.submit(() -> {
                try {
                    registry.bind(user, this);
                    return 201;
                } catch (AlreadyBoundException e) {
                    return 409;
                }
            });
            try {
                return done.get();
            } catch (ExecutionException e) {
                return 500;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return 500;
            }
        }
    }
}
