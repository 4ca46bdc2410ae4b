package rmqref;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.Comparator;
import java.util.stream.Stream;

/** `pull` mode: the real pull replay over a COPY of an existing store dir (opening a store rewrites lock/abort/checkpoint). */
final class PullMode {
    private PullMode() {
    }

    static int run(String in, String out) throws Exception {
        JSONObject req = JSON.parseObject(Files.readString(Paths.get(in), StandardCharsets.UTF_8));
        Path src = Paths.get(req.getString("storeDir"));
        Path tmp = Files.createTempDirectory("rmqref-pull");
        try {
            Path root = tmp.resolve("store");
            copyTree(src, root);
            Files.deleteIfExists(root.resolve("lock"));
            StoreBroker b = new StoreBroker(req.getJSONObject("broker"), req.getJSONObject("store"), root);
            boolean loaded = b.filters().load();
            b.start();
            b.waitDispatch();
            JSONArray subs = req.getJSONArray("subscriptions");
            JSONObject result = new PullReplay(b).replay(subs == null ? new JSONArray() : subs);
            result.put("consumerFilterLoaded", loaded);
            JSONArray filters = new JSONArray();
            b.filters().getFilterDataByTopic().values().forEach(byTopic ->
                byTopic.getGroupFilterData().values().forEach(d -> filters.add(StoreMode.filterDataJson(d))));
            result.put("filters", filters);
            b.shutdown();
            StoreMode.writeJson(Paths.get(out), result);
        } finally {
            deleteTree(tmp);
        }
        return 0;
    }

    private static void copyTree(Path src, Path dst) throws IOException {
        try (Stream<Path> s = Files.walk(src)) {
            for (Path p : s.toList()) {
                Path t = dst.resolve(src.relativize(p).toString());
                if (Files.isDirectory(p)) {
                    Files.createDirectories(t);
                } else {
                    Files.copy(p, t, StandardCopyOption.REPLACE_EXISTING);
                }
            }
        }
    }

    private static void deleteTree(Path dir) throws IOException {
        try (Stream<Path> s = Files.walk(dir)) {
            for (Path p : s.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        }
    }
}
