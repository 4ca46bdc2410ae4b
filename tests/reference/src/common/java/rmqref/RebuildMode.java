package rmqref;

import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.apache.rocketmq.broker.filter.ConsumerFilterData;
import org.apache.rocketmq.store.CommitLogDispatcher;
import org.apache.rocketmq.store.DispatchRequest;

/**
 * `rebuild` mode: times the broker's own consume-queue rebuild of an existing store (PROTOCOL.md).
 *
 * 5.x only: the 4.9 line refuses the mode (Release.unavailable: 4.9.7's load() does not dispatch).
 *
 * In 5.3.3 the rebuild is DefaultMessageStore.load(): with no consume queue, no checkpoint and no abort file,
 * recover() calls CommitLog.recoverNormally(-1), which walks every commit log record from file 0 with
 * checkMessageAndReturnSize(buf, checkCRCOnRecover, dupInfo, readBody=true) and hands each one to doDispatch
 * (CalcBitMap, BuildConsumeQueue, BuildIndex[, Compaction]) on the calling thread. start() then sets the reput
 * offset to the confirm offset (the commit log max offset under ASYNC_FLUSH), so the reput thread has nothing left;
 * start() + the dispatch wait are timed separately and the message counts after load() and after it are compared.
 *
 * Each repeat runs on a fresh scratch root: the commit log files are hard links to the originals (symbolic links
 * when the scratch dir is on another file system), config/ is copied (small files) without consumerFilter.json,
 * which is written by the real ConsumerFilterManager from the requested filters; consumequeue/, consumequeue_ext/,
 * index/, checkpoint, abort and lock are simply not there. Recovery maps the linked files read-write but writes
 * nothing into them; the files it drops (an empty last file, files past the last valid record) are unlinked, which
 * leaves the originals alone.
 */
final class RebuildMode {
    private static final Pattern COMMITLOG_NAME = Pattern.compile("\\d{20}");
    /** MessageStoreConfig defaults (5.3.3), used when the source store has no file to take the size from. */
    private static final int DEFAULT_CQ_FILE_SIZE = 300_000 * 20;
    private static final int DEFAULT_EXT_FILE_SIZE = 48 * 1024 * 1024;

    private final JSONObject req;
    private final Path src;
    private final Path srcCommitLog;
    private final List<Path> commitLogFiles = new ArrayList<>();
    private final JSONArray skipped = new JSONArray();
    private final JSONObject broker = new JSONObject();
    private final JSONObject storeCfg = new JSONObject();
    private final JSONObject settings = new JSONObject();
    private final JSONArray filters;
    private final boolean ext;
    private final boolean queues;
    private final boolean compare;
    private final Path scratchParent;

    private RebuildMode(JSONObject req) throws IOException {
        this.req = req;
        String store = JsonIn.string(req, "store");
        if (store == null) {
            throw new IllegalArgumentException("store (the store root path) is required");
        }
        src = Paths.get(store).toAbsolutePath();
        srcCommitLog = src.resolve("commitlog");
        if (!Files.isDirectory(srcCommitLog)) {
            throw new IllegalArgumentException("no commitlog/ directory in " + src);
        }
        try (Stream<Path> s = Files.list(srcCommitLog)) {
            for (Path p : s.sorted().toList()) {
                if (COMMITLOG_NAME.matcher(p.getFileName().toString()).matches() && Files.isRegularFile(p)) {
                    commitLogFiles.add(p);
                } else {
                    skipped.add(p.getFileName().toString());
                }
            }
        }
        if (commitLogFiles.isEmpty()) {
            throw new IllegalArgumentException("no commitlog files (20-digit names) in " + srcCommitLog);
        }
        ext = StoreBroker.bool(req, "ext", true);
        queues = StoreBroker.bool(req, "queues", false);
        compare = StoreBroker.bool(req, "compare", false);
        filters = req.containsKey("filters") ? req.getJSONArray("filters") : new JSONArray();
        JSONObject bloom = req.containsKey("bloom") ? req.getJSONObject("bloom") : new JSONObject();
        JSONObject overrides = req.containsKey("storeConfig") ? req.getJSONObject("storeConfig") : new JSONObject();

        broker.put("enableConsumeQueueExt", ext);
        broker.put("enableCalcFilterBitMap", ext);
        broker.put("maxErrorRateOfBloomFilter", bloom.getIntValue("f", 20));
        broker.put("expectConsumerNumUseFilter", bloom.getIntValue("n", 32));
        long clSize = req.containsKey("mappedFileSizeCommitLog") ? req.getLongValue("mappedFileSizeCommitLog")
            : Files.size(commitLogFiles.get(0));
        storeCfg.put("mappedFileSizeCommitLog", (int) clSize);
        storeCfg.put("mappedFileSizeConsumeQueue", overrides.getIntValue("mappedFileSizeConsumeQueue",
            firstFileSize(src.resolve("consumequeue"), DEFAULT_CQ_FILE_SIZE)));
        storeCfg.put("mappedFileSizeConsumeQueueExt", overrides.getIntValue("mappedFileSizeConsumeQueueExt",
            firstFileSize(src.resolve("consumequeue_ext"), DEFAULT_EXT_FILE_SIZE)));
        storeCfg.put("messageIndexEnable", StoreBroker.bool(overrides, "messageIndexEnable", false));
        storeCfg.put("enableCompaction", StoreBroker.bool(overrides, "enableCompaction", false));
        settings.put("checkCRCOnRecover", StoreBroker.bool(overrides, "checkCRCOnRecover", true));
        String scratch = JsonIn.string(req, "scratchDir");
        scratchParent = scratch != null ? Paths.get(scratch).toAbsolutePath() : src.getParent();
    }

