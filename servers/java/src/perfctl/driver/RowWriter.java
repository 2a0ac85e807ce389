package perfctl.driver;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Set;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;

/**
 * Streams the rows of a load phase to `requests.csv` as they finish (loadgen/DRIVER.md), so the
 * driver's memory stays flat however long the phase: the heap holds at most `maxBlocks` blocks
 * of `blockRows` rows (67 bytes a row), the ones being filled and the ones waiting to be
 * written: ~17 MB for up to 64 producers (4096-row blocks), ~55 MB beyond (smaller blocks).
 *
 * Producers take empty blocks with `block()`; a block queues itself here when it is sealed and
 * all its rows have ended (Rows). One writer thread formats queued blocks as CSV and appends
 * them to `requests.csv.part`, then recycles them. The blocks a phase needs are made before it
 * starts (`prepare`, then the driver's one collection before the start promotes them to the old
 * generation), so the same arrays serve the whole phase and cost the young collections nothing.
 * Rows held until the phase ends, as before, were copied by every young collection and made its
 * longest pauses (17-70 ms). The CSV is all integers (ms columns are printed from integer ns),
 * formatted by hand: ~0.3 us a row on the writer thread, off the clients' path.
 *
 * When the writer falls behind and `maxBlocks` blocks are out, `block()` waits (counted in
 * `row_block_waits`): memory stays bounded, and an open-load dispatcher that waits shows as
 * send lateness. Every producer holds one block at a time, so `maxBlocks` > producers keeps
 * them going. `finish()` ends the phase: every block still out is closed out (its open rows
 * become timeout or unfinished) and written, the file renamed to `requests.csv`.
 */
final class RowWriter {
    static final int MAX_BLOCK_ROWS = 4096;
    static final int MIN_BLOCK_ROWS = 256;
    static final int MIN_BLOCKS = 64;
    static final String HEADER =
            "intended_ns,sent_ns,first_byte_ns,done_ns,status,error,bytes,conn,svc_ms,queue_ms,db_ms,request\n";

    private static final Rows STOP = new Rows(0, null);

    private final Path part;
    private final Path out;
    private final int blockRows;
    private final int maxBlocks;
    private final OutputStream file;
    private final BlockingQueue<Rows> ready = new LinkedBlockingQueue<>();
    private final Set<Rows> taken = ConcurrentHashMap.newKeySet();   // taken and not yet written
    private final ArrayDeque<Rows> free = new ArrayDeque<>();
    private final Thread thread;
    private final byte[] buf = new byte[1 << 16];
    private int len;
    private long rows;
    private int made;
    private int peak;
    private long waits;
    private volatile IOException failure;

    /** Opens `requests.csv.part` in dir for `producers` threads that add rows at once (closed:
     *  the clients; open: the dispatcher), and starts the writer thread. */
    RowWriter(Path dir, int producers) throws IOException {
        this.out = dir.resolve("requests.csv");
        this.part = dir.resolve("requests.csv.part");
        int p = Math.max(1, producers);
        this.blockRows = Math.max(MIN_BLOCK_ROWS, Math.min(MAX_BLOCK_ROWS,
                Integer.highestOneBit(MIN_BLOCKS * MAX_BLOCK_ROWS / p)));
        this.maxBlocks = Math.max(MIN_BLOCKS, 3 * p);
        this.file = Files.newOutputStream(part);
        for (int i = 0; i < HEADER.length(); i++) {
            buf[len++] = (byte) HEADER.charAt(i);
        }
        thread = new Thread(this::loop, "row-writer");
        thread.setDaemon(true);
        thread.start();
    }

    /** Makes `count` empty blocks now (at most maxBlocks), before the phase: the ones it will
     *  need, so that they are old by the time it starts. */
    void prepare(int count) {
        synchronized (free) {
            while (made < Math.min(count, maxBlocks)) {
                free.add(new Rows(blockRows, this));
                made++;
            }
        }
    }

    /** An empty block of blockRows rows; waits while maxBlocks are out. */
    Rows block() {
        synchronized (free) {
            boolean waited = false;
            while (free.isEmpty() && taken.size() >= maxBlocks) {
                waited = true;
                try {
                    free.wait();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    break;
                }
            }
            waits += waited ? 1 : 0;
            Rows r = free.poll();
            if (r == null) {
                r = new Rows(blockRows, this);
                made++;
            }
            taken.add(r);
            peak = Math.max(peak, taken.size());
            return r;
        }
    }

