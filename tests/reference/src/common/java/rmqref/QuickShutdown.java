package rmqref;

import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;

/**
 * A store's shutdown without its idle wait. DefaultMessageStore.shutdown() stops its scheduled executors, then
 * sleeps a fixed time (3 s in 5.x after awaiting them, 1 s in 4.9) "for some threads" before shutting each service
 * down, and every service flushes what it holds on its own shutdown. The harness has waited for dispatch before it
 * stops a store, so the sleep only costs wall time: about 100 harness runs a fresh test suite makes, 300 s. Here a
 * watcher interrupts that one sleep, once the store's executors have all terminated (what the sleep waits for);
 * the store logs the interruption and goes on with the same steps. Any other wait runs as before.
 */
final class QuickShutdown {
    private static final String STORE = "org.apache.rocketmq.store.DefaultMessageStore";

    private QuickShutdown() {
    }

    /** Runs `shutdown` (which stops `store`, directly or through its broker) on this thread. */
    static void run(Object store, Runnable shutdown) {
        Thread caller = Thread.currentThread();
        List<ExecutorService> executors = executors(store);
        Thread watcher = new Thread(() -> {
            while (!Thread.currentThread().isInterrupted()) {
                if (inStoreSleep(caller.getStackTrace()) && executors.stream().allMatch(ExecutorService::isTerminated)) {
                    caller.interrupt();
                    return;
                }
                try {
                    Thread.sleep(5);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }, "rmqref-quick-shutdown");
        watcher.setDaemon(true);
        watcher.start();
        try {
            shutdown.run();
        } finally {
            watcher.interrupt();
            try {
                watcher.join();
            } catch (InterruptedException e) {
                // the watcher's own interrupt of this thread, landed after the sleep: cleared below
            }
            Thread.interrupted();
        }
    }

    /** True when the thread sleeps in Thread.sleep called straight from the store's shutdown(). */
    static boolean inStoreSleep(StackTraceElement[] stack) {
        int i = 0;
        while (i < stack.length && stack[i].getClassName().equals("java.lang.Thread")
            && stack[i].getMethodName().startsWith("sleep")) {
            i++;
        }
        return i > 0 && i < stack.length && stack[i].getClassName().equals(STORE)
            && stack[i].getMethodName().equals("shutdown");
    }

    /** The executor services the store's classes hold (DefaultMessageStore and its subclasses). */
    private static List<ExecutorService> executors(Object store) {
        List<ExecutorService> out = new ArrayList<>();
        for (Class<?> c = store.getClass(); c != null && c != Object.class; c = c.getSuperclass()) {
            for (Field f : c.getDeclaredFields()) {
                if (ExecutorService.class.isAssignableFrom(f.getType())
                    && !java.lang.reflect.Modifier.isStatic(f.getModifiers())) {
                    try {
                        f.setAccessible(true);
                        Object v = f.get(store);
                        if (v != null) {
                            out.add((ExecutorService) v);
                        }
                    } catch (ReflectiveOperationException | RuntimeException e) {
                        throw new IllegalStateException("cannot read " + c.getName() + "." + f.getName(), e);
                    }
                }
            }
        }
        return out;
    }
}
