package perfctl.server;

import java.io.Serializable;

/**
 * An RMI call's answer: the status and body the HTTP endpoint would give, and the server-side
 * times (the RMI counterpart of the Server-Timing header): `svcNs` from the start of serving
 * to the answer being ready, `queueNs` waiting for a worker (-1: not measured; RMI hands
 * calls to its connection threads, and the wait for a connection slot happens in the listen
 * backlog, which the server cannot see), `dbNs` the part of `svcNs` spent in the database
 * (/db that reached it: Server-Timing `db;dur=`; -1 otherwise).
 */
public final class RmiReply implements Serializable {
    private static final long serialVersionUID = 2L;

    public final int status;
    public final byte[] body;
    public final long svcNs;
    public final long queueNs;
    public final long dbNs;

    public RmiReply(int status, byte[] body, long svcNs, long queueNs, long dbNs) {
        this.status = status;
        this.body = body;
        this.svcNs = svcNs;
        this.queueNs = queueNs;
        this.dbNs = dbNs;
    }
}