    static int run(String in, String out) throws Exception {
        JSONObject req = JsonIn.readObject(Paths.get(in));
        RebuildMode m = new RebuildMode(req);
        JSONObject result = m.rebuild();
        JsonOut.write(Paths.get(out), result);
        return 0;
    }

    private JSONObject rebuild() throws Exception {
        JSONObject doc = new JSONObject();
        doc.put("pinned", pin(req.containsKey("cpu") ? req.getInteger("cpu") : Integer.valueOf(0)));
        doc.put("availableProcessors", Runtime.getRuntime().availableProcessors());
        int repeats = req.getIntValue("repeats", 3);
        if (repeats < 1) {
            throw new IllegalArgumentException("repeats must be >= 1");
        }
        JSONArray results = new JSONArray();
        double best = 0;
        JSONObject lastSetup = null;
        for (int i = 0; i < repeats; i++) {
            JSONObject r = new JSONObject();
            lastSetup = once(r);
            results.add(r);
            best = Math.max(best, r.getDoubleValue("per_second"));
        }
        doc.put("results", results);
        doc.put("best_per_second", best);
        doc.put("way", "DefaultMessageStore.load() of a dormant BrokerController's store (way " + StoreBroker.WAY
            + ") on a scratch root holding only links to the commitlog files and a copy of config/: recover() ->"
            + " CommitLog.recoverNormally(-1) walks every record (checkMessageAndReturnSize, readBody, CRC per"
            + " checkCRCOnRecover) and runs doDispatch (CalcBitMap, BuildConsumeQueue, BuildIndex) on the calling"
            + " thread; per_second = messages / load seconds; start() + waiting for dispatchBehindBytes() == 0 is"
            + " timed apart (startSeconds)");
        doc.put("store", src.toString());
        doc.put("commitlogFiles", commitLogFiles.size());
        doc.put("skippedFiles", skipped);
        doc.put("broker", lastSetup.get("broker"));
        doc.put("storeConfig", lastSetup.get("storeConfig"));
        doc.put("bloom", lastSetup.get("bloom"));
        doc.put("dispatchers", lastSetup.get("dispatchers"));
        doc.put("filters", lastSetup.get("filters"));
        doc.put("consumerFilterJson", lastSetup.get("consumerFilterJson"));
        return doc;
    }

