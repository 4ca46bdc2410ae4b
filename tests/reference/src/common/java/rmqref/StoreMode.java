package rmqref;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import com.alibaba.fastjson2.JSONWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.rocketmq.broker.filter.ConsumerFilterData;
import org.apache.rocketmq.broker.transaction.queue.TransactionalMessageBridge;
import org.apache.rocketmq.broker.transaction.queue.TransactionalMessageUtil;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.TopicFilterType;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
import org.apache.rocketmq.store.PutMessageResult;

/**
 * `store` mode: a scenario → a real store dir written by the release's own broker classes (StoreBroker), its
 * listing, the write report and (optionally) the pull replay.
 */
final class StoreMode {
    private final JSONObject scenario;
    private final Path outDir;
    private final StoreBroker b;
    private final String txMode;
    private TransactionalMessageBridge bridge;
    private final JSONArray messages = new JSONArray();
    private final JSONArray transactions = new JSONArray();
    private final JSONArray registrations = new JSONArray();
    private final JSONArray copies = new JSONArray();
    private final Map<String, JSONObject> messageEvents = new HashMap<>();
    private final Map<String, JSONObject> putRows = new HashMap<>();
    /** commit log offset → scenarioId, for the listing. */
    private final Map<Long, String> idByOffset = new HashMap<>();
    private final Set<String> groups = new LinkedHashSet<>();

    private StoreMode(JSONObject scenario, Path outDir) throws Exception {
        this.scenario = scenario;
        this.outDir = outDir;
        Path root = outDir.resolve("store");
        Files.createDirectories(root);
        this.b = new StoreBroker(scenario.getJSONObject("broker"), scenario.getJSONObject("store"), root);
        this.txMode = StoreBroker.str(scenario, "transactionMode", "broker5");
        if (!"broker5".equals(txMode) && !"store".equals(txMode)) {
            throw new IllegalArgumentException("transactionMode must be broker5 or store: " + txMode);
        }
    }

    static int run(String in, String out) throws Exception {
        JSONObject scenario = JSON.parseObject(Files.readString(Paths.get(in), StandardCharsets.UTF_8));
        new StoreMode(scenario, Paths.get(out)).write();
        return 0;
    }

    static void writeJson(Path p, Object o) throws Exception {
        Files.writeString(p, JSON.toJSONString(o, JSONWriter.Feature.LargeObject, JSONWriter.Feature.WriteNulls), StandardCharsets.UTF_8);
    }

    private void write() throws Exception {
        createTopics();
        b.start();
        bridge = new TransactionalMessageBridge(b.controller, b.store);
        JSONArray events = scenario.getJSONArray("events");
        for (int i = 0; events != null && i < events.size(); i++) {
            event(i, events.getJSONObject(i));
        }
        b.waitDispatch();
        JSONObject pull = null;
        JSONArray subs = scenario.getJSONArray("subscriptions");
        if (subs != null) {
            for (int i = 0; i < subs.size(); i++) {
                groups.add(subs.getJSONObject(i).getString("group"));
            }
            pull = new PullReplay(b).replay(subs);
        }
        persistConfigs();
        RecordListing listing = new RecordListing(b);
        listing.readConsumeQueues();
        JSONObject report = report(listing);
        b.shutdown();
        writeJson(outDir.resolve("listing.json"), listing.listing(idByOffset));
        report.put("commitlog", listing.commitLogFiles());
        report.put("storeFiles", RecordListing.storeFiles(b.root));
        writeJson(outDir.resolve("report.json"), report);
        if (pull != null) {
            writeJson(outDir.resolve("pull.json"), pull);
        }
    }

