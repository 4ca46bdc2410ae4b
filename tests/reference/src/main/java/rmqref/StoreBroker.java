package rmqref;

import com.alibaba.fastjson2.JSONObject;
import java.io.IOException;
import java.nio.file.Path;
import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.broker.filter.CommitLogDispatcherCalcBitMap;
import org.apache.rocketmq.broker.filter.ConsumerFilterManager;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.config.MessageStoreConfig;

/** The broker-side object graph (way A: a dormant BrokerController) around one real DefaultMessageStore. */
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

    /** Configures everything before the controller is built: ConsumerFilterManager reads the bloom (f, n) once. */
    StoreBroker(JSONObject broker, JSONObject storeCfg, Path root) throws IOException {
        this.root = root;
        JSONObject b = broker == null ? new JSONObject() : broker;
        JSONObject s = storeCfg == null ? new JSONObject() : storeCfg;
        brokerConfig.setBrokerClusterName(str(b, "clusterName", "DefaultCluster"));
        brokerConfig.setBrokerName(str(b, "brokerName", "broker-a"));
        brokerConfig.setBrokerIP1(str(b, "brokerIP", "127.0.0.1"));
        brokerConfig.setEnableCalcFilterBitMap(bool(b, "enableCalcFilterBitMap", true));
        brokerConfig.setExpectConsumerNumUseFilter(b.getIntValue("expectConsumerNumUseFilter", 32));
        brokerConfig.setMaxErrorRateOfBloomFilter(b.getIntValue("maxErrorRateOfBloomFilter", 20));
        brokerConfig.setEnablePropertyFilter(bool(b, "enablePropertyFilter", true));
        brokerConfig.setFilterSupportRetry(bool(b, "filterSupportRetry", false));
        serverConfig.setListenPort(b.getIntValue("listenPort", 10911));

        storeConfig.setStorePathRootDir(root.toString());
        storeConfig.setMappedFileSizeCommitLog(s.getIntValue("mappedFileSizeCommitLog", 65536));
        storeConfig.setMappedFileSizeConsumeQueue(s.getIntValue("mappedFileSizeConsumeQueue", 200));
        storeConfig.setMappedFileSizeConsumeQueueExt(s.getIntValue("mappedFileSizeConsumeQueueExt", 1024));
        storeConfig.setMessageIndexEnable(bool(s, "messageIndexEnable", false));
        storeConfig.setEnableCompaction(bool(s, "enableCompaction", false));
        storeConfig.setEnableMultiDispatch(bool(s, "enableMultiDispatch", false));
        storeConfig.setEnableLmq(bool(s, "enableLmq", false));
        storeConfig.setEnableConsumeQueueExt(bool(b, "enableConsumeQueueExt", true));
        storeConfig.setHaListenPort(0);

        controller = new BrokerController(brokerConfig, serverConfig, new NettyClientConfig(), storeConfig);
        store = new DefaultMessageStore(storeConfig, controller.getBrokerStatsManager(), null, brokerConfig,
            controller.getTopicConfigManager().getTopicConfigTable());
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
        effectiveStore.put("mappedFileSizeCommitLog", storeConfig.getMappedFileSizeCommitLog());
        effectiveStore.put("mappedFileSizeConsumeQueue", storeConfig.getMappedFileSizeConsumeQueue());
        effectiveStore.put("mappedFileSizeConsumeQueueExt", storeConfig.getMappedFileSizeConsumeQueueExt());
        effectiveStore.put("messageIndexEnable", storeConfig.isMessageIndexEnable());
        effectiveStore.put("enableCompaction", storeConfig.isEnableCompaction());
        effectiveStore.put("enableMultiDispatch", storeConfig.isEnableMultiDispatch());
        effectiveStore.put("enableLmq", storeConfig.isEnableLmq());
        effectiveStore.put("haListenPort", storeConfig.getHaListenPort());
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

    static String str(JSONObject o, String k, String d) {
        String v = o.getString(k);
        return v == null ? d : v;
    }

    static boolean bool(JSONObject o, String k, boolean d) {
        Boolean v = o.getBoolean(k);
        return v == null ? d : v;
    }
}
