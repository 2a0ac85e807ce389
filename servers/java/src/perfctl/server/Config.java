package perfctl.server;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;

/** The command line of servers/PROTOCOL.md, parsed and checked. A bad flag is a {@link Config.Error}. */
final class Config {
    static final String[] MODELS = {"single", "thread", "pool", "virtual", "rmi", "rmi-single"};
    /** The models of the Maven-built servers on real stacks (servers/java/stacks). */
    static final String[] STACK_MODELS = {"servlet", "spring"};

    /** A bad flag or value: Main prints the message as one stderr line and exits with status 2. */
    static final class Error extends Exception {
        private static final long serialVersionUID = 1L;

        Error(String message) {
            super(message);
        }
    }

    int port = -1;
    String host = "127.0.0.1";
    String model = MODELS[0];
    int threads = 4;
    int backlog = 128;
    int buckets = 1024;
    boolean byType = false;
    Path corpus;
    long seed = 1;
    int idleTimeoutMs = 10_000;
    String db;      // --db URI for /db (every model: Db), or null
    int dbPool;     // --db-pool: JDBC pool size; 0 means --threads

    static final String USAGE = "usage: java perfctl.server.Main --port P [--host 127.0.0.1] "
            + "[--model single|thread|pool|virtual|rmi|rmi-single] [--threads N] [--backlog K] [--buckets B] "
            + "[--layout flat|by-type] [--corpus PATH] [--seed S] [--idle-timeout-ms MS] "
            + "[--db URI] [--db-pool N]";

    static Config parse(String[] args) throws Error {
        return parse(args, MODELS);
    }

    /** models: the --model values this program serves (its first is the default). */
    static Config parse(String[] args, String[] models) throws Error {
        Config c = new Config();
        c.model = models[0];
        for (int i = 0; i < args.length; i++) {
            String flag = args[i];
            String value;
            int eq = flag.indexOf('=');
            if (flag.startsWith("--") && eq > 0) {
                value = flag.substring(eq + 1);
                flag = flag.substring(0, eq);
            } else {
                if (!isKnown(flag)) {
                    throw new Error("unknown flag " + quote(flag) + " (" + USAGE + ")");
                }
                if (i + 1 >= args.length) {
                    throw new Error("flag " + flag + " needs a value");
                }
                value = args[++i];
            }
            switch (flag) {
                case "--port": c.port = integer(flag, value, 0, 65535); break;
                case "--host":
                    if (value.isEmpty()) throw new Error("bad value for --host: empty");
                    c.host = value;
                    break;
                case "--model": c.model = oneOf(flag, value, models); break;
                case "--threads": c.threads = integer(flag, value, 1, 4096); break;
                case "--backlog": c.backlog = integer(flag, value, 1, 1 << 20); break;
                case "--buckets": c.buckets = integer(flag, value, 1, 1 << 26); break;
                case "--layout": c.byType = oneOf(flag, value, new String[] {"flat", "by-type"}).equals("by-type"); break;
                case "--corpus": c.corpus = Paths.get(value); break;
                case "--idle-timeout-ms": c.idleTimeoutMs = integer(flag, value, 1, 3_600_000); break;
                case "--db":
                    if (value.isEmpty()) throw new Error("bad value for --db: empty");
                    c.db = value;
                    break;
                case "--db-pool": c.dbPool = integer(flag, value, 1, 4096); break;
                case "--seed":
                    try {
                        c.seed = Long.parseLong(value);
                    } catch (NumberFormatException e) {
                        throw new Error("bad value for --seed: " + quote(value) + " (expected an integer)");
                    }
                    break;
                default: throw new Error("unknown flag " + quote(flag) + " (" + USAGE + ")");
            }
        }
        if (c.port < 0) {
            throw new Error("missing required flag --port (" + USAGE + ")");
        }
        if (c.corpus == null) {
            c.corpus = defaultCorpus();
        }
        if (!Files.isReadable(c.corpus) || Files.isDirectory(c.corpus)) {
            throw new Error("bad value for --corpus: cannot read " + quote(c.corpus.toString()));
        }
        return c;
    }

    private static boolean isKnown(String flag) {
        switch (flag) {
            case "--port": case "--host": case "--model": case "--threads": case "--backlog":
            case "--buckets": case "--layout": case "--corpus": case "--seed":
            case "--idle-timeout-ms": case "--db": case "--db-pool":
                return true;
            default:
                return false;
        }
    }

    /** servers/corpus/sentences.tsv relative to the working directory, else to the class files. */
    private static Path defaultCorpus() {
        Path rel = Paths.get("servers", "corpus", "sentences.tsv");
        if (Files.isReadable(rel)) {
            return rel;
        }
        try {
            // classes live in servers/java/build/classes
            Path classes = Paths.get(Config.class.getProtectionDomain().getCodeSource().getLocation().toURI());
            Path p = classes.resolve("../../../corpus/sentences.tsv").normalize();
            if (Files.isReadable(p)) {
                return p;
            }
        } catch (Exception ignored) {
            // fall through to the relative path, reported as unreadable by the caller
        }
        return rel;
    }

    private static int integer(String flag, String value, int min, int max) throws Error {
        boolean digits = !value.isEmpty() && value.length() <= 9;
        for (int i = 0; digits && i < value.length(); i++) {
            digits = value.charAt(i) >= '0' && value.charAt(i) <= '9';
        }
        int v = digits ? Integer.parseInt(value) : -1;
        if (!digits || v < min || v > max) {
            throw new Error("bad value for " + flag + ": " + quote(value) + " (expected an integer " + min + ".." + max + ")");
        }
        return v;
    }

    private static String oneOf(String flag, String value, String[] allowed) throws Error {
        for (String a : allowed) {
            if (a.equals(value)) {
                return a;
            }
        }
        throw new Error("bad value for " + flag + ": " + quote(value) + " (expected one of " + String.join(", ", allowed) + ")");
    }

    private static String quote(String s) {
        return "'" + s.replaceAll("[\\p{Cntrl}]", "?") + "'";
    }
}
