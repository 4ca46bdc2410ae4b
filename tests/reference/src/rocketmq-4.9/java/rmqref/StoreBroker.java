package rmqref;

import com.alibaba.fastjson2.JSONObject;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentMap;
import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.broker.client.ConsumerIdsChangeListener;
import org.apache.rocketmq.broker.client.ConsumerManager;
import org.apache.rocketmq.broker.filter.CommitLogDispatcherCalcBitMap;
import org.apache.rocketmq.broker.filter.ConsumerFilterManager;
import org.apache.rocketmq.broker.processor.EndTransactionProcessor;
import org.apache.rocketmq.broker.transaction.queue.TransactionalMessageBridge;
import org.apache.rocketmq.broker.transaction.queue.TransactionalMessageUtil;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.TopicFilterType;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.store.ConsumeQueue;
import org.apache.rocketmq.store.ConsumeQueueExt;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.MessageExtBrokerInner;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.SelectMappedBufferResult;
import org.apache.rocketmq.store.config.BrokerRole;
import org.apache.rocketmq.store.config.MessageStoreConfig;

/**
 * The broker-side object graph (way A: a dormant BrokerController) around one real 4.9.7 DefaultMessageStore: the
 * 4.9 line's version of the class (src/rocketmq-5 has the 5.x one, with the same members).
 *
 * Wired as 4.9.7's BrokerController.initialize() does it: new DefaultMessageStore(storeConfig, brokerStatsManager,
 * listener, brokerConfig), CalcBitMap addFirst. The differences from the 5.x wiring are 4.9's own: the store owns
 * its ScheduleMessageService (store.schedule, loaded by DefaultMessageStore.load and started by start()), the
 * delay-level rewrite of a put happens in CommitLog (there is no put-hook list to register), and the settings
 * 4.9.7 does not have (RocksDB stores, configManagerVersion, compaction, topic and group attributes) are refused
 * when a scenario asks for them.
 */
final class StoreBroker {
    static final String WAY = "A";

    final BrokerConfig brokerConfig = new BrokerConfig();
    final MessageStoreConfig storeConfig = new MessageStoreConfig();
    final NettyServerConfig serverConfig = new NettyServerConfig();
    final JSONObject effectiveBroker = new JSONObject();
    final JSONObject effectiveStore = new JSONObject();
    final BrokerController controller;
    final DefaultMessageStore store;
    final Path root;
    private EndTransactionProcessor endTransactionProcessor;

    /**
     * The harness's broker and store settings (a scenario's "broker" and "store" objects, harness defaults where a key
     * is absent; see PROTOCOL.md, store) applied to fresh configs: what this class's constructor builds its dormant
     * controller from, and what the group mode gives each broker it really starts. Settings 4.9.7 does not have are
     * refused.
     */
    static void configure(JSONObject broker, JSONObject storeCfg, Path root, BrokerConfig bc, MessageStoreConfig sc,
                          NettyServerConfig nc) {
        JSONObject b = broker == null ? new JSONObject() : broker;
        JSONObject s = storeCfg == null ? new JSONObject() : storeCfg;
        absent(b, "configManagerVersion", "v1");
        absent(s, "storeType", "default");
        absent(s, "enableCompaction", false);
        absent(s, "rocksdbCQDoubleWriteEnable", false);
        bc.setBrokerClusterName(str(b, "clusterName", "DefaultCluster"));
        bc.setBrokerName(str(b, "brokerName", "broker-a"));
        bc.setBrokerIP1(str(b, "brokerIP", "127.0.0.1"));
        bc.setEnableCalcFilterBitMap(bool(b, "enableCalcFilterBitMap", true));
        bc.setExpectConsumerNumUseFilter(b.getIntValue("expectConsumerNumUseFilter", 32));
        bc.setMaxErrorRateOfBloomFilter(b.getIntValue("maxErrorRateOfBloomFilter", 20));
        bc.setEnablePropertyFilter(bool(b, "enablePropertyFilter", true));
        bc.setFilterSupportRetry(bool(b, "filterSupportRetry", false));
        nc.setListenPort(b.getIntValue("listenPort", 10911));

        sc.setStorePathRootDir(root.toString());
        sc.setMappedFileSizeCommitLog(s.getIntValue("mappedFileSizeCommitLog", 65536));
        sc.setMappedFileSizeConsumeQueue(s.getIntValue("mappedFileSizeConsumeQueue", 200));
        sc.setMappedFileSizeConsumeQueueExt(s.getIntValue("mappedFileSizeConsumeQueueExt", 1024));
        sc.setMessageIndexEnable(bool(s, "messageIndexEnable", false));
        sc.setEnableMultiDispatch(bool(s, "enableMultiDispatch", false));
        sc.setEnableLmq(bool(s, "enableLmq", false));
        sc.setEnableConsumeQueueExt(bool(b, "enableConsumeQueueExt", true));
        sc.setHaListenPort(0);
    }

