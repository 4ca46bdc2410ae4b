package rmqref;

/** Placeholder until the pull mode lands: refuses to run so no test can mistake it for a result. */
final class PullMode {
    private PullMode() {
    }

    static int run(String in, String out) {
        System.err.println("pull mode is not implemented yet");
        return 3;
    }
}