    private void createTopics() {
        JSONArray topics = scenario.getJSONArray("topics");
        for (int i = 0; topics != null && i < topics.size(); i++) {
            JSONObject t = topics.getJSONObject(i);
            TopicConfig tc = new TopicConfig(t.getString("name"), t.getIntValue("readQueueNums", 4),
                t.getIntValue("writeQueueNums", 4), t.getIntValue("perm", 6));
            if (t.containsKey("topicFilterType")) {
                tc.setTopicFilterType(TopicFilterType.valueOf(t.getString("topicFilterType")));
            }
            JSONObject attrs = t.getJSONObject("attributes");
            if (attrs != null) {
                java.util.Map<String, String> m = new java.util.HashMap<>();
                for (String k : attrs.keySet()) {
                    m.put(k, attrs.getString(k));
                }
                b.setTopicAttributes(tc, m);
            }
            b.controller.getTopicConfigManager().updateTopicConfig(tc);
        }
        JSONArray gs = scenario.getJSONArray("groups");
        for (int i = 0; gs != null && i < gs.size(); i++) {
            groups.add(gs.getString(i));
        }
    }

    private TopicConfig ensureTopic(String topic, int queues) {
        TopicConfig tc = b.controller.getTopicConfigManager().selectTopicConfig(topic);
        if (tc == null) {
            tc = new TopicConfig(topic, queues, queues, 6);
            b.controller.getTopicConfigManager().updateTopicConfig(tc);
        }
        return tc;
    }

    private void event(int index, JSONObject e) throws Exception {
        String kind = e.getString("kind");
        switch (kind) {
            case "register":
            case "unregister":
                registration(index, e);
                break;
            case "message":
                message(index, e);
                break;
            case "commit":
            case "rollback":
                endTransaction(index, e, kind);
                break;
            case "heartbeat":
                heartbeat(index, e);
                break;
            case "clean":
                clean(index, e);
                break;
            case "sleep":
                Thread.sleep(e.getLongValue("ms"));
                break;
            case "wait":
                b.waitDispatch();
                break;
            case "copy":
                copyStore(index, e);
                break;
            case "expire":
                expire(index, e);
                break;
            default:
                throw new IllegalArgumentException("unknown event kind: " + kind);
        }
    }

    /**
     * A copy of the running store, file by file, as an operator's rsync takes it: the commit log first, then every
     * other file (queues, configs as last persisted, checkpoint, the abort marker a running store holds), with no
     * wait for dispatch and no flush. Configs are persisted first only when "persist" is true (default true, as
     * the broker's periodic persist would have by then).
     */
    private void copyStore(int index, JSONObject e) throws Exception {
        String name = e.getString("name");
        if (name == null || !name.matches("[A-Za-z0-9._-]+")) {
            throw new IllegalArgumentException("copy needs a name of letters, digits, . _ -: " + name);
        }
        if (e.getBooleanValue("persist", true)) {
            persistConfigs();
        }
        Path dest = outDir.resolve("copies").resolve(name);
        long maxPhy = b.store.getMaxPhyOffset();
        long minPhy = b.store.getMinPhyOffset();
        List<Path> files = new ArrayList<>();
        try (java.util.stream.Stream<Path> walk = Files.walk(b.root)) {
            walk.filter(Files::isRegularFile).forEach(files::add);
        }
        files.sort((x, y) -> {
            boolean cx = b.root.relativize(x).startsWith("commitlog");
            boolean cy = b.root.relativize(y).startsWith("commitlog");
            return cx == cy ? x.compareTo(y) : (cx ? -1 : 1);
        });
        int copied = 0;
        for (Path f : files) {
            Path to = dest.resolve(b.root.relativize(f).toString());
            Files.createDirectories(to.getParent());
            try {
                Files.copy(f, to);
                copied++;
            } catch (java.nio.file.NoSuchFileException gone) {
                // deleted between the listing and the copy, as under a live rsync
            }
        }
        JSONObject row = new JSONObject();
        row.put("eventIndex", index);
        row.put("name", name);
        row.put("minPhyOffset", minPhy);
        row.put("maxPhyOffset", maxPhy);
        row.put("files", copied);
        copies.add(row);
    }

    /** The store's own retention: its oldest commit log files deleted as CleanCommitLogService deletes them. */
    private void expire(int index, JSONObject e) throws Exception {
        int n = e.getIntValue("files", 1);
        long before = b.store.getMinPhyOffset();
        int deleted = b.deleteOldestCommitLogFiles(n);
        JSONObject row = new JSONObject();
        row.put("eventIndex", index);
        row.put("name", "expire");
        row.put("deleted", deleted);
        row.put("minPhyOffsetBefore", before);
        row.put("minPhyOffset", b.store.getMinPhyOffset());
        copies.add(row);
    }