    /**
     * What a broker the group mode really starts needs on top of {@link #configure}: nothing on 4.9.7 (it has no
     * timer wheel, and its NettyServerConfig no bind address: its remoting servers listen on every address).
     */
    static void configureLive(BrokerConfig bc, MessageStoreConfig sc, NettyServerConfig nc) {
    }

    /** 4.9.7's NettyServerConfig has no bind address: the name server listens on every address. */
    static void loopback(NettyServerConfig nc) {
    }

    /**
     * Calls `watcher` with the group of every ConsumerManager event. 4.9.7's manager has ONE listener (a private
     * final field, no list to append to): it is replaced by one that calls the broker's own first, then the watcher.
     * REGISTER comes after each heartbeat's updateSubscription, so the watcher sees every state a group's
     * subscription table takes.
     */
    static void watchConsumerGroups(BrokerController controller, java.util.function.Consumer<String> watcher) {
        ConsumerManager mgr = controller.getConsumerManager();
        try {
            java.lang.reflect.Field f = ConsumerManager.class.getDeclaredField("consumerIdsChangeListener");
            f.setAccessible(true);
            ConsumerIdsChangeListener inner = (ConsumerIdsChangeListener) f.get(mgr);
            f.set(mgr, (ConsumerIdsChangeListener) (event, group, args) -> {
                inner.handle(event, group, args);
                watcher.accept(group);
            });
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("cannot watch 4.9.7's ConsumerManager", e);
        }
    }

    /** Configures everything before the controller is built: ConsumerFilterManager reads the bloom (f, n) once. */
    StoreBroker(JSONObject broker, JSONObject storeCfg, Path root) throws IOException {
        this.root = root;
        configure(broker, storeCfg, root, brokerConfig, storeConfig, serverConfig);

        controller = new BrokerController(brokerConfig, serverConfig, new NettyClientConfig(), storeConfig);
        store = new DefaultMessageStore(storeConfig, controller.getBrokerStatsManager(), null, brokerConfig);
        controller.setMessageStore(store);
        store.getDispatcherList().addFirst(new CommitLogDispatcherCalcBitMap(brokerConfig, filters()));

        effectiveBroker.put("clusterName", brokerConfig.getBrokerClusterName());
        effectiveBroker.put("brokerName", brokerConfig.getBrokerName());
        effectiveBroker.put("brokerIP", brokerConfig.getBrokerIP1());
        effectiveBroker.put("listenPort", serverConfig.getListenPort());
        effectiveBroker.put("enableConsumeQueueExt", storeConfig.isEnableConsumeQueueExt());
        effectiveBroker.put("enableCalcFilterBitMap", brokerConfig.isEnableCalcFilterBitMap());
        effectiveBroker.put("expectConsumerNumUseFilter", brokerConfig.getExpectConsumerNumUseFilter());
        effectiveBroker.put("maxErrorRateOfBloomFilter", brokerConfig.getMaxErrorRateOfBloomFilter());
        effectiveBroker.put("enablePropertyFilter", brokerConfig.isEnablePropertyFilter());
        effectiveBroker.put("filterSupportRetry", brokerConfig.isFilterSupportRetry());
        effectiveBroker.put("configManagerVersion", null);
        effectiveStore.put("mappedFileSizeCommitLog", storeConfig.getMappedFileSizeCommitLog());
        effectiveStore.put("mappedFileSizeConsumeQueue", storeConfig.getMappedFileSizeConsumeQueue());
        effectiveStore.put("mappedFileSizeConsumeQueueExt", storeConfig.getMappedFileSizeConsumeQueueExt());
        effectiveStore.put("messageIndexEnable", storeConfig.isMessageIndexEnable());
        effectiveStore.put("enableCompaction", null);
        effectiveStore.put("enableMultiDispatch", storeConfig.isEnableMultiDispatch());
        effectiveStore.put("enableLmq", storeConfig.isEnableLmq());
        effectiveStore.put("haListenPort", storeConfig.getHaListenPort());
        effectiveStore.put("storeType", null);
        effectiveStore.put("rocksdbCQDoubleWriteEnable", null);
    }

    /** Refuses a setting 4.9.7 does not have, unless the scenario asks for what 4.9.7 always does anyway. */
    private static void absent(JSONObject o, String key, Object only) {
        Object v = o.get(key);
        if (v != null && !only.equals(v)) {
            throw new IllegalArgumentException(key + "=" + v + ": RocketMQ 4.9.7 has no such setting (it always behaves as "
                + key + "=" + only + ")");
        }
    }