    /** One rebuild on a fresh scratch root; fills the result row, returns the set-up facts. */
    private JSONObject once(JSONObject r) throws Exception {
        Path scratch = createScratch();
        JSONObject setup = new JSONObject();
        try {
            Path root = scratch.resolve("store");
            Files.createDirectories(root.resolve("commitlog"));
            r.put("links", link(root.resolve("commitlog")));
            copyConfig(root.resolve("config"));
            StoreBroker b = new StoreBroker(broker, storeCfg, root);
            b.storeConfig.setCheckCRCOnRecover(settings.getBooleanValue("checkCRCOnRecover"));
            boolean topicsLoaded = b.controller.getTopicConfigManager().load();
            setup.put("filters", register(b));
            b.filters().persist();
            Path cfj = root.resolve("config").resolve("consumerFilter.json");
            setup.put("consumerFilterJson", Files.exists(cfj) ? Files.readString(cfj, StandardCharsets.UTF_8) : null);
            long[] counter = new long[3];
            b.store.getDispatcherList().addLast(new CommitLogDispatcher() {
                @Override
                public void dispatch(DispatchRequest request) {
                    long now = System.nanoTime();
                    if (counter[0]++ == 0) {
                        counter[1] = now;
                    }
                    counter[2] = now;
                }
            });
            JSONArray dispatchers = new JSONArray();
            b.store.getDispatcherList().forEach(d -> dispatchers.add(d.getClass().getName()));
            setup.put("dispatchers", dispatchers);
            JSONObject sc = new JSONObject();
            sc.putAll(b.effectiveStore);
            sc.put("checkCRCOnRecover", b.storeConfig.isCheckCRCOnRecover());
            sc.put("flushDiskType", b.storeConfig.getFlushDiskType().name());
            sc.put("recoverConcurrently", b.recoverConcurrently());
            sc.put("topicsJsonLoaded", topicsLoaded);
            setup.put("storeConfig", sc);
            setup.put("broker", b.effectiveBroker);
            setup.put("bloom", b.bloomJson());

            ThreadMXBean mx = ManagementFactory.getThreadMXBean();
            long cpu0 = mx.getCurrentThreadCpuTime();
            long t0 = System.nanoTime();
            boolean loaded = b.store.load();
            long t1 = System.nanoTime();
            long cpu1 = mx.getCurrentThreadCpuTime();
            if (!loaded) {
                throw new IllegalStateException("DefaultMessageStore.load() returned false (mappedFileSizeCommitLog "
                    + b.storeConfig.getMappedFileSizeCommitLog() + "; every commitlog file must have exactly that size)");
            }
            long dispatchedAtLoad = counter[0];
            long[] atLoad = count(b, null);
            long t2 = System.nanoTime();
            b.store.start();
            b.waitDispatch();
            long t3 = System.nanoTime();
            JSONArray queueRows = queues ? new JSONArray() : null;
            long[] afterStart = count(b, queueRows);
            double seconds = (t1 - t0) / 1e9;
            r.put("seconds", seconds);
            r.put("messages", atLoad[0]);
            r.put("per_second", seconds > 0 ? atLoad[0] / seconds : 0.0);
            r.put("cpuSeconds", (cpu1 - cpu0) / 1e9);
            r.put("dispatched", dispatchedAtLoad);
            r.put("dispatchSpanSeconds", dispatchedAtLoad > 1 ? (counter[2] - counter[1]) / 1e9 : 0.0);
            long bytes = b.store.getMaxPhyOffset() - b.store.getMinPhyOffset();
            r.put("commitLogBytes", bytes);
            r.put("mbPerSecond", seconds > 0 ? bytes / seconds / 1e6 : 0.0);
            r.put("startSeconds", (t3 - t2) / 1e9);
            r.put("messagesAfterStart", afterStart[0]);
            r.put("dispatchedAfterStart", counter[0]);
            r.put("completeAfterLoad", atLoad[0] == afterStart[0] && dispatchedAtLoad == counter[0]);
            r.put("consumeQueues", atLoad[1]);
            if (queueRows != null) {
                r.put("queues", queueRows);
            }
            QuickShutdown.run(b.store, b.store::shutdown);
            if (compare) {
                r.put("compare", compareDirs(root));
            }
        } finally {
            Trees.delete(scratch);
        }
        return setup;
    }

    /** Σ (maxOffset − minOffset) over every consume queue (= Σ maxOffset after a rebuild from offset 0), and their count. */
    private static long[] count(StoreBroker b, JSONArray rows) {
        long total = 0;
        long n = 0;
        for (JSONObject row : b.consumeQueueRanges()) {
            total += row.getLongValue("maxOffset") - row.getLongValue("minOffset");
            n++;
            if (rows != null) {
                rows.add(row);
            }
        }
        return new long[] {total, n};
    }

    /**
     * Registers the requested filters through the real ConsumerFilterManager (bloom key group#topic), then sets each
     * record's bornTime to 1 ms so every filter is "in live" for every message (isMsgInLive: storeTime > bornTime).
     * Not 0: deadTime is 0, isDead() is deadTime >= bornTime, so bornTime 0 would make the record dead since the
     * epoch and the persist's clean() would drop it.
     */
    private JSONArray register(StoreBroker b) {
        JSONArray rows = new JSONArray();
        for (int i = 0; i < filters.size(); i++) {
            JSONObject f = filters.getJSONObject(i);
            String group = JsonIn.string(f, "group");
            String topic = JsonIn.string(f, "topic");
            String expression = JsonIn.string(f, "expression");
            String type = StoreBroker.str(f, "type", "SQL92");
            long version = f.getLongValue("clientVersion", 1L);
            boolean ok = b.filters().register(topic, group, expression, type, version);
            ConsumerFilterData d = b.filters().get(topic, group);
            if (d != null) {
                d.setBornTime(1L);
            }
            JSONObject row = StoreMode.filterDataJson(d);
            if (row == null) {
                row = new JSONObject();
                row.put("topic", topic);
                row.put("group", group);
                row.put("expression", expression);
            }
            row.put("registered", ok);
            rows.add(row);
        }
        return rows;
    }