    private void registration(int index, JSONObject e) throws Exception {
        b.waitDispatch();
        Thread.sleep(2);
        String group = e.getString("group");
        groups.add(group);
        if ("register".equals(e.getString("kind"))) {
            String topic = e.getString("topic");
            String type = StoreBroker.str(e, "type", "SQL92");
            long version = e.getLongValue("clientVersion", 1L);
            boolean result = b.filters().register(topic, group, e.getString("expression"), type, version);
            JSONObject row = regRow(index, "register", b.filters().get(topic, group), group, topic);
            row.put("expression", e.getString("expression"));
            row.put("type", type);
            row.put("clientVersion", version);
            row.put("result", result);
            registrations.add(row);
        } else {
            b.filters().unRegister(group);
            for (ConsumerFilterData d : b.filters().getByGroup(group)) {
                registrations.add(regRow(index, "unregister", d, group, d.getTopic()));
            }
        }
        Thread.sleep(2);
    }

    /** A consumer heartbeat as DefaultConsumerIdsChangeListener passes it on: register(group, subList). */
    private void heartbeat(int index, JSONObject e) throws Exception {
        b.waitDispatch();
        Thread.sleep(2);
        String group = e.getString("group");
        groups.add(group);
        List<Subscription> subList = new ArrayList<>();
        JSONArray subs = e.getJSONArray("subscriptions");
        for (int i = 0; subs != null && i < subs.size(); i++) {
            JSONObject s = subs.getJSONObject(i);
            subList.add(Subscription.of(s.getString("topic"), s.getString("expression"),
                StoreBroker.str(s, "type", "SQL92"), s.getLongValue("subVersion", 1L)));
        }
        long before = System.currentTimeMillis();
        Subscription.register(b.filters(), group, subList);
        long after = System.currentTimeMillis();
        JSONObject row = new JSONObject();
        row.put("eventIndex", index);
        row.put("kind", "heartbeat");
        row.put("group", group);
        row.put("nowBefore", before);
        row.put("nowAfter", after);
        row.put("filters", allFilters());
        registrations.add(row);
        Thread.sleep(2);
    }

    /**
     * ConsumerFilterManager.clean() under a given filterDataCleanTimeSpan (restored afterwards). Messages put before
     * the clean are dispatched first, so their bitmaps never see records the clean removes.
     */
    private void clean(int index, JSONObject e) throws Exception {
        b.waitDispatch();
        long span = e.getLongValue("spanMs", b.brokerConfig.getFilterDataCleanTimeSpan());
        long saved = b.brokerConfig.getFilterDataCleanTimeSpan();
        b.brokerConfig.setFilterDataCleanTimeSpan(span);
        long before = System.currentTimeMillis();
        b.filters().clean();
        long after = System.currentTimeMillis();
        b.brokerConfig.setFilterDataCleanTimeSpan(saved);
        JSONObject row = new JSONObject();
        row.put("eventIndex", index);
        row.put("kind", "clean");
        row.put("spanMs", span);
        row.put("nowBefore", before);
        row.put("nowAfter", after);
        row.put("topics", new ArrayList<>(new TreeSet<>(b.filters().getFilterDataByTopic().keySet())));
        row.put("filters", allFilters());
        registrations.add(row);
    }

    private JSONArray allFilters() {
        JSONArray filters = new JSONArray();
        b.filters().getFilterDataByTopic().values().forEach(byTopic ->
            byTopic.getGroupFilterData().values().forEach(d -> filters.add(filterDataJson(d))));
        return filters;
    }

    private JSONObject regRow(int index, String kind, ConsumerFilterData d, String group, String topic) {
        JSONObject row = new JSONObject();
        row.put("eventIndex", index);
        row.put("kind", kind);
        row.put("group", group);
        row.put("topic", topic);
        row.put("filterData", filterDataJson(d));
        if (d != null) {
            row.put("expression", d.getExpression());
            row.put("type", d.getExpressionType());
            row.put("clientVersion", d.getClientVersion());
            row.put("bornTime", d.getBornTime());
            row.put("deadTime", d.getDeadTime());
            row.put("bloom", PullReplay.bloomJson(d.getBloomFilterData()));
        }
        return row;
    }

