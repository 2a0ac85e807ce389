package perfctl.driver;

import java.io.EOFException;
import java.io.IOException;
import java.io.InvalidClassException;
import java.lang.reflect.Constructor;
import java.lang.reflect.Proxy;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketException;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.rmi.NotBoundException;
import java.rmi.RemoteException;
import java.rmi.ServerError;
import java.rmi.ServerException;
import java.rmi.registry.LocateRegistry;
import java.rmi.registry.Registry;
import java.rmi.server.ObjID;
import java.rmi.server.RMIClientSocketFactory;
import java.rmi.server.RMIServerSocketFactory;
import java.rmi.server.RemoteObjectInvocationHandler;
import java.rmi.server.RemoteRef;
import java.util.ArrayList;
import java.util.List;

import perfctl.server.RmiReply;
import perfctl.server.RmiService;

/**
 * One RMI client: its own socket factory, so its own connections (RMI pools connections per
 * endpoint, and an endpoint includes the factory, compared by identity here). A client built
 * for one attempt (burst, or closed/open load without keep-alive) closes its connections after
 * it; a long-lived one keeps them, like an HTTP keep-alive connection.
 *
 * The service stub is built here from the server's well-known object number rather than
 * looked up in the registry: a looked-up stub starts RMI's distributed GC on a connection of its
 * own, which a one-attempt client would pay for on every attempt. Building it takes the JDK's
 * own reference classes, reached by reflection (the JVM needs `--add-exports
 * java.rmi/sun.rmi.{server,transport,transport.tcp}=ALL-UNNAMED`; perfctl passes them).
 */
final class Client implements RMIClientSocketFactory {
    private static final Constructor<?> ENDPOINT;
    private static final Constructor<?> LIVE_REF;
    private static final Constructor<?> UNICAST_REF;