    boolean rocksdb() {
        return false;
    }

    boolean configV2() {
        return false;
    }

    /** Topics with consume queues: the store's queue table. */
    TreeSet<String> queueTopics() {
        return new TreeSet<>(store.getConsumeQueueTable().keySet());
    }

    /** Queue ids of a topic in the store's queue table (loaded from consumequeue/), sorted. */
    List<Integer> queueIds(String topic) throws Exception {
        TreeSet<Integer> ids = new TreeSet<>();
        ConcurrentMap<Integer, ConsumeQueue> m = store.getConsumeQueueTable().get(topic);
        if (m != null) {
            ids.addAll(m.keySet());
        }
        return new ArrayList<>(ids);
    }

    /** Shuts the store down (it stops its ScheduleMessageService and persists delayOffset.json itself). */
    void shutdown() {
        QuickShutdown.run(store, store::shutdown);
    }

    /** Retention events are wired for the 5.x line only (4.9.7 deletes up to ten files per call). */
    int deleteOldestCommitLogFiles(int n) {
        throw new UnsupportedOperationException("the expire event is not wired for RocketMQ 4.9.7");
    }

    ConsumerFilterManager filters() {
        return controller.getConsumerFilterManager();
    }

    /**
     * Loads and starts the store; a false load means a commit log file has the wrong size. 4.9.7's start() also
     * starts the store's ScheduleMessageService (handleScheduleMessageService(MASTER)), whose timers would deliver
     * due delayed messages from 1 s on; it is shut down again at once (handleScheduleMessageService(SLAVE): what
     * a role change does; it persists config/delayOffset.json), so nothing is delivered during a run, as with the
     * 5.x line's dormant controller, whose ScheduleMessageService never starts.
     */
    void start() throws Exception {
        if (!store.load()) {
            throw new IllegalStateException("DefaultMessageStore.load() returned false");
        }
        store.start();
        store.handleScheduleMessageService(BrokerRole.SLAVE);
    }