    static JSONObject filterDataJson(ConsumerFilterData d) {
        if (d == null) {
            return null;
        }
        JSONObject o = new JSONObject();
        o.put("topic", d.getTopic());
        o.put("group", d.getConsumerGroup());
        o.put("expression", d.getExpression());
        o.put("type", d.getExpressionType());
        o.put("clientVersion", d.getClientVersion());
        o.put("bornTime", d.getBornTime());
        o.put("deadTime", d.getDeadTime());
        o.put("dead", d.isDead());
        o.put("compiled", d.getCompiledExpression() != null);
        o.put("bloom", PullReplay.bloomJson(d.getBloomFilterData()));
        return o;
    }

    private void message(int index, JSONObject m) throws Exception {
        String id = StoreBroker.str(m, "id", "m" + index);
        messageEvents.put(id, m);
        JSONObject retry = m.getJSONObject("retry");
        String topic;
        TopicConfig tc;
        if (retry != null) {
            topic = MixAll.getRetryTopic(retry.getString("group"));
            groups.add(retry.getString("group"));
            tc = ensureTopic(topic, 1);
        } else {
            topic = m.getString("topic");
            tc = ensureTopic(topic, 4);
        }
        boolean prepared = "prepared".equals(m.getString("tx"));
        MessageExt inner = StoreMessages.build(m, id, topic, b, tc.getTopicFilterType(), prepared);
        PutMessageResult r;
        if (prepared && "broker5".equals(txMode)) {
            r = b.putHalfMessage(bridge, inner);
        } else {
            r = b.putMessage(inner);
        }
        JSONObject row = putRow(id, index, r, inner);
        messages.add(row);
        putRows.put(id, row);
    }

