package perfctl.server;

/** A concurrency model: who serves an accepted connection. The accept loop is Main's. */
interface Model {
    /** Hands over one accepted connection (the model owns it from here on, also on failure). */
    void dispatch(Connection c);

    /** Worker threads for /stats: 1 for single, the configured N for pool, the live ones otherwise. */
    int threads();

    /** Connections waiting for a worker right now. */
    int queueLength();

    static Model create(Config c) throws Config.Error {
        switch (c.model) {
            case "single": return new SingleModel();
            case "thread": return new ThreadModel();
            case "pool": return new PoolModel(c.threads, c.backlog);
            case "virtual": return new VirtualModel();
            default: throw new Config.Error("bad value for --model: '" + c.model + "'");
        }
    }
}
