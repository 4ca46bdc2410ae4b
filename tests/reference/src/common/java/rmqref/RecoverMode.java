package rmqref;

import com.alibaba.fastjson2.JSONObject;
import java.lang.reflect.Method;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import org.apache.rocketmq.store.config.MessageStoreConfig;

/**
 * `recover` mode: the broker's own recovery of a COPY of a store: DefaultMessageStore.load() after a clean shutdown
 * (no abort file: CommitLog.recoverNormally) or after a crash (abort file: recoverAbnormally), with
 * checkCommitLogOffsetOnRecover set where the release has that setting (5.5.0 on; found by reflection).
 */
final class RecoverMode {
    private RecoverMode() {
    }

    static int run(String in, String out) throws Exception {
        JSONObject req = JsonIn.readObject(Paths.get(in));
        String storeDir = JsonIn.string(req, "storeDir");
        if (storeDir == null) {
            throw new IllegalArgumentException("storeDir is required");
        }
        boolean abort = req.getBooleanValue("abort", false);
        Path tmp = Files.createTempDirectory("rmqref-recover");
        try {
            Path root = tmp.resolve("store");
            Trees.copy(Paths.get(storeDir), root);
            Files.deleteIfExists(root.resolve("lock"));
            Files.deleteIfExists(root.resolve("abort"));
            if (abort) {
                Files.write(root.resolve("abort"), new byte[0]);
            }
            StoreBroker b = new StoreBroker(req.getJSONObject("broker"), req.getJSONObject("store"), root);
            JSONObject result = new JSONObject();
            result.put("abort", abort);
            result.put("checkCommitLogOffsetOnRecover",
                setting(b.storeConfig, "setCheckCommitLogOffsetOnRecover", req.getBoolean("checkCommitLogOffsetOnRecover")));
            result.put("checkCRCOnRecover", b.storeConfig.isCheckCRCOnRecover());
            Boolean loaded;
            Throwable thrown = null;
            try {
                loaded = b.store.load();
            } catch (Throwable t) {
                // 4.9.7: recovery's `new byte[TOTALSIZE]` of a huge TOTALSIZE throws OutOfMemoryError out of load().
                loaded = null;
                thrown = t;
            }
            result.put("loaded", loaded);
            if (thrown != null) {
                result.put("loadError", thrown.getClass().getSimpleName() + ": " + thrown.getMessage());
            }
            result.put("minPhyOffset", b.store.getMinPhyOffset());
            result.put("maxPhyOffset", b.store.getMaxPhyOffset());
            QuickShutdown.run(b.store, b.store::shutdown);
            StoreMode.writeJson(Paths.get(out), result);
        } finally {
            Trees.delete(tmp);
        }
        return 0;
    }

    /** Applies a boolean store setting when the release has it: "true"/"false", "absent" when it has none, null when
     * not asked. */
    private static String setting(MessageStoreConfig c, String setter, Boolean value) throws Exception {
        if (value == null) {
            return null;
        }
        Method m;
        try {
            m = MessageStoreConfig.class.getMethod(setter, boolean.class);
        } catch (NoSuchMethodException e) {
            return "absent";
        }
        m.invoke(c, value);
        return String.valueOf(value);
    }

}