    private JSONObject putRow(String id, int index, PutMessageResult r, MessageExt inner) {
        JSONObject row = new JSONObject();
        row.put("id", id);
        row.put("eventIndex", index);
        row.put("status", r == null ? "NULL" : r.getPutMessageStatus().name());
        row.put("topic", inner.getTopic());
        row.put("queueId", inner.getQueueId());
        if (r != null && r.getAppendMessageResult() != null && r.isOk()) {
            row.put("commitLogOffset", r.getAppendMessageResult().getWroteOffset());
            row.put("size", r.getAppendMessageResult().getWroteBytes());
            row.put("queueOffset", r.getAppendMessageResult().getLogicsOffset());
            row.put("offsetMsgId", r.getAppendMessageResult().getMsgId());
            row.put("storeTimestamp", r.getAppendMessageResult().getStoreTimestamp());
            idByOffset.put(r.getAppendMessageResult().getWroteOffset(), id);
        }
        row.put("uniqKey", inner.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
        return row;
    }

    private void endTransaction(int index, JSONObject e, String kind) throws Exception {
        String ref = e.getString("ref");
        JSONObject half = putRows.get(ref);
        if (half == null || !half.containsKey("commitLogOffset")) {
            throw new IllegalArgumentException(kind + " of unknown or failed prepared message: " + ref);
        }
        long halfOffset = half.getLongValue("commitLogOffset");
        long halfQueueOffset = half.getLongValue("queueOffset");
        JSONObject tx = new JSONObject();
        tx.put("ref", ref);
        tx.put("eventIndex", index);
        tx.put("kind", kind);
        JSONArray records = new JSONArray();
        tx.put("records", records);
        transactions.add(tx);
        if ("store".equals(txMode)) {
            JSONObject m = messageEvents.get(ref);
            String topic = half.getString("topic");
            MessageExt inner = StoreMessages.build(m, ref, topic, b,
                ensureTopic(topic, 4).getTopicFilterType(), true);
            int value = "commit".equals(kind) ? MessageSysFlag.TRANSACTION_COMMIT_TYPE
                : MessageSysFlag.TRANSACTION_ROLLBACK_TYPE;
            inner.setSysFlag(MessageSysFlag.resetTransactionValue(inner.getSysFlag(), value));
            inner.setPreparedTransactionOffset(halfOffset);
            records.add(putRow(ref + ":" + kind, index, b.putMessage(inner), inner));
            return;
        }
        b.waitDispatch();
        MessageExt halfMsg = b.store.lookMessageByOffset(halfOffset);
        if ("commit".equals(kind)) {
            MessageExt inner = b.endMessageTransaction(halfMsg);
            inner.setSysFlag(MessageSysFlag.resetTransactionValue(inner.getSysFlag(), MessageSysFlag.TRANSACTION_COMMIT_TYPE));
            inner.setQueueOffset(halfQueueOffset);
            inner.setPreparedTransactionOffset(halfOffset);
            inner.setStoreTimestamp(halfMsg.getStoreTimestamp());
            MessageAccessor.clearProperty(inner, MessageConst.PROPERTY_TRANSACTION_PREPARED);
            records.add(putRow(ref + ":commit", index, b.putMessage(inner), inner));
        }
        long before = b.store.getMaxPhyOffset();
        boolean ok = b.writeRemoveOp(bridge, halfMsg, halfQueueOffset);
        JSONObject opRow = new JSONObject();
        opRow.put("id", ref + ":op");
        opRow.put("status", ok ? "PUT_OK" : "FAILED");
        opRow.put("topic", TransactionalMessageUtil.buildOpTopic());
        opRow.put("queueId", halfMsg.getQueueId());
        opRow.put("commitLogOffsetAtLeast", before);
        records.add(opRow);
        b.waitDispatch();
        idByOffsetAfter(before, ref + ":op");
    }

    /** Attributes the single record written at or after `before` (the op record) to an id. */
    private void idByOffsetAfter(long before, String id) {
        long max = b.store.getMaxPhyOffset();
        MessageExt m = null;
        for (long off = before; off < max && m == null; ) {
            m = b.store.lookMessageByOffset(off);
            if (m == null) {
                long fileSize = b.storeConfig.getMappedFileSizeCommitLog();
                off = (off / fileSize + 1) * fileSize;
            } else {
                idByOffset.put(m.getCommitLogOffset(), id);
            }
        }
    }

    private void persistConfigs() throws Exception {
        for (String g : groups) {
            if (g == null) {
                continue;
            }
            JSONObject groupAttrs = scenario.getJSONObject("groupAttributes");
            JSONObject attrs = groupAttrs == null ? null : groupAttrs.getJSONObject(g);
            java.util.Map<String, String> m = null;
            if (attrs != null) {
                m = new java.util.HashMap<>();
                for (String k : attrs.keySet()) {
                    m.put(k, attrs.getString(k));
                }
            }
            b.updateSubscriptionGroup(g, m);
        }
        JSONArray offsets = scenario.getJSONArray("offsets");
        for (int i = 0; offsets != null && i < offsets.size(); i++) {
            JSONObject o = offsets.getJSONObject(i);
            b.controller.getConsumerOffsetManager().commitOffset("replay", o.getString("group"), o.getString("topic"),
                o.getIntValue("queueId"), o.getLongValue("offset"));
        }
        for (int i = 0; i < 2; i++) {
            b.controller.getTopicConfigManager().persist();
            b.controller.getSubscriptionGroupManager().persist();
            b.controller.getConsumerOffsetManager().persist();
            b.filters().persist();
        }
    }

    private JSONObject report(RecordListing listing) throws Exception {
        JSONObject r = new JSONObject();
        r.put("way", StoreBroker.WAY);
        r.put("rocketmqVersion", org.apache.rocketmq.common.MQVersion.getVersionDesc(
            org.apache.rocketmq.common.MQVersion.CURRENT_VERSION));
        r.put("transactionMode", txMode);
        r.put("broker", b.effectiveBroker);
        r.put("store", b.effectiveStore);
        r.put("bloom", b.bloomJson());
        r.put("bitMapLengthConsumeQueueExt", b.storeConfig.getBitMapLengthConsumeQueueExt());
        r.put("maxDelayLevel", b.maxDelayLevel());
        r.put("messages", messages);
        r.put("transactions", transactions);
        r.put("registrations", registrations);
        r.put("copies", copies);
        r.put("filters", allFilters());
        r.put("queues", listing.queues());
        return r;
    }
}