    /** A block of `capacity` rows (a burst release: one row per client), not recycled. */
    Rows block(int capacity) {
        Rows r = new Rows(capacity, this);
        synchronized (free) {
            taken.add(r);
            peak = Math.max(peak, taken.size());
        }
        return r;
    }

    /** Called by Rows.queue(): every row of r is final. */
    void write(Rows r) {
        ready.add(r);
    }

    private void loop() {
        try {
            while (true) {
                Rows r = ready.take();
                if (r == STOP) {
                    break;
                }
                if (failure == null) {
                    try {
                        append(r);
                    } catch (IOException e) {
                        failure = e;   // keep draining: producers must not wait for blocks
                    }
                }
                rows += r.n;
                synchronized (free) {
                    taken.remove(r);
                    if (r.capacity() == blockRows) {
                        r.reset();
                        free.add(r);
                    }
                    free.notifyAll();
                }
            }
            if (failure == null) {
                flush();
            }
        } catch (IOException e) {
            failure = e;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /**
     * Ends the phase: closes out and writes every block still out (rows of a client stuck past
     * the deadline end as timeout or unfinished; the client's later writes are lost), waits for
     * the writer and renames the file to requests.csv. Returns the rows closed out here.
     */
    long finish(long nowNs, long timeoutNs) throws IOException, InterruptedException {
        long closedOut = 0;
        for (Rows r : new ArrayList<>(taken)) {
            if (r.claim()) {
                closedOut += r.closeOut(nowNs, timeoutNs);
                ready.add(r);
            }
        }
        ready.add(STOP);
        thread.join();
        file.close();
        if (failure != null) {
            throw failure;
        }
        Files.move(part, out, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        return closedOut;
    }

    /** Rows written (valid after finish). */
    long rows() {
        return rows;
    }

    /** What the writer did, for summary.json: how many blocks were made and out at once, how
     *  often a producer waited for one. */
    void into(java.util.Map<String, Object> summary) {
        synchronized (free) {
            summary.put("row_block_rows", blockRows);
            summary.put("row_blocks_max", maxBlocks);
            summary.put("row_blocks_made", made);
            summary.put("row_blocks_peak", peak);
            summary.put("row_block_waits", waits);
        }
    }

    // --- CSV ------------------------------------------------------------------------------------
    private void append(Rows r) throws IOException {
        for (int i = 0; i < r.n; i++) {
            if (len > buf.length - 512) {
                flush();
            }
            putLong(r.intended[i]);
            put(',');
            putLong(r.sent[i]);
            put(',');
            putLong(r.firstByte[i]);
            put(',');
            putLong(r.done[i]);
            put(',');
            putLong(r.status[i]);
            put(',');
            putLong(r.error[i]);
            put(',');
            putLong(r.bytes[i]);
            put(',');
            putLong(r.conn[i]);
            put(',');
            putMs(r.svcNs[i]);
            put(',');
            putMs(r.queueNs[i]);
            put(',');
            putMs(r.dbNs[i]);
            put(',');
            putLong(r.request[i]);
            put('\n');
        }
    }

    private void flush() throws IOException {
        file.write(buf, 0, len);
        len = 0;
    }

    private void put(char c) {
        buf[len++] = (byte) c;
    }

    private void putLong(long v) {
        if (v < 0) {
            put('-');
            if (v == Long.MIN_VALUE) {   // no positive twin
                putLong(-(v / 10));
                put((char) ('0' - v % 10));
                return;
            }
            v = -v;
        }
        int start = len;
        do {
            buf[len++] = (byte) ('0' + v % 10);
            v /= 10;
        } while (v != 0);
        for (int i = start, j = len - 1; i < j; i++, j--) {
            byte t = buf[i];
            buf[i] = buf[j];
            buf[j] = t;
        }
    }

    /** ns as ms with 6 decimals, exactly; NONE as nothing (NaN). */
    private void putMs(long ns) {
        if (ns == Rows.NONE) {
            return;
        }
        if (ns < 0) {
            put('-');
            ns = -ns;
        }
        putLong(ns / 1_000_000);
        put('.');
        long frac = ns % 1_000_000;
        for (long d = 100_000; d > 0; d /= 10) {
            put((char) ('0' + frac / d % 10));
        }
    }
}
