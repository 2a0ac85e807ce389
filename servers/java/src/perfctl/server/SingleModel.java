package perfctl.server;

/** `single`: the accepting thread serves each connection itself, one at a time. */
final class SingleModel implements Model {
    @Override
    public void dispatch(Connection c) {
        c.run();
    }

    @Override
    public int threads() {
        return 1;
    }

    @Override
    public int queueLength() {
        return 0; // waiting connections sit in the kernel's listen backlog, not visible here
    }
}
