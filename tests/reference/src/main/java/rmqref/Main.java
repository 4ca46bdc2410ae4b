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
 */
public final class Main {
    private Main() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: rmqref.Main eval|store|pull|bench|scan|rebuild INPUT OUTPUT");
            System.exit(2);
        }
        int rc;
        switch (args[0]) {
            case "eval":
                rc = EvalMode.run(args[1], args[2]);
                break;
            case "store":
                rc = StoreMode.run(args[1], args[2]);
                break;
            case "pull":
                rc = PullMode.run(args[1], args[2]);
                break;
            case "scan":
                rc = ScanMode.run(args[1], args[2]);
                break;
            case "bench":
                rc = BenchMode.run(args[1], args[2]);
                break;
            case "rebuild":
                rc = RebuildMode.run(args[1], args[2]);
                break;
            default:
                System.err.println("unknown mode: " + args[0]);
                rc = 2;
        }
        System.exit(rc);
    }
}
