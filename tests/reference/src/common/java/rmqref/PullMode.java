package rmqref;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;

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
            Trees.copy(src, root);
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
            Trees.delete(tmp);
        }
        return 0;
    }

}