    static {
        try {
            Class<?> endpoint = Class.forName("sun.rmi.transport.tcp.TCPEndpoint");
            Class<?> liveRef = Class.forName("sun.rmi.transport.LiveRef");
            ENDPOINT = endpoint.getConstructor(String.class, int.class, RMIClientSocketFactory.class,
                    RMIServerSocketFactory.class);
            LIVE_REF = liveRef.getConstructor(ObjID.class, Class.forName("sun.rmi.transport.Endpoint"), boolean.class);
            UNICAST_REF = Class.forName("sun.rmi.server.UnicastRef").getConstructor(liveRef);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    static volatile int connectTimeoutMs = 5000;
    static volatile int readTimeoutMs = 5000;
    static volatile long timeoutNs = 5_000_000_000L;

    final int id;
    private final String host;
    private final int port;
    private final List<Socket> opened = new ArrayList<>();
    private RmiService service;
    private Registry registry;

    Client(int id, String host, int port) {
        this.id = id;
        this.host = host;
        this.port = port;
    }

    RmiService service() throws RemoteException {
        if (service == null) {
            try {
                Object ep = ENDPOINT.newInstance(host, port, this, null);
                Object ref = LIVE_REF.newInstance(new ObjID(RmiService.OBJ_NUM), ep, false);
                RemoteRef r = (RemoteRef) UNICAST_REF.newInstance(ref);
                service = (RmiService) Proxy.newProxyInstance(RmiService.class.getClassLoader(),
                        new Class<?>[] {RmiService.class}, new RemoteObjectInvocationHandler(r));
            } catch (ReflectiveOperationException e) {
                throw new RemoteException("cannot build the RMI stub", e);
            }
        }
        return service;
    }

    Registry registry() throws RemoteException {
        if (registry == null) {
            registry = LocateRegistry.getRegistry(host, port, this);
        }
        return registry;
    }

    @Override
    public Socket createSocket(String h, int p) throws IOException {
        Socket s = new Socket();
        try {
            s.setTcpNoDelay(true);
            s.setSoTimeout(readTimeoutMs);
            s.connect(new InetSocketAddress(h, p), connectTimeoutMs);
        } catch (IOException e) {
            s.close();
            throw e;
        }
        synchronized (opened) {
            opened.add(s);
        }
        return s;
    }

    /** Close every connection this client opened. */
    void close() {
        synchronized (opened) {
            for (Socket s : opened) {
                try {
                    s.close();
                } catch (IOException ignored) {
                    // closing anyway
                }
            }
            opened.clear();
        }
    }

    /** One request as row i of rows: the call named by the target's path, timed and classified,
     *  then the row ended (Rows.end: nothing touches it afterwards). Returns its sent_ns. */
    long attempt(Rows rows, int i, String method, String target, byte[] body) {
        long t0 = System.nanoTime();
        rows.sent[i] = t0;
        rows.conn[i] = id;
        try {
            if (target.equals("/lookup") || target.startsWith("/lookup?")) {
                String name = param(target, "name", RmiService.NAME);
                try {
                    registry().lookup(name);
                    rows.status[i] = 200;
                } catch (NotBoundException e) {
                    rows.status[i] = 404;
                }
            } else {
                RmiReply reply = service().call(method, target, body);
                rows.status[i] = (short) reply.status;
                rows.bytes[i] = reply.body == null ? 0 : reply.body.length;
                rows.svcNs[i] = reply.svcNs;
                rows.queueNs[i] = reply.queueNs < 0 ? Rows.NONE : reply.queueNs;
                rows.dbNs[i] = reply.dbNs < 0 ? Rows.NONE : reply.dbNs;
                if (reply.status >= 500) {
                    serverFailed(target, reply);
                }
            }
            long t = System.nanoTime();
            rows.firstByte[i] = t;
            rows.done[i] = t;
            if (t - t0 > timeoutNs) {   // answered, but after the client gave up
                rows.error[i] = Rows.TIMEOUT;
            }
            rows.end(i);
        } catch (ServerException | ServerError e) { // the remote method itself failed: an answer
            long t = System.nanoTime();
            rows.status[i] = 500;
            rows.firstByte[i] = t;
            rows.done[i] = t;
            rows.end(i);
        } catch (RemoteException e) {
            rows.fail(i, classify(e), System.nanoTime());
        }
        return t0;
    }

    private static final java.util.Set<String> REPORTED = java.util.concurrent.ConcurrentHashMap.newKeySet();

    /** The first few distinct reasons the server gave for a 5xx (e.g. /db: "database
     * unavailable: ...") go to stderr, the driver's log, once each: the rows carry the status,
     * the log says why. */
    private static void serverFailed(String target, RmiReply reply) {
        int q = target.indexOf('?');
        String path = q < 0 ? target : target.substring(0, q);
        String why = reply.body == null ? "" : new String(reply.body, StandardCharsets.UTF_8).strip();
        String line = path + " answered " + reply.status + ": " + (why.length() > 300 ? why.substring(0, 300) : why);
        if (REPORTED.size() < 5 && REPORTED.add(line)) {
            System.err.println("rmi driver: " + line);
        }
    }

    /** The error class of a failed call (loadgen/records.py). */
    static byte classify(Throwable e) {
        for (Throwable c = e; c != null; c = c.getCause()) {
            if (c instanceof SocketTimeoutException) {
                return Rows.TIMEOUT;
            }
            if (c instanceof java.net.ConnectException) {
                String m = String.valueOf(c.getMessage());
                return m.contains("timed out") ? Rows.TIMEOUT : Rows.REFUSED;
            }
            if (c instanceof ClassNotFoundException || c instanceof InvalidClassException) {
                return Rows.PARSE;
            }
            if (c instanceof SocketException || c instanceof EOFException) {
                return Rows.RESET;
            }
        }
        return Rows.RESET;
    }

    private static String param(String target, String name, String dflt) {
        int q = target.indexOf('?');
        if (q < 0) {
            return dflt;
        }
        for (String kv : target.substring(q + 1).split("&")) {
            int eq = kv.indexOf('=');
            if (eq > 0 && kv.substring(0, eq).equals(name)) {
                return java.net.URLDecoder.decode(kv.substring(eq + 1), StandardCharsets.UTF_8);
            }
        }
        return dflt;
    }
}
