package rmqref;

import com.alibaba.fastjson2.JSONObject;
import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentMap;
import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.broker.client.ConsumerGroupEvent;
import org.apache.rocketmq.broker.client.ConsumerIdsChangeListener;
import org.apache.rocketmq.broker.filter.CommitLogDispatcherCalcBitMap;
import org.apache.rocketmq.broker.filter.ConsumerFilterManager;
import org.apache.rocketmq.broker.processor.EndTransactionProcessor;
import org.apache.rocketmq.broker.transaction.queue.TransactionalMessageBridge;
import org.apache.rocketmq.broker.transaction.queue.TransactionalMessageUtil;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.TopicFilterType;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBrokerInner;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.RocksDBMessageStore;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.queue.ConsumeQueueInterface;
import org.apache.rocketmq.store.queue.CqUnit;
import org.apache.rocketmq.store.queue.ReferredIterator;

/**
 * The broker-side object graph (way A: a dormant BrokerController) around one real DefaultMessageStore: the 5.x
 * line's version (src/rocketmq-4.9 has the 4.9 one). Besides the wiring it holds every broker call the shared
 * modes make whose classes or signatures differ between release lines.
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

    /**
     * The harness's broker and store settings (a scenario's "broker" and "store" objects, harness defaults where a key
     * is absent; see PROTOCOL.md, store) applied to fresh configs: what this class's constructor builds its dormant
     * controller from, and what the group mode gives each broker it really starts.
     */
    static void configure(JSONObject broker, JSONObject storeCfg, Path root, BrokerConfig bc, MessageStoreConfig sc,
                          NettyServerConfig nc) {
        JSONObject b = broker == null ? new JSONObject() : broker;
        JSONObject s = storeCfg == null ? new JSONObject() : storeCfg;
        bc.setBrokerClusterName(str(b, "clusterName", "DefaultCluster"));
        bc.setBrokerName(str(b, "brokerName", "broker-a"));
        bc.setBrokerIP1(str(b, "brokerIP", "127.0.0.1"));
        bc.setEnableCalcFilterBitMap(bool(b, "enableCalcFilterBitMap", true));
        bc.setExpectConsumerNumUseFilter(b.getIntValue("expectConsumerNumUseFilter", 32));
        bc.setMaxErrorRateOfBloomFilter(b.getIntValue("maxErrorRateOfBloomFilter", 20));
        bc.setEnablePropertyFilter(bool(b, "enablePropertyFilter", true));
        bc.setFilterSupportRetry(bool(b, "filterSupportRetry", false));
        nc.setListenPort(b.getIntValue("listenPort", 10911));
        bc.setConfigManagerVersion(str(b, "configManagerVersion", bc.getConfigManagerVersion()));

        sc.setStorePathRootDir(root.toString());
        sc.setMappedFileSizeCommitLog(s.getIntValue("mappedFileSizeCommitLog", 65536));
        sc.setMappedFileSizeConsumeQueue(s.getIntValue("mappedFileSizeConsumeQueue", 200));
        sc.setMappedFileSizeConsumeQueueExt(s.getIntValue("mappedFileSizeConsumeQueueExt", 1024));
        sc.setMessageIndexEnable(bool(s, "messageIndexEnable", false));
        sc.setEnableCompaction(bool(s, "enableCompaction", false));
        sc.setEnableMultiDispatch(bool(s, "enableMultiDispatch", false));
        sc.setEnableLmq(bool(s, "enableLmq", false));
        sc.setEnableConsumeQueueExt(bool(b, "enableConsumeQueueExt", true));
        sc.setHaListenPort(0);
        sc.setStoreType(str(s, "storeType", sc.getStoreType()));
        if (!sc.isEnableRocksDBStore()) {
            // File queues plus RocksDB queues in the same consumequeue/ directory (read by the store's constructor,
            // or by 5.3.3's BrokerController.initializeMessageStore): see the constructor.
            sc.setRocksdbCQDoubleWriteEnable(bool(s, "rocksdbCQDoubleWriteEnable", false));
        }
    }

    /**
     * What a broker the group mode really starts (BrokerController.initialize() and start()) needs on top of
     * {@link #configure}: 5.x's timer wheel off (its timerwheel/timerlog files are tens of MB; no mode uses timer
     * messages) and every remoting server bound to the loopback address only.
     */
    static void configureLive(BrokerConfig bc, MessageStoreConfig sc, NettyServerConfig nc) {
        sc.setTimerWheelEnable(false);
        nc.setBindAddress("127.0.0.1");
    }

    /** The name server's remoting server bound to the loopback address only (5.x; 4.9.7 binds every address). */
    static void loopback(NettyServerConfig nc) {
        nc.setBindAddress("127.0.0.1");
    }

    /**
     * Calls `watcher` with the group of every ConsumerManager event (5.x: a listener appended to the manager's list,
     * so it runs after the broker's own). REGISTER comes after each heartbeat's updateSubscription, so the watcher
     * sees every state a group's subscription table takes.
     */
    static void watchConsumerGroups(BrokerController controller, java.util.function.Consumer<String> watcher) {
        controller.getConsumerManager().appendConsumerIdsChangeListener(new ConsumerIdsChangeListener() {
            @Override
            public void handle(ConsumerGroupEvent event, String group, Object... args) {
                watcher.accept(group);
            }

            @Override
            public void shutdown() {
            }
        });
    }

    /** Configures everything before the controller is built: ConsumerFilterManager reads the bloom (f, n) once. */
    StoreBroker(JSONObject broker, JSONObject storeCfg, Path root) throws IOException {
        this.root = root;
        configure(broker, storeCfg, root, brokerConfig, storeConfig, serverConfig);

        controller = new BrokerController(brokerConfig, serverConfig, new NettyClientConfig(), storeConfig);
        if (configV2()) {
            // configManagerVersion=v2: the controller's constructor picked the V2 managers over ONE RocksDB database,
            // config/rdb/ (ConfigStorage), which BrokerController.initializeMetadata starts before their load().
            loadConfig(configStorage().start(), "rdb");
            loadConfig(controller.getTopicConfigManager().load(), "topics (v2)");
            loadConfig(controller.getSubscriptionGroupManager().load(), "subscriptionGroups (v2)");
            loadConfig(controller.getConsumerOffsetManager().load(), "consumerOffsets (v2)");
        }
        if (storeConfig.isEnableRocksDBStore()) {
            // storeType=defaultRocksDB: the controller's constructor picked the RocksDB config managers (config/topics/,
            // config/subscriptionGroups/, config/consumerOffsets/), which open their databases only in load(), and
            // BrokerController.initializeMessageStore builds a RocksDBMessageStore (consume queues in RocksDB).
            if (!configV2()) {
                loadConfig(controller.getTopicConfigManager().load(), "topics");
                loadConfig(controller.getSubscriptionGroupManager().load(), "subscriptionGroups");
                loadConfig(controller.getConsumerOffsetManager().load(), "consumerOffsets");
            }
            store = new RocksDBMessageStore(storeConfig, controller.getBrokerStatsManager(), null, brokerConfig,
                controller.getTopicConfigManager().getTopicConfigTable());
        } else {
            // File queues plus RocksDB queues in the same consumequeue/ directory (set by configure): 5.5.1's
            // DefaultMessageStore constructor builds a CombineConsumeQueueStore from the setting; 5.3.3's
            // initializeMessageStore calls enableRocksdbCQWrite() on the built store (found by reflection: 5.5.1 has
            // no such method).
            store = new DefaultMessageStore(storeConfig, controller.getBrokerStatsManager(), null, brokerConfig,
                controller.getTopicConfigManager().getTopicConfigTable());
            if (storeConfig.isRocksdbCQDoubleWriteEnable()) {
                try {
                    store.getClass().getMethod("enableRocksdbCQWrite").invoke(store);
                } catch (NoSuchMethodException e) {
                    // 5.5.1: the constructor did it
                } catch (ReflectiveOperationException e) {
                    throw new IllegalStateException("enableRocksdbCQWrite failed", e);
                }
            }
        }
        controller.setMessageStore(store);
        store.getDispatcherList().addFirst(new CommitLogDispatcherCalcBitMap(brokerConfig, filters()));
        controller.getScheduleMessageService().parseDelayLevel();
        controller.registerMessageStoreHook();

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
        effectiveBroker.put("configManagerVersion", brokerConfig.getConfigManagerVersion());
        effectiveStore.put("mappedFileSizeCommitLog", storeConfig.getMappedFileSizeCommitLog());
        effectiveStore.put("mappedFileSizeConsumeQueue", storeConfig.getMappedFileSizeConsumeQueue());
        effectiveStore.put("mappedFileSizeConsumeQueueExt", storeConfig.getMappedFileSizeConsumeQueueExt());
        effectiveStore.put("messageIndexEnable", storeConfig.isMessageIndexEnable());
        effectiveStore.put("enableCompaction", storeConfig.isEnableCompaction());
        effectiveStore.put("enableMultiDispatch", storeConfig.isEnableMultiDispatch());
        effectiveStore.put("enableLmq", storeConfig.isEnableLmq());
        effectiveStore.put("haListenPort", storeConfig.getHaListenPort());
        effectiveStore.put("storeType", storeConfig.getStoreType());
        effectiveStore.put("rocksdbCQDoubleWriteEnable", storeConfig.isRocksdbCQDoubleWriteEnable());
    }

    private static void loadConfig(boolean ok, String name) {
        if (!ok) {
            throw new IllegalStateException("the RocksDB config store " + name + " did not load");
        }
    }

    boolean rocksdb() {
        return storeConfig.isEnableRocksDBStore();
    }

    boolean configV2() {
        return "v2".equals(brokerConfig.getConfigManagerVersion());
    }

    /** The controller's ConfigStorage (a protected field: the dormant controller never runs initializeMetadata). */
    org.apache.rocketmq.common.config.AbstractRocksDBStorage configStorage() {
        try {
            java.lang.reflect.Field f = BrokerController.class.getDeclaredField("configStorage");
            f.setAccessible(true);
            return (org.apache.rocketmq.common.config.AbstractRocksDBStorage) f.get(controller);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("no BrokerController.configStorage", e);
        }
    }

    /** Topics with consume queues: the store's queue table, plus (RocksDB) every configured topic. */
    TreeSet<String> queueTopics() {
        TreeSet<String> topics = new TreeSet<>(store.getConsumeQueueTable().keySet());
        if (rocksdb()) {
            topics.addAll(controller.getTopicConfigManager().getTopicConfigTable().keySet());
        }
        return topics;
    }

    /**
     * Queue ids of a topic that hold units. A file store lists its queue table (loaded from consumequeue/); a reopened
     * RocksDB store's table starts empty (RocksDBMessageStore.recoverTopicQueueTable), so there every queue id the
     * topic config has is asked for its max offset, as a consumer's rebalance over the topic route would reach it.
     */
    List<Integer> queueIds(String topic) throws Exception {
        TreeSet<Integer> ids = new TreeSet<>();
        ConcurrentMap<Integer, ConsumeQueueInterface> m = store.getConsumeQueueTable().get(topic);
        if (m != null) {
            ids.addAll(m.keySet());
        }
        TopicConfig tc = controller.getTopicConfigManager().getTopicConfigTable().get(topic);
        if (!rocksdb()) {
            return new ArrayList<>(ids);
        }
        for (int q = 0; tc != null && q < Math.max(tc.getReadQueueNums(), tc.getWriteQueueNums()); q++) {
            ids.add(q);
        }
        List<Integer> out = new ArrayList<>();
        for (int q : ids) {
            if (store.getMaxOffsetInQueue(topic, q) > 0) {
                out.add(q);
            }
        }
        return out;
    }

    /** Shuts the store down, then (RocksDB) closes the config databases so every write reaches their files. */
    void shutdown() {
        QuickShutdown.run(store, store::shutdown);
        if (configV2()) {
            configStorage().shutdown();
        } else if (rocksdb()) {
            controller.getTopicConfigManager().stop();
            controller.getSubscriptionGroupManager().stop();
            controller.getConsumerOffsetManager().stop();
        }
    }

    ConsumerFilterManager filters() {
        return controller.getConsumerFilterManager();
    }

    /** Loads and starts the store; a false load means a commit log file has the wrong size. */
    void start() throws Exception {
        if (!store.load()) {
            throw new IllegalStateException("DefaultMessageStore.load() returned false");
        }
        store.start();
    }

    /**
     * The oldest n commit log files deleted by the store's own retention call (CommitLog.deleteExpiredFile with
     * cleanImmediately, as CleanCommitLogService when the disk is full; the newest file is never deleted).
     */
    int deleteOldestCommitLogFiles(int n) {
        return store.getCommitLog().deleteExpiredFile(0L, 0, 1000L, true, n);
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

    /** A new broker-side message of this release (5.x: org.apache.rocketmq.common.message.MessageExtBrokerInner). */
    static MessageExtBrokerInner newInner() {
        return new MessageExtBrokerInner();
    }

    static long tagsString2tagsCode(TopicFilterType filterType, String tags) {
        return MessageExtBrokerInner.tagsString2tagsCode(filterType, tags);
    }

    /** DefaultMessageStore.putMessage of a message built by {@link #newInner}. */
    PutMessageResult putMessage(MessageExt inner) {
        return store.putMessage((MessageExtBrokerInner) inner);
    }

    /** TransactionalMessageBridge.putHalfMessage of a message built by {@link #newInner}. */
    PutMessageResult putHalfMessage(TransactionalMessageBridge bridge, MessageExt inner) {
        return bridge.putHalfMessage((MessageExtBrokerInner) inner);
    }

    /** EndTransactionProcessor.endMessageTransaction(half) (private: called by reflection) on the controller's processor. */
    MessageExt endMessageTransaction(MessageExt halfMsg) throws Exception {
        java.lang.reflect.Method end = EndTransactionProcessor.class.getDeclaredMethod("endMessageTransaction", MessageExt.class);
        end.setAccessible(true);
        return (MessageExtBrokerInner) end.invoke(controller.getEndTransactionProcessor(), halfMsg);
    }

    /**
     * The op record that ends a transaction (5.x: TransactionalMessageServiceImpl.deletePrepareMessage batches it;
     * written here with the bridge's writeOp, tags "d", body "<halfQueueOffset>,").
     */
    boolean writeRemoveOp(TransactionalMessageBridge bridge, MessageExt halfMsg, long halfQueueOffset) {
        Message op = new Message(TransactionalMessageUtil.buildOpTopic(), TransactionalMessageUtil.REMOVE_TAG,
            (halfQueueOffset + TransactionalMessageUtil.OFFSET_SEPARATOR).getBytes(TransactionalMessageUtil.CHARSET));
        return bridge.writeOp(halfMsg.getQueueId(), op);
    }

    /** TopicConfig.setAttributes. */
    void setTopicAttributes(TopicConfig tc, Map<String, String> attributes) {
        tc.setAttributes(attributes);
    }

    /** A subscriptionGroup.json entry (SubscriptionGroupConfig with the attributes, when given). */
    void updateSubscriptionGroup(String group, Map<String, String> attributes) {
        SubscriptionGroupConfig sgc = new SubscriptionGroupConfig();
        sgc.setGroupName(group);
        if (attributes != null) {
            sgc.setAttributes(attributes);
        }
        controller.getSubscriptionGroupManager().updateSubscriptionGroupConfig(sgc);
    }

    /** The broker's ScheduleMessageService (5.x: the controller's) max delay level. */
    int maxDelayLevel() {
        return controller.getScheduleMessageService().getMaxDelayLevel();
    }

    /** BrokerConfig.isRecoverConcurrently. */
    Boolean recoverConcurrently() {
        return brokerConfig.isRecoverConcurrently();
    }

    /** {topic, queueId, minOffset, maxOffset} of every consume queue in the store's table, sorted by topic and queue id. */
    List<JSONObject> consumeQueueRanges() {
        List<JSONObject> rows = new ArrayList<>();
        TreeMap<String, ConcurrentMap<Integer, ConsumeQueueInterface>> table = new TreeMap<>(store.getConsumeQueueTable());
        for (Map.Entry<String, ConcurrentMap<Integer, ConsumeQueueInterface>> e : table.entrySet()) {
            for (ConsumeQueueInterface q : new TreeMap<>(e.getValue()).values()) {
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

    /** The units of one queue from `from` to `to` via ConsumeQueue.iterateFrom (one CQ file per iterator). */
    TreeMap<Long, JSONObject> units(String topic, int qid, long from, long to) throws Exception {
        TreeMap<Long, JSONObject> out = new TreeMap<>();
        ConsumeQueueInterface cq = store.getConsumeQueue(topic, qid);
        long next = from;
        while (next < to) {
            ReferredIterator<CqUnit> it = cq.iterateFrom(next);
            if (it == null) {
                break;
            }
            long before = next;
            try {
                while (it.hasNext()) {
                    CqUnit u = it.next();
                    JSONObject o = new JSONObject();
                    o.put("commitLogOffset", u.getPos());
                    o.put("size", u.getSize());
                    Long tc = u.getValidTagsCodeAsLong();
                    o.put("tagsCode", tc == null ? null : Long.toString(tc));
                    o.put("ext", RecordListing.extJson(u.getCqExtUnit()));
                    out.put(u.getQueueOffset(), o);
                    next = u.getQueueOffset() + u.getBatchNum();
                }
            } finally {
                it.release();
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