    /** Blocks until the reput thread has dispatched everything written (CQ, ext, bitmaps). */
    void waitDispatch() throws InterruptedException {
        long deadline = System.currentTimeMillis() + 60_000;
        while (store.dispatchBehindBytes() > 0) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("dispatch did not catch up: " + store.dispatchBehindBytes());
            }
            Thread.sleep(1);
        }
    }

    JSONObject bloomJson() {
        JSONObject o = new JSONObject();
        o.put("f", brokerConfig.getMaxErrorRateOfBloomFilter());
        o.put("n", brokerConfig.getExpectConsumerNumUseFilter());
        o.put("m", filters().getBloomFilter().getM());
        o.put("k", filters().getBloomFilter().getK());
        return o;
    }

    /** A new broker-side message of this release (4.9: org.apache.rocketmq.store.MessageExtBrokerInner). */
    static MessageExtBrokerInner newInner() {
        return new MessageExtBrokerInner();
    }

    static long tagsString2tagsCode(TopicFilterType filterType, String tags) {
        return MessageExtBrokerInner.tagsString2tagsCode(filterType, tags);
    }

    /** DefaultMessageStore.putMessage of a message built by {@link #newInner} (4.9: CommitLog does the delay rewrite). */
    PutMessageResult putMessage(MessageExt inner) {
        return store.putMessage((MessageExtBrokerInner) inner);
    }

    /** TransactionalMessageBridge.putHalfMessage of a message built by {@link #newInner}. */
    PutMessageResult putHalfMessage(TransactionalMessageBridge bridge, MessageExt inner) {
        return bridge.putHalfMessage((MessageExtBrokerInner) inner);
    }

    /**
     * EndTransactionProcessor.endMessageTransaction(half) (private: called by reflection). 4.9.7's controller
     * builds its EndTransactionProcessor in registerProcessor() and keeps no reference, so the harness builds one
     * (the method reads nothing from it but the message).
     */
    MessageExt endMessageTransaction(MessageExt halfMsg) throws Exception {
        if (endTransactionProcessor == null) {
            endTransactionProcessor = new EndTransactionProcessor(controller);
        }
        java.lang.reflect.Method end = EndTransactionProcessor.class.getDeclaredMethod("endMessageTransaction", MessageExt.class);
        end.setAccessible(true);
        return (MessageExtBrokerInner) end.invoke(endTransactionProcessor, halfMsg);
    }

    /**
     * The op record that ends a transaction: 4.9.7's TransactionalMessageServiceImpl.deletePrepareMessage(half) is
     * bridge.putOpMessage(half, REMOVETAG), which writes it at once (tags "d", body String.valueOf(half's queue
     * offset), no trailing separator).
     */
    boolean writeRemoveOp(TransactionalMessageBridge bridge, MessageExt halfMsg, long halfQueueOffset) {
        return bridge.putOpMessage(halfMsg, TransactionalMessageUtil.REMOVETAG);
    }

    /** 4.9.7's TopicConfig has no attributes. */
    void setTopicAttributes(TopicConfig tc, Map<String, String> attributes) {
        throw new IllegalArgumentException("topic attributes: RocketMQ 4.9.7's TopicConfig has none (topic "
            + tc.getTopicName() + ")");
    }

    /** A subscriptionGroup.json entry; 4.9.7's SubscriptionGroupConfig has no attributes. */
    void updateSubscriptionGroup(String group, Map<String, String> attributes) {
        if (attributes != null) {
            throw new IllegalArgumentException("group attributes: RocketMQ 4.9.7's SubscriptionGroupConfig has none"
                + " (group " + group + ")");
        }
        SubscriptionGroupConfig sgc = new SubscriptionGroupConfig();
        sgc.setGroupName(group);
        controller.getSubscriptionGroupManager().updateSubscriptionGroupConfig(sgc);
    }

    /** The store's ScheduleMessageService (4.9: store.schedule, delay levels parsed by load()) max delay level. */
    int maxDelayLevel() {
        return store.getScheduleMessageService().getMaxDelayLevel();
    }

    /** 4.9.7's BrokerConfig has no recoverConcurrently. */
    Boolean recoverConcurrently() {
        return null;
    }

    /** {topic, queueId, minOffset, maxOffset} of every consume queue in the store's table, sorted by topic and queue id. */
    List<JSONObject> consumeQueueRanges() {
        List<JSONObject> rows = new ArrayList<>();
        TreeMap<String, ConcurrentMap<Integer, ConsumeQueue>> table = new TreeMap<>(store.getConsumeQueueTable());
        for (Map.Entry<String, ConcurrentMap<Integer, ConsumeQueue>> e : table.entrySet()) {
            for (ConsumeQueue q : new TreeMap<>(e.getValue()).values()) {
                JSONObject row = new JSONObject();
                row.put("topic", e.getKey());
                row.put("queueId", q.getQueueId());
                row.put("minOffset", q.getMinOffsetInQueue());
                row.put("maxOffset", q.getMaxOffsetInQueue());
                rows.add(row);
            }
        }
        return rows;
    }

    /**
     * The units of one queue from `from` to `to`, read as 4.9.7's getMessage reads them: ConsumeQueue.getIndexBuffer
     * (the rest of one CQ file per call), 20-byte units, and for an ext address (isExtAddr) getExt(tagsCode, unit):
     * found → the ext unit's tagsCode, not found → tagsCode null (getMessage's isTagsCodeLegal = false).
     */
    TreeMap<Long, JSONObject> units(String topic, int qid, long from, long to) throws Exception {
        TreeMap<Long, JSONObject> out = new TreeMap<>();
        ConsumeQueue cq = store.getConsumeQueue(topic, qid);
        long next = from;
        while (next < to) {
            SelectMappedBufferResult r = cq.getIndexBuffer(next);
            if (r == null) {
                break;
            }
            long before = next;
            try {
                ByteBuffer buf = r.getByteBuffer();
                for (int i = 0; i + ConsumeQueue.CQ_STORE_UNIT_SIZE <= r.getSize() && next < to;
                     i += ConsumeQueue.CQ_STORE_UNIT_SIZE) {
                    long pos = buf.getLong();
                    int size = buf.getInt();
                    long tagsCode = buf.getLong();
                    JSONObject o = new JSONObject();
                    o.put("commitLogOffset", pos);
                    o.put("size", size);
                    Long tc = tagsCode;
                    ConsumeQueueExt.CqExtUnit ext = null;
                    if (cq.isExtAddr(tagsCode)) {
                        ConsumeQueueExt.CqExtUnit u = new ConsumeQueueExt.CqExtUnit();
                        if (cq.getExt(tagsCode, u)) {
                            ext = u;
                            tc = u.getTagsCode();
                        } else {
                            tc = null;
                        }
                    }
                    o.put("tagsCode", tc == null ? null : Long.toString(tc));
                    o.put("ext", RecordListing.extJson(ext));
                    out.put(next, o);
                    next++;
                }
            } finally {
                r.release();
            }
            if (next == before) {
                break;
            }
        }
        return out;
    }

    static String str(JSONObject o, String k, String d) {
        String v = o.getString(k);
        return v == null ? d : v;
    }

    static boolean bool(JSONObject o, String k, boolean d) {
        Boolean v = o.getBoolean(k);
        return v == null ? d : v;
    }
}