    private Path createScratch() throws IOException {
        try {
            return Files.createTempDirectory(scratchParent, "rmqref-rebuild-");
        } catch (IOException e) {
            return Files.createTempDirectory("rmqref-rebuild-");
        }
    }

    /** Hard links to every commitlog file, or symbolic links when a hard link is refused (another file system). */
    private JSONObject link(Path dir) throws IOException {
        int hard = 0;
        int sym = 0;
        for (Path p : commitLogFiles) {
            Path t = dir.resolve(p.getFileName().toString());
            try {
                Files.createLink(t, p);
                hard++;
            } catch (IOException | UnsupportedOperationException e) {
                Files.createSymbolicLink(t, p);
                sym++;
            }
        }
        JSONObject o = new JSONObject();
        o.put("hard", hard);
        o.put("symbolic", sym);
        return o;
    }

    /** Copies the source's config/ (small files) except consumerFilter.json*, which the manager writes itself. */
    private void copyConfig(Path dst) throws IOException {
        Files.createDirectories(dst);
        Path cfg = src.resolve("config");
        if (!Files.isDirectory(cfg)) {
            return;
        }
        try (Stream<Path> s = Files.walk(cfg)) {
            for (Path p : s.toList()) {
                Path t = dst.resolve(cfg.relativize(p).toString());
                if (Files.isDirectory(p)) {
                    Files.createDirectories(t);
                } else if (Files.isRegularFile(p) && !p.getFileName().toString().startsWith("consumerFilter.json")) {
                    Files.copy(p, t);
                }
            }
        }
    }

    /** File by file: the rebuilt consumequeue/ and consumequeue_ext/ against the source's (when it has them). */
    private JSONObject compareDirs(Path root) throws IOException {
        JSONObject o = new JSONObject();
        for (String d : new String[] {"consumequeue", "consumequeue_ext"}) {
            Path a = src.resolve(d);
            Path bb = root.resolve(d);
            TreeMap<String, Path> mine = files(bb);
            TreeMap<String, Path> theirs = files(a);
            JSONObject c = new JSONObject();
            int same = 0;
            JSONArray differ = new JSONArray();
            JSONArray onlySource = new JSONArray();
            JSONArray onlyRebuilt = new JSONArray();
            for (Map.Entry<String, Path> e : theirs.entrySet()) {
                Path p = mine.get(e.getKey());
                if (p == null) {
                    onlySource.add(e.getKey());
                } else if (Arrays.equals(Files.readAllBytes(p), Files.readAllBytes(e.getValue()))) {
                    same++;
                } else {
                    differ.add(e.getKey());
                }
            }
            for (String k : mine.keySet()) {
                if (!theirs.containsKey(k)) {
                    onlyRebuilt.add(k);
                }
            }
            c.put("identical", same);
            c.put("differing", differ);
            c.put("onlySource", onlySource);
            c.put("onlyRebuilt", onlyRebuilt);
            o.put(d, c);
        }
        return o;
    }

    private static TreeMap<String, Path> files(Path dir) throws IOException {
        TreeMap<String, Path> m = new TreeMap<>();
        if (!Files.isDirectory(dir)) {
            return m;
        }
        try (Stream<Path> s = Files.walk(dir)) {
            for (Path p : s.toList()) {
                if (Files.isRegularFile(p)) {
                    m.put(dir.relativize(p).toString(), p);
                }
            }
        }
        return m;
    }

    private static int firstFileSize(Path dir, int dflt) throws IOException {
        TreeMap<String, Path> m = files(dir);
        for (Path p : m.values()) {
            long n = Files.size(p);
            if (n > 0) {
                return (int) n;
            }
        }
        return dflt;
    }

    /**
     * Pins every thread of this JVM (and so every thread it starts later) to one CPU with {@code taskset -a -p -c},
     * when taskset exists; returns the command's description, or null when not pinned.
     */
    private static String pin(Integer cpu) {
        if (cpu == null) {
            return null;
        }
        Path taskset = null;
        for (String d : new String[] {"/usr/bin", "/bin", "/usr/sbin", "/sbin"}) {
            if (Files.isExecutable(Paths.get(d, "taskset"))) {
                taskset = Paths.get(d, "taskset");
                break;
            }
        }
        if (taskset == null) {
            return null;
        }
        long pid = ProcessHandle.current().pid();
        try {
            Process p = new ProcessBuilder(taskset.toString(), "-a", "-p", "-c", cpu.toString(), Long.toString(pid))
                .redirectErrorStream(true).start();
            String text = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            if (p.waitFor() != 0) {
                return null;
            }
            return "taskset -a -p -c " + cpu + " <jvm pid> (" + text.lines().count() / 2 + " threads)";
        } catch (IOException e) {
            return null;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return null;
        }
    }
}
