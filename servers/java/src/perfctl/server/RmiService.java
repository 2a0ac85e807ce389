package perfctl.server;

import java.rmi.Remote;
import java.rmi.RemoteException;

/**
 * The remote interface of the RMI server (`--model rmi | rmi-single`): one operation per
 * request of servers/PROTOCOL.md, named by its path. `call("GET", "/work?spin_us=200", body)`
 * does what `GET /work?spin_us=200` does over HTTP and answers with the same status and body.
 * Besides the HTTP endpoints, `POST /register` binds the user's name in the server's RMI
 * registry (201 created, 409 exists).
 *
 * The object is exported under the well-known object number {@link #OBJ_NUM} on the same port
 * as the registry, so a client can reach it without a registry lookup (a lookup returns a
 * stub, and unmarshalling a stub starts RMI's distributed GC traffic on a connection of its
 * own). It is also bound in the registry as {@link #NAME}.
 */
public interface RmiService extends Remote {
    String NAME = "perfctl";
    int OBJ_NUM = 7070;

    /** One request: method (GET/POST), target (path and query), form body (may be empty). */
    RmiReply call(String method, String target, byte[] body) throws RemoteException;
}
