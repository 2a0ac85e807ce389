package perfctl.driver;

import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Arrays;
import java.util.List;

/**
 * Request rows as parallel primitive arrays (the columns of loadgen/records.py), grown by
 * doubling. One Rows is written by one thread at a time; open load preallocates one row per
 * arrival and lets each row be written by the thread that serves it.
 */
final class Rows {
    // error classes, loadgen/records.py
    static final byte OK = 0, REFUSED = 1, RESET = 2, TIMEOUT = 3, PARSE = 4, DROPPED = 5, UNFINISHED = 6;

    long[] intended;
    long[] sent;
    long[] firstByte;
    long[] done;
    short[] status;
    byte[] error;
    int[] bytes;
    int[] conn;
    double[] svcMs;
    double[] queueMs;
    double[] dbMs;
    int n;

    Rows(int capacity) {
        int c = Math.max(16, capacity);
        intended = new long[c];
        sent = new long[c];
        firstByte = new long[c];
        done = new long[c];
        status = new short[c];
        error = new byte[c];
        bytes = new int[c];
        conn = new int[c];
        svcMs = new double[c];
        queueMs = new double[c];
        dbMs = new double[c];
        Arrays.fill(conn, -1);
        Arrays.fill(svcMs, Double.NaN);
        Arrays.fill(queueMs, Double.NaN);
        Arrays.fill(dbMs, Double.NaN);
    }

    /** A new row intended at `intendedNs`; its index. */
    int add(long intendedNs) {
        if (n == intended.length) {
            grow();
        }
        intended[n] = intendedNs;
        return n++;
    }

    private void grow() {
        int c = intended.length * 2;
        intended = Arrays.copyOf(intended, c);
        sent = Arrays.copyOf(sent, c);
        firstByte = Arrays.copyOf(firstByte, c);
        done = Arrays.copyOf(done, c);
        status = Arrays.copyOf(status, c);
        error = Arrays.copyOf(error, c);
        bytes = Arrays.copyOf(bytes, c);
        conn = Arrays.copyOf(conn, c);
        int old = svcMs.length;
        svcMs = Arrays.copyOf(svcMs, c);
        queueMs = Arrays.copyOf(queueMs, c);
        dbMs = Arrays.copyOf(dbMs, c);
        Arrays.fill(conn, old, c, -1);
        Arrays.fill(svcMs, old, c, Double.NaN);
        Arrays.fill(queueMs, old, c, Double.NaN);
        Arrays.fill(dbMs, old, c, Double.NaN);
    }

    /** Ends row i with an error class at t (no answer). */
    void fail(int i, byte err, long t) {
        error[i] = err;
        done[i] = t;
    }

    /** Rows still open when the phase ends: timeout if sent over timeoutNs ago, else unfinished. */
    int closeOut(long now, long timeoutNs) {
        int count = 0;
        for (int i = 0; i < n; i++) {
            if (done[i] == 0 && error[i] == OK) {
                error[i] = sent[i] > 0 && now - sent[i] >= timeoutNs ? TIMEOUT : UNFINISHED;
                done[i] = now;
                count++;
            }
        }
        return count;
    }

    /** Writes every row of every part as requests.csv (through a temporary file). */
    static long writeCsv(Path out, List<Rows> parts) throws IOException {
        Path tmp = out.resolveSibling(out.getFileName() + ".tmp");
        long total = 0;
        try (BufferedWriter w = Files.newBufferedWriter(tmp, StandardCharsets.US_ASCII)) {
            w.write("intended_ns,sent_ns,first_byte_ns,done_ns,status,error,bytes,conn,svc_ms,queue_ms,db_ms\n");
            StringBuilder b = new StringBuilder(128);
            for (Rows r : parts) {
                for (int i = 0; i < r.n; i++) {
                    b.setLength(0);
                    b.append(r.intended[i]).append(',').append(r.sent[i]).append(',').append(r.firstByte[i])
                            .append(',').append(r.done[i]).append(',').append(r.status[i]).append(',')
                            .append(r.error[i]).append(',').append(r.bytes[i]).append(',').append(r.conn[i])
                            .append(',');
                    if (!Double.isNaN(r.svcMs[i])) {
                        b.append(r.svcMs[i]);
                    }
                    b.append(',');
                    if (!Double.isNaN(r.queueMs[i])) {
                        b.append(r.queueMs[i]);
                    }
                    b.append(',');
                    if (!Double.isNaN(r.dbMs[i])) {
                        b.append(r.dbMs[i]);
                    }
                    b.append('\n');
                    w.append(b);
                }
                total += r.n;
            }
        }
        Files.move(tmp, out, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        return total;
    }
}
