package perfctl.driver;

import java.lang.reflect.Method;

/**
 * Client threads: virtual threads where the JVM has them (JDK >= 21; the classes are built for
 * 17, so they are reached by reflection), else daemon platform threads. A burst of thousands of
 * clients on one pinned CPU is made and scheduled far faster as virtual threads, whose
 * blocking socket calls park instead of holding a carrier.
 */
final class Threads {
    private static final Object VIRTUAL; // a Thread.Builder.OfVirtual, or null
    private static final Method UNSTARTED;
    private static final Method NAME;

    static {
        Object builder = null;
        Method unstarted = null;
        Method name = null;
        try {
            builder = Thread.class.getMethod("ofVirtual").invoke(null);
            Class<?> b = Class.forName("java.lang.Thread$Builder");
            unstarted = b.getMethod("unstarted", Runnable.class);
            name = b.getMethod("name", String.class);
        } catch (ReflectiveOperationException e) {
            builder = null;            // JDK < 21: platform threads
        }
        VIRTUAL = builder;
        UNSTARTED = unstarted;
        NAME = name;
    }

    private Threads() {
    }

    /** Whether clients run on virtual threads (summary.json `virtual_threads`). */
    static boolean virtual() {
        return VIRTUAL != null;
    }

    /** An unstarted client thread. */
    static Thread client(String name, Runnable r) {
        if (VIRTUAL != null) {
            try {
                synchronized (VIRTUAL) {   // a builder is not thread-safe
                    return (Thread) UNSTARTED.invoke(NAME.invoke(VIRTUAL, name), r);
                }
            } catch (ReflectiveOperationException e) {
                // fall through to a platform thread
            }
        }
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        return t;
    }
}
