package perfctl.driver;

import java.util.Arrays;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A block of request rows: the columns of loadgen/records.py as parallel primitive arrays of a
 * fixed capacity. The driver never grows one: a full block is sealed and a fresh one taken from
 * the RowWriter, which writes sealed blocks to disk and recycles them, so the heap holds a
 * bounded number of rows whatever the phase's length.
 *
 * Threads: one producer adds rows (a closed-load client, the open-load dispatcher, a burst
 * release); each row is then filled in by one thread (the producer, or the client that serves
 * it). A block is ready to write when it is sealed and every row in it has ended: `pending`
 * counts the rows added but not ended, plus one while the block is unsealed, and the thread
 * that brings it to zero hands the block to the writer. Nothing may touch a row after ending it.
 */
final class Rows {
    // error classes, loadgen/records.py
    static final byte OK = 0, REFUSED = 1, RESET = 2, TIMEOUT = 3, PARSE = 4, DROPPED = 5, UNFINISHED = 6;
    /** svcNs, queueNs, dbNs: the server did not say (written as an empty CSV field: NaN). */
    static final long NONE = Long.MIN_VALUE;

    final long[] intended;
    final long[] sent;
    final long[] firstByte;
    final long[] done;
    final short[] status;
    final byte[] error;
    final int[] bytes;
    final int[] conn;
    final long[] svcNs;
    final long[] queueNs;
    final long[] dbNs;
    final short[] request; // the request's index in the spec's mix (Mix)
    int n;

    private final RowWriter writer;
    private final AtomicInteger pending = new AtomicInteger(1);
    private final AtomicBoolean queued = new AtomicBoolean();

    Rows(int capacity, RowWriter writer) {
        this.writer = writer;
        intended = new long[capacity];
        sent = new long[capacity];
        firstByte = new long[capacity];
        done = new long[capacity];
        status = new short[capacity];
        error = new byte[capacity];
        bytes = new int[capacity];
        conn = new int[capacity];
        svcNs = new long[capacity];
        queueNs = new long[capacity];
        dbNs = new long[capacity];
        request = new short[capacity];
        clear(capacity);
    }

    int capacity() {
        return intended.length;
    }

    boolean full() {
        return n == intended.length;
    }

    /** A new row intended at `intendedNs`; its index. The block must not be full. */
    int add(long intendedNs) {
        pending.incrementAndGet();
        intended[n] = intendedNs;
        return n++;
    }

    /** Row i is final (answered or failed); the last one of a sealed block queues it. */
    void end(int i) {
        if (pending.decrementAndGet() == 0) {
            queue();
        }
    }

    /** Ends row i with an error class at t (no answer). */
    void fail(int i, byte err, long t) {
        error[i] = err;
        done[i] = t;
        end(i);
    }

    /** No more rows will be added. */
    void seal() {
        if (pending.decrementAndGet() == 0) {
            queue();
        }
    }

    /** Hands the block to the writer, once: false when it already was. */
    boolean queue() {
        if (!queued.compareAndSet(false, true)) {
            return false;
        }
        writer.write(this);
        return true;
    }

    /** Claims the block for writing as the phase ends (RowWriter.finish); false when queued. */
    boolean claim() {
        return queued.compareAndSet(false, true);
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

    /** Empty again, for reuse once written. */
    void reset() {
        clear(n);
        n = 0;
        pending.set(1);
        queued.set(false);
    }

    private void clear(int upTo) {
        Arrays.fill(intended, 0, upTo, 0L);
        Arrays.fill(sent, 0, upTo, 0L);
        Arrays.fill(firstByte, 0, upTo, 0L);
        Arrays.fill(done, 0, upTo, 0L);
        Arrays.fill(status, 0, upTo, (short) 0);
        Arrays.fill(error, 0, upTo, OK);
        Arrays.fill(bytes, 0, upTo, 0);
        Arrays.fill(conn, 0, upTo, -1);
        Arrays.fill(svcNs, 0, upTo, NONE);
        Arrays.fill(queueNs, 0, upTo, NONE);
        Arrays.fill(dbNs, 0, upTo, NONE);
        Arrays.fill(request, 0, upTo, (short) 0);
    }
}
