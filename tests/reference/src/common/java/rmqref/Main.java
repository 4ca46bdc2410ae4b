package rmqref;

/**
 * Entry point of the reference harness: one mode per run, JSON in, JSON out (see PROTOCOL.md).
 *
 *   eval  IN.json OUT.json        SQL92 / tag hash / subscription / bloom cases through the real classes
 *   store SCENARIO.json OUTDIR    a real store directory, its listing, and the real pull replay over it
 *   pull  REQUEST.json OUT.json   the real pull replay over (a copy of) an existing store directory
 *   bench IN.json OUT.json        warm single-threaded timing of SQL92 evaluate / bloom isHit
 *   scan  IN.json OUT.json        the recovery walk (checkMessageAndReturnSize) over commitlog files, damaged or not
 *   rebuild IN.json OUT.json      times the broker's own consume-queue rebuild (DefaultMessageStore.load) of a store
 *   recover IN.json OUT.json      the broker's own recovery (normal or after a crash) of a copy of a store
 *   group SPEC.json OUTDIR        a real name server, real brokers and real push consumers of consumer groups in one
 *                                 JVM: what each member received, its allocation, what each broker kept per group
 *   serve                         many runs in one JVM: stdin lines "MODE\tINPUT\tOUTPUT\tLOG", each answered on
 *                                 stdout by a line "SERVED <rc>" once done (the run's stdout and stderr go to LOG)
 *
 * The same sources (src/common) run on every release line; the line's own classes (src/rocketmq-5 or
 * src/rocketmq-4.9: StoreBroker, Subscription, Release) hold what differs. A mode a line cannot run fails with
 * exit code 3 and a message on stderr.
 */
public final class Main {
    private Main() {
    }

    /** The line that ends each served run on stdout; anything else there is not the protocol's. */
    static final String SERVED = "SERVED ";

    public static void main(String[] args) throws Exception {
        if (args.length == 1 && args[0].equals("serve")) {
            System.exit(serve());
        }
        if (args.length != 3) {
            System.err.println("usage: rmqref.Main eval|store|pull|bench|scan|rebuild|recover|group INPUT OUTPUT");
            System.exit(2);
        }
        int rc;
        try {
            rc = dispatch(args);
        } catch (Throwable t) {
            // A broker component may have started non-daemon threads: exit even when a mode fails.
            t.printStackTrace();
            rc = 1;
        }
        System.exit(rc);
    }

    /**
     * Runs one mode per stdin line until stdin ends: the JVM starts and loads the broker's classes once for many
     * runs (a store or pull run alone is ~1.4 CPU-s, most of it that; served, ~0.2). Each run's stdout and stderr
     * go to its LOG file; its exit code is answered on the original stdout. Every mode reads all its state from its
     * INPUT, so a run's answer does not depend on the runs before it in the same JVM.
     */
    private static int serve() throws Exception {
        java.io.PrintStream protocol = System.out;
        java.io.PrintStream err = System.err;
        java.io.BufferedReader in = new java.io.BufferedReader(
            new java.io.InputStreamReader(System.in, java.nio.charset.StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] p = line.split("\t", -1);
            if (p.length != 4) {
                protocol.println(SERVED + 2);
                protocol.flush();
                continue;
            }
            int rc;
            try (java.io.PrintStream log = new java.io.PrintStream(new java.io.FileOutputStream(p[3]), true, "UTF-8")) {
                System.setOut(log);
                System.setErr(log);
                try {
                    rc = dispatch(new String[] {p[0], p[1], p[2]});
                } catch (Throwable t) {
                    t.printStackTrace();
                    rc = 1;
                } finally {
                    System.setOut(protocol);
                    System.setErr(err);
                }
            }
            protocol.println(SERVED + rc);
            protocol.flush();
        }
        return 0;
    }

    private static int dispatch(String[] args) throws Exception {
        String unavailable = Release.unavailable(args[0]);
        if (unavailable != null) {
            System.err.println("mode " + args[0] + " is not available on RocketMQ "
                + org.apache.rocketmq.common.MQVersion.getVersionDesc(org.apache.rocketmq.common.MQVersion.CURRENT_VERSION)
                + ": " + unavailable);
            return 3;
        }
        switch (args[0]) {
            case "eval":
                return EvalMode.run(args[1], args[2]);
            case "store":
                return StoreMode.run(args[1], args[2]);
            case "pull":
                return PullMode.run(args[1], args[2]);
            case "scan":
                return ScanMode.run(args[1], args[2]);
            case "bench":
                return BenchMode.run(args[1], args[2]);
            case "rebuild":
                return RebuildMode.run(args[1], args[2]);
            case "recover":
                return RecoverMode.run(args[1], args[2]);
            case "group":
                return GroupMode.run(args[1], args[2]);
            default:
                System.err.println("unknown mode: " + args[0]);
                return 2;
        }
    }
}
