package rmqref;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import java.io.IOException;
import java.io.PrintWriter;
import java.lang.reflect.Field;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Random;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.broker.client.ConsumerGroupInfo;
import org.apache.rocketmq.client.consumer.AllocateMessageQueueStrategy;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragelyByCircle;
import org.apache.rocketmq.client.consumer.store.OffsetStore;
import org.apache.rocketmq.client.consumer.store.ReadOffsetType;
import org.apache.rocketmq.client.impl.consumer.AssignedMessageQueue;
import org.apache.rocketmq.client.impl.consumer.DefaultLitePullConsumerImpl;
import org.apache.rocketmq.client.impl.consumer.ProcessQueue;
import org.apache.rocketmq.client.impl.consumer.RebalanceImpl;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.namesrv.NamesrvConfig;
import org.apache.rocketmq.namesrv.NamesrvController;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.store.config.MessageStoreConfig;

/**
 * `group` mode: a real name server, real brokers (BrokerController.initialize() and start(), remoting and all) and
 * real consumer members of one or more consumer groups, in one JVM: each member a DefaultMQPushConsumer (posting its
 * subscription with its pulls or not) or a DefaultLitePullConsumer polled by a thread of its own. What each member
 * really received, the allocation its own rebalance made and the SubscriptionData each broker kept for its group are
 * the output (OUTDIR/group.json; see PROTOCOL.md, group).
 *
 * Classes whose package differs between release lines (SubscriptionData, TopicRouteData, QueueData) are never named
 * here: their values are held in {@code var}s, so this file compiles against 4.9.7 and 5.x alike.
 */
final class GroupMode {
    /** Every wait is bounded; a run that does not settle fails (exit 1) with what it was waiting for. */
    private static final long ROUTE_TIMEOUT_MS = 60_000;
    private static final long STABLE_TIMEOUT_MS = 90_000;
    private static final long STABLE_WINDOW_MS = 3_000;
    private static final long STEP_WINDOW_MS = 1_000;
    private static final long DRAIN_TIMEOUT_MS = 120_000;
    private static final long DRAIN_QUIET_MS = 2_000;
    private static final long OFFSET_TIMEOUT_MS = 30_000;
    private static final long POLL_MS = 100;

    /** The client knobs (PROTOCOL.md): short enough for a quick run, the same on every member. */
    private static final int HEARTBEAT_BROKER_INTERVAL_MS = 1000;
    private static final int POLL_NAME_SERVER_INTERVAL_MS = 1000;
    private static final String REBALANCE_WAIT_INTERVAL_MS = "1000";
    private static final long PULL_DELAY_WHEN_EXCEPTION_MS = 1000;
    /** A lite pull member: its poll thread's poll(timeout), and the shortest auto-commit interval the client takes. */
    private static final long LITE_POLL_TIMEOUT_MS = 100;
    private static final long LITE_AUTO_COMMIT_INTERVAL_MS = 1000;
    private static final long LITE_POLLER_JOIN_MS = 10_000;

    /** The member kinds (PROTOCOL.md, group: "consumer"). */
    private static final String PUSH = "push";
    private static final String PUSH_POSTED = "push_posted";
    private static final String LITE_PULL = "lite_pull";
    private static final Set<String> KINDS = Set.of(PUSH, PUSH_POSTED, LITE_PULL);
    /**
     * What ClientConfig.buildMQClientId appends when enableStreamRequestType is set, as every DefaultLitePullConsumer
     * constructor sets it: a lite pull member's client id is clientIP@instanceName@STREAM.
     */
    private static final String STREAM_SUFFIX = "@STREAM";

    /**
     * The keys of StoreMode's "broker" and "store" objects that broker_config may carry (cluster, names, address and
     * ports are the mode's), plus the group mode's own longPollingEnable.
     */
    private static final Set<String> CONFIG_KEYS = Set.of("longPollingEnable",
        "enableConsumeQueueExt", "enableCalcFilterBitMap", "expectConsumerNumUseFilter", "maxErrorRateOfBloomFilter",
        "enablePropertyFilter", "filterSupportRetry", "configManagerVersion",
        "mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "mappedFileSizeConsumeQueueExt", "messageIndexEnable",
        "enableCompaction", "enableMultiDispatch", "enableLmq", "storeType", "rocksdbCQDoubleWriteEnable");

    private static final class Broker {
        final String name;
        final Path root;
        int port;
        BrokerController controller;
        BrokerConfig brokerConfig;
        MessageStoreConfig storeConfig;

        Broker(String name, Path root) {
            this.name = name;
            this.root = root;
        }
    }

    /** The broker's settings a replay of its store needs, as broker.conf keys (their names in the config classes). */
    private static JSONObject brokerConf(Broker b) {
        BrokerConfig bc = b.brokerConfig;
        MessageStoreConfig sc = b.storeConfig;
        JSONObject c = new JSONObject();
        c.put("brokerClusterName", bc.getBrokerClusterName());
        c.put("brokerName", bc.getBrokerName());
        c.put("brokerId", bc.getBrokerId());
        c.put("enablePropertyFilter", bc.isEnablePropertyFilter());
        c.put("enableCalcFilterBitMap", bc.isEnableCalcFilterBitMap());
        c.put("expectConsumerNumUseFilter", bc.getExpectConsumerNumUseFilter());
        c.put("maxErrorRateOfBloomFilter", bc.getMaxErrorRateOfBloomFilter());
        c.put("filterSupportRetry", bc.isFilterSupportRetry());
        c.put("enableConsumeQueueExt", sc.isEnableConsumeQueueExt());
        c.put("mappedFileSizeCommitLog", sc.getMappedFileSizeCommitLog());
        c.put("mappedFileSizeConsumeQueue", sc.getMappedFileSizeConsumeQueue());
        c.put("mappedFileSizeConsumeQueueExt", sc.getMappedFileSizeConsumeQueueExt());
        return c;
    }

    private static final class Sub {
        final String topic;
        final String type;
        final String expression;

        Sub(String topic, String type, String expression) {
            this.topic = topic;
            this.type = type;
            this.expression = expression;
        }
    }

    private static final class Member {
        final Group group;
        final String clientId;
        final String clientIp;
        final String instanceName;
        /** "push", "push_posted" or "lite_pull". */
        final String kind;
        final List<Sub> subs = new ArrayList<>();
        final ConcurrentLinkedQueue<JSONObject> received = new ConcurrentLinkedQueue<>();
        final AtomicLong count = new AtomicLong();
        /** A push or push_posted member's consumer. */
        DefaultMQPushConsumer push;
        /** A lite_pull member's consumer, its impl (no public getter: read by reflection) and its poll thread. */
        DefaultLitePullConsumer lite;
        DefaultLitePullConsumerImpl liteImpl;
        Thread poller;
        volatile boolean stopPolling;
        volatile Throwable pollFailure;

        Member(Group group, String clientId, String kind) {
            this.group = group;
            this.clientId = clientId;
            this.kind = kind;
            if (!KINDS.contains(kind)) {
                throw new IllegalArgumentException("consumer must be one of " + new TreeSet<>(KINDS) + ": " + kind);
            }
            if (clientId == null) {
                throw new IllegalArgumentException("client_id is required");
            }
            String base = clientId;
            if (LITE_PULL.equals(kind)) {
                if (!clientId.endsWith(STREAM_SUFFIX)) {
                    throw new IllegalArgumentException("a lite_pull member's client_id must be <clientIP>@<instanceName>"
                        + STREAM_SUFFIX + " (DefaultLitePullConsumer sets enableStreamRequestType): " + clientId);
                }
                base = clientId.substring(0, clientId.length() - STREAM_SUFFIX.length());
            } else if (clientId.endsWith(STREAM_SUFFIX)) {
                throw new IllegalArgumentException("only a lite_pull member's client_id ends with " + STREAM_SUFFIX + ": " + clientId);
            }
            int at = base.indexOf('@');
            if (at <= 0 || at == base.length() - 1) {
                throw new IllegalArgumentException("client_id must be <clientIP>@<instanceName>: " + clientId);
            }
            this.clientIp = base.substring(0, at);
            this.instanceName = base.substring(at + 1);
        }

        Set<String> topics() {
            Set<String> t = new TreeSet<>();
            for (Sub s : subs) {
                t.add(s.topic);
            }
            return t;
        }

        boolean isLite() {
            return LITE_PULL.equals(kind);
        }

        /** Whether its pulls carry its own subscription (the broker filters them with it, not with the kept one). */
        boolean postsSubscription() {
            return !PUSH.equals(kind);
        }

        RebalanceImpl rebalance() {
            return isLite() ? (RebalanceImpl) field(liteImpl, "rebalanceImpl") : push.getDefaultMQPushConsumerImpl().getRebalanceImpl();
        }

        OffsetStore offsetStore() {
            return isLite() ? liteImpl.getOffsetStore() : push.getDefaultMQPushConsumerImpl().getOffsetStore();
        }

        MQClientInstance clientInstance() {
            return isLite() ? (MQClientInstance) field(liteImpl, "mQClientFactory") : push.getDefaultMQPushConsumerImpl().getmQClientFactory();
        }

        /** The consumer's own persistConsumerOffset (MQConsumerInner): its offset store's persistAll of its queues. */
        void persistOffsets() {
            if (isLite()) {
                liteImpl.persistConsumerOffset();
            } else {
                push.getDefaultMQPushConsumerImpl().persistConsumerOffset();
            }
        }
    }

    private static Object field(Object o, String name) {
        for (Class<?> c = o.getClass(); c != null; c = c.getSuperclass()) {
            try {
                Field f = c.getDeclaredField(name);
                f.setAccessible(true);
                return f.get(o);
            } catch (NoSuchFieldException e) {
                // the superclass may declare it
            } catch (IllegalAccessException e) {
                throw new IllegalStateException("cannot read " + name + " of " + o.getClass().getName(), e);
            }
        }
        throw new IllegalStateException(o.getClass().getName() + " has no field " + name);
    }

    private static final class Group {
        final String name;
        final String allocate;
        final List<Member> members = new ArrayList<>();

        Group(String name, String allocate) {
            this.name = name;
            this.allocate = allocate;
            strategy();
        }

        /** Topics some member subscribes. */
        Set<String> topics() {
            Set<String> t = new TreeSet<>();
            for (Member m : members) {
                t.addAll(m.topics());
            }
            return t;
        }

        /** Topics every member subscribes: the only ones whose subscription a broker keeps for the group throughout. */
        boolean everyMemberSubscribes(String topic) {
            for (Member m : members) {
                if (!m.topics().contains(topic)) {
                    return false;
                }
            }
            return true;
        }

        AllocateMessageQueueStrategy strategy() {
            switch (allocate) {
                case "AVG":
                    return new AllocateMessageQueueAveragely();
                case "AVG_BY_CIRCLE":
                    return new AllocateMessageQueueAveragelyByCircle();
                default:
                    throw new IllegalArgumentException("allocate must be AVG or AVG_BY_CIRCLE: " + allocate);
            }
        }
    }

    private final JSONObject spec;
    private final Path outDir;
    private final JSONObject brokerSettings;
    private final Map<String, Broker> brokers = new LinkedHashMap<>();
    private final Map<String, Integer> topics = new LinkedHashMap<>();
    private final List<Group> groups = new ArrayList<>();
    private final List<Member> started = new ArrayList<>();
    private final Set<Integer> takenPorts = new HashSet<>();
    /** group → every kept row (JSON text) the brokers' ConsumerManager events showed while `watching`. */
    private final Map<String, Set<String>> keptSeen = new java.util.concurrent.ConcurrentHashMap<>();
    private volatile boolean watching;
    private final long t0 = System.currentTimeMillis();
    private PrintWriter log;
    private Path namesrvHome;
    private NamesrvController namesrv;
    private String namesrvAddr;
    private DefaultMQProducer producer;

    private GroupMode(JSONObject spec, Path outDir) {
        this.spec = spec;
        this.outDir = outDir;
        this.brokerSettings = spec.getJSONObject("broker_config") == null ? new JSONObject()
            : spec.getJSONObject("broker_config");
        for (String k : brokerSettings.keySet()) {
            if (!CONFIG_KEYS.contains(k)) {
                throw new IllegalArgumentException("broker_config key " + k + " is not one of " + new TreeSet<>(CONFIG_KEYS)
                    + " (cluster, broker name, address and ports are the mode's)");
            }
        }
        JSONArray bs = spec.getJSONArray("brokers");
        List<String> names = new ArrayList<>();
        if (bs == null || bs.isEmpty()) {
            names.add("broker-a");
        } else {
            for (int i = 0; i < bs.size(); i++) {
                names.add(bs.getString(i));
            }
        }
        for (String n : names) {
            if (n == null || !n.matches("[A-Za-z0-9._-]+") || brokers.containsKey(n)) {
                throw new IllegalArgumentException("broker names must be distinct letters, digits, . _ -: " + n);
            }
            brokers.put(n, new Broker(n, outDir.resolve("brokers").resolve(n).resolve("store")));
        }
        JSONArray ts = required(spec, "topics");
        for (int i = 0; i < ts.size(); i++) {
            JSONObject t = ts.getJSONObject(i);
            String name = t.getString("name");
            int queues = t.getIntValue("queues", 4);
            if (name == null || name.startsWith(MixAll.RETRY_GROUP_TOPIC_PREFIX) || queues < 1 || topics.containsKey(name)) {
                throw new IllegalArgumentException("bad or repeated topic: " + t);
            }
            topics.put(name, queues);
        }
        JSONArray gs = required(spec, "groups");
        Set<String> groupNames = new HashSet<>();
        for (int i = 0; i < gs.size(); i++) {
            JSONObject g = gs.getJSONObject(i);
            Group group = new Group(g.getString("group"), StoreBroker.str(g, "allocate", "AVG"));
            if (group.name == null || !groupNames.add(group.name)) {
                throw new IllegalArgumentException("groups need distinct names: " + g);
            }
            JSONArray ms = required(g, "members");
            Set<String> ids = new HashSet<>();
            for (int j = 0; j < ms.size(); j++) {
                JSONObject m = ms.getJSONObject(j);
                Member member = new Member(group, m.getString("client_id"), StoreBroker.str(m, "consumer", PUSH));
                if (!ids.add(member.clientId)) {
                    throw new IllegalArgumentException("client_id twice in group " + group.name + ": " + member.clientId);
                }
                JSONArray subs = required(m, "subscriptions");
                for (int k = 0; k < subs.size(); k++) {
                    JSONObject s = subs.getJSONObject(k);
                    String topic = s.getString("topic");
                    String type = StoreBroker.str(s, "type", "TAG");
                    if (!topics.containsKey(topic)) {
                        throw new IllegalArgumentException("subscription to a topic not in topics: " + s);
                    }
                    if (!"TAG".equals(type) && !"SQL92".equals(type)) {
                        throw new IllegalArgumentException("subscription type must be TAG or SQL92: " + s);
                    }
                    String expr = s.getString("expression");
                    if (expr == null && "SQL92".equals(type)) {
                        throw new IllegalArgumentException("an SQL92 subscription needs an expression: " + s);
                    }
                    member.subs.add(new Sub(topic, type, expr == null ? "*" : expr));
                }
                group.members.add(member);
            }
            groups.add(group);
        }
    }

    private static JSONArray required(JSONObject o, String key) {
        JSONArray a = o.getJSONArray(key);
        if (a == null || a.isEmpty()) {
            throw new IllegalArgumentException("\"" + key + "\" is required (a non-empty list)");
        }
        return a;
    }

    static int run(String in, String out) throws Exception {
        // What BrokerStartup, NamesrvStartup and MQClientAPIImpl set before their first request: the version every
        // RemotingCommand carries (read once). Without it a broker's registration says version 0 and the name
        // server decodes its body as a pre-3.0.11 one: no topic reaches the routes.
        System.setProperty(RemotingCommand.REMOTING_VERSION_KEY, Integer.toString(MQVersion.CURRENT_VERSION));
        // Also read once, when the client classes initialize: 4.9.7's ClientLogger would otherwise write its own file
        // under user.home and switch every later logger (the broker's too) to its inner logging; the rebalance
        // service's periodic wait (20 s by default) is the slowest part of a group settling.
        System.setProperty("rocketmq.client.logUseSlf4j", "true");
        System.setProperty("rocketmq.client.rebalance.waitInterval", REBALANCE_WAIT_INTERVAL_MS);
        JSONObject spec = JSON.parseObject(Files.readString(Paths.get(in), StandardCharsets.UTF_8));
        new GroupMode(spec, Paths.get(out)).execute();
        return 0;
    }

    private void execute() throws Exception {
        Files.createDirectories(outDir.resolve("logs"));
        log = new PrintWriter(Files.newBufferedWriter(outDir.resolve("logs").resolve("group.log"), StandardCharsets.UTF_8), true);
        JSONObject result;
        Throwable failure = null;
        try {
            result = drive();
        } catch (Throwable t) {
            failure = t;
            result = null;
            log("FAILED: " + t);
        } finally {
            shutdown();
        }
        if (failure != null) {
            log.close();
            if (failure instanceof Exception) {
                throw (Exception) failure;
            }
            throw new RuntimeException(failure);
        }
        StoreMode.writeJson(outDir.resolve("group.json"), result);
        log("done");
        log.close();
    }

    private synchronized void log(String line) {
        log.println(String.format("%7.3f %s", (System.currentTimeMillis() - t0) / 1000.0, line));
    }

    private JSONObject drive() throws Exception {
        startNamesrv();
        startBrokers();
        waitRoutes();
        for (Group g : groups) {
            for (Member m : g.members) {
                startMember(m);
                started.add(m);
                waitStable(STEP_WINDOW_MS);
            }
        }
        waitStable(STABLE_WINDOW_MS);
        Map<String, JSONArray> keptBefore = new LinkedHashMap<>();
        for (Group g : groups) {
            keptSeen.put(g.name, java.util.concurrent.ConcurrentHashMap.newKeySet());
        }
        watching = true;
        for (Group g : groups) {
            keptBefore.put(g.name, kept(g, null));
            for (Object row : keptBefore.get(g.name)) {
                keptSeen.get(g.name).add(rowText(row));
            }
        }
        log("kept before: " + keptBefore);
        JSONArray sent = send();
        waitDrained();
        persistOffsets();

        JSONObject out = new JSONObject();
        JSONObject bs = new JSONObject();
        for (Broker b : brokers.values()) {
            JSONObject o = new JSONObject();
            o.put("store", outDir.relativize(b.root).toString());
            o.put("config", brokerConf(b));
            bs.put(b.name, o);
        }
        out.put("brokers", bs);
        out.put("messages", sent);
        JSONArray gs = new JSONArray();
        for (Group g : groups) {
            JSONObject go = new JSONObject();
            go.put("group", g.name);
            go.put("allocate", g.allocate);
            JSONObject ids = new JSONObject();
            for (Broker b : brokers.values()) {
                ids.put(b.name, consumerIds(b, g.name));
            }
            go.put("consumer_ids", ids);
            JSONArray after = kept(g, null);
            for (Object row : after) {
                keptSeen.get(g.name).add(rowText(row));
            }
            JSONArray seen = seenRows(g);
            go.put("kept_before", keptBefore.get(g.name));
            go.put("kept_after", after);
            go.put("kept_seen", seen);
            go.put("stable", keptBefore.get(g.name).equals(after) && seen.size() == after.size());
            JSONArray members = new JSONArray();
            for (Member m : g.members) {
                members.add(memberJson(m));
            }
            go.put("members", members);
            go.put("unassigned", unassigned(g));
            gs.add(go);
        }
        watching = false;
        out.put("groups", gs);
        log("kept after: " + gs.stream().map(o -> ((JSONObject) o).get("kept_after")).toList());
        return out;
    }

    // ---- name server and brokers -------------------------------------------------------------------------------

    private void startNamesrv() throws Exception {
        namesrvHome = Files.createTempDirectory("rmqref-namesrv");
        NamesrvConfig nsc = new NamesrvConfig();
        nsc.setKvConfigPath(namesrvHome.resolve("kvConfig.json").toString());
        nsc.setConfigStorePath(namesrvHome.resolve("namesrv.properties").toString());
        NettyServerConfig nc = new NettyServerConfig();
        int port = freePort(false);
        nc.setListenPort(port);
        StoreBroker.loopback(nc);
        namesrv = new NamesrvController(nsc, nc);
        if (!namesrv.initialize()) {
            throw new IllegalStateException("NamesrvController.initialize() returned false");
        }
        namesrv.start();
        namesrvAddr = "127.0.0.1:" + port;
        log("name server at " + namesrvAddr);
    }

    private void startBrokers() throws Exception {
        for (Broker b : brokers.values()) {
            Files.createDirectories(b.root);
            BrokerConfig bc = new BrokerConfig();
            MessageStoreConfig sc = new MessageStoreConfig();
            NettyServerConfig nc = new NettyServerConfig();
            StoreBroker.configure(brokerSettings, brokerSettings, b.root, bc, sc, nc);
            StoreBroker.configureLive(bc, sc, nc);
            b.brokerConfig = bc;
            b.storeConfig = sc;
            bc.setBrokerClusterName("DefaultCluster");
            bc.setBrokerName(b.name);
            bc.setBrokerId(MixAll.MASTER_ID);
            bc.setBrokerIP1("127.0.0.1");
            bc.setBrokerIP2("127.0.0.1");
            bc.setNamesrvAddr(namesrvAddr);
            bc.setAutoCreateTopicEnable(false);
            // Short polling (a pull that finds nothing is held shortPollingTimeMills, 1 s, not the client's 15 s): a
            // member whose last pulled messages its own tag filter dropped only moves its offset to the queue's end
            // when a pull comes back empty (correctTagsOffset), and the run waits for that.
            bc.setLongPollingEnable(StoreBroker.bool(brokerSettings, "longPollingEnable", false));
            // The broker's remoting port P and its "fast" (VIP) server at P - 2 (BrokerController.initialize).
            b.port = freePort(true);
            nc.setListenPort(b.port);
            b.controller = new BrokerController(bc, nc, new NettyClientConfig(), sc);
            if (!b.controller.initialize()) {
                throw new IllegalStateException("BrokerController.initialize() returned false for " + b.name);
            }
            for (Map.Entry<String, Integer> t : topics.entrySet()) {
                TopicConfig tc = new TopicConfig(t.getKey(), t.getValue(), t.getValue(), 6);
                b.controller.getTopicConfigManager().updateTopicConfig(tc);
            }
            b.controller.start();
            StoreBroker.watchConsumerGroups(b.controller, group -> keptEvent(b, group));
            log("broker " + b.name + " at 127.0.0.1:" + b.port + ", store " + b.root);
        }
    }

    /**
     * Every topic's route on the name server names every broker, each with the topic's read and write queues. A 5.x
     * broker registers only with the name servers its remoting client has found available (a scan every few
     * seconds), so the registration start() makes reaches none and the periodic one comes 10 s later: each broker
     * registers again (registerBrokerAll, forced) every 500 ms until the routes are there.
     */
    private void waitRoutes() throws Exception {
        long deadline = System.currentTimeMillis() + ROUTE_TIMEOUT_MS;
        long nextRegister = 0;
        String problem;
        while ((problem = routeProblem()) != null) {
            long now = System.currentTimeMillis();
            if (now > deadline) {
                throw new IllegalStateException("routes did not reach the name server: " + problem);
            }
            if (now >= nextRegister) {
                for (Broker b : brokers.values()) {
                    b.controller.registerBrokerAll(true, false, true);
                }
                nextRegister = now + 500;
            }
            Thread.sleep(POLL_MS);
        }
        log("routes on the name server");
    }

    private String routeProblem() {
        for (Map.Entry<String, Integer> t : topics.entrySet()) {
            var route = namesrv.getRouteInfoManager().pickupTopicRouteData(t.getKey());
            if (route == null) {
                return "no route for " + t.getKey();
            }
            Set<String> seen = new HashSet<>();
            for (var qd : route.getQueueDatas()) {
                if (qd.getReadQueueNums() == t.getValue() && qd.getWriteQueueNums() == t.getValue() && qd.getPerm() == 6) {
                    seen.add(qd.getBrokerName());
                }
            }
            if (!seen.equals(brokers.keySet())) {
                return "route of " + t.getKey() + " has queue data for " + seen;
            }
        }
        return null;
    }

    /**
     * A port nothing listens on, outside the kernel's ephemeral range (32768-60999 here) so no client socket takes it
     * before the server binds it; with minus2, P - 2 is free too (the broker's fast remoting server).
     */
    private int freePort(boolean minus2) {
        Random r = new Random();
        for (int attempt = 0; attempt < 1000; attempt++) {
            int p = 20000 + r.nextInt(12000);
            if (takenPorts.contains(p) || (minus2 && takenPorts.contains(p - 2)) || !bindable(p) || (minus2 && !bindable(p - 2))) {
                continue;
            }
            takenPorts.add(p);
            takenPorts.add(p - 2);
            return p;
        }
        throw new IllegalStateException("no free port found");
    }

    private static boolean bindable(int port) {
        try (ServerSocket s = new ServerSocket()) {
            s.setReuseAddress(false);
            s.bind(new InetSocketAddress(port));
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    // ---- consumers --------------------------------------------------------------------------------------------

    private void startMember(Member m) throws Exception {
        if (m.isLite()) {
            startLitePull(m);
        } else {
            startPush(m);
        }
        String actual = m.clientInstance().getClientId();
        if (!m.clientId.equals(actual)) {
            throw new IllegalStateException("member " + m.clientId + " got client id " + actual);
        }
        log("started " + m.group.name + " " + m.clientId + " (" + m.kind + ")");
    }

    private void startPush(Member m) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(m.group.name);
        c.setNamesrvAddr(namesrvAddr);
        c.setClientIP(m.clientIp);
        c.setInstanceName(m.instanceName);
        c.setVipChannelEnabled(false);
        if (!"CLUSTERING".equals(c.getMessageModel().name())) {
            // (the enum's package differs between release lines: the default is checked, not set)
            throw new IllegalStateException("a push consumer's default message model is " + c.getMessageModel());
        }
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setAllocateMessageQueueStrategy(m.group.strategy());
        // push_posted: each pull carries the member's own expression (PullSysFlag's subscription bit), and the broker
        // filters it with that instead of the group's kept subscription.
        c.setPostSubscriptionWhenPull(PUSH_POSTED.equals(m.kind));
        c.setHeartbeatBrokerInterval(HEARTBEAT_BROKER_INTERVAL_MS);
        c.setPollNameServerInterval(POLL_NAME_SERVER_INTERVAL_MS);
        c.setPullTimeDelayMillsWhenException(PULL_DELAY_WHEN_EXCEPTION_MS);
        c.setConsumeThreadMin(2);
        c.setConsumeThreadMax(2);
        for (Sub s : m.subs) {
            if ("SQL92".equals(s.type)) {
                c.subscribe(s.topic, MessageSelector.bySql(s.expression));
            } else {
                c.subscribe(s.topic, s.expression);
            }
        }
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt msg : msgs) {
                record(m, ctx.getMessageQueue().getBrokerName(), msg);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        m.push = c;
        c.start();
    }

    /**
     * A DefaultLitePullConsumer that subscribes (never assigns): CLUSTERING, the group's strategy, first offset,
     * auto-commit every second (the client's minimum), and a thread of its own polling it until shutdown, recording
     * what each poll returns as the push listener records a delivery.
     */
    private void startLitePull(Member m) throws Exception {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(m.group.name);
        c.setNamesrvAddr(namesrvAddr);
        c.setClientIP(m.clientIp);
        c.setInstanceName(m.instanceName);
        c.setVipChannelEnabled(false);
        if (!"CLUSTERING".equals(c.getMessageModel().name())) {
            throw new IllegalStateException("a lite pull consumer's default message model is " + c.getMessageModel());
        }
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setAllocateMessageQueueStrategy(m.group.strategy());
        c.setAutoCommit(true);
        c.setAutoCommitIntervalMillis(LITE_AUTO_COMMIT_INTERVAL_MS);
        c.setPollTimeoutMillis(LITE_POLL_TIMEOUT_MS);
        c.setHeartbeatBrokerInterval(HEARTBEAT_BROKER_INTERVAL_MS);
        c.setPollNameServerInterval(POLL_NAME_SERVER_INTERVAL_MS);
        // (its impl reads pullTimeDelayMillsWhenException once, in its constructor: the ClientConfig default, 1000 ms,
        // which is PULL_DELAY_WHEN_EXCEPTION_MS already)
        for (Sub s : m.subs) {
            if ("SQL92".equals(s.type)) {
                c.subscribe(s.topic, MessageSelector.bySql(s.expression));
            } else {
                c.subscribe(s.topic, s.expression);
            }
        }
        m.lite = c;
        m.liteImpl = (DefaultLitePullConsumerImpl) field(c, "defaultLitePullConsumerImpl");
        c.start();
        Thread t = new Thread(() -> {
            while (!m.stopPolling) {
                try {
                    for (MessageExt msg : c.poll(LITE_POLL_TIMEOUT_MS)) {
                        // PullAPIWrapper.processPullResult set the pulled queue's broker name on each message
                        record(m, msg.getBrokerName(), msg);
                    }
                } catch (Throwable e) {
                    if (!m.stopPolling) {
                        m.pollFailure = e;
                        log("poll of " + m.group.name + " " + m.clientId + " failed: " + e);
                    }
                    return;
                }
            }
        }, "rmqref-poll-" + m.group.name + "-" + m.instanceName);
        t.setDaemon(true);
        m.poller = t;
        t.start();
    }

    /** One row per message a member's listener got or its poll returned (thread-safe). */
    private static void record(Member m, String brokerName, MessageExt msg) {
        JSONObject row = new JSONObject();
        row.put("broker", brokerName);
        row.put("topic", msg.getTopic());
        row.put("queue", msg.getQueueId());
        row.put("queue_offset", msg.getQueueOffset());
        row.put("commit_log_offset", msg.getCommitLogOffset());
        row.put("tags", msg.getTags());
        row.put("msg_id", msg instanceof MessageClientExt ? ((MessageClientExt) msg).getOffsetMsgId() : msg.getMsgId());
        m.received.add(row);
        m.count.incrementAndGet();
    }

    /**
     * The member's allocation of one topic (or of every non-retry topic). A push member: its RebalanceImpl's live
     * process queues. A lite pull member: the queues its consumer pulls (AssignedMessageQueue, which its
     * MessageQueueListener updates right after the rebalance changed the process queue table).
     */
    private static List<MessageQueue> allocation(Member m, String topic) {
        List<MessageQueue> out = new ArrayList<>();
        for (MessageQueue mq : m.isLite() ? m.liteImpl.getAssignedMessageQueue().getAssignedMessageQueues() : liveQueues(m)) {
            if (mq.getTopic().startsWith(MixAll.RETRY_GROUP_TOPIC_PREFIX)) {
                continue;
            }
            if (topic == null || topic.equals(mq.getTopic())) {
                out.add(mq);
            }
        }
        out.sort(QUEUE_ORDER);
        return out;
    }

    /** The member's RebalanceImpl's process queues not dropped. */
    private static Set<MessageQueue> liveQueues(Member m) {
        Set<MessageQueue> out = new HashSet<>();
        Map<MessageQueue, ProcessQueue> table = m.rebalance().getProcessQueueTable();
        for (Map.Entry<MessageQueue, ProcessQueue> e : table.entrySet()) {
            if (!e.getValue().isDropped()) {
                out.add(e.getKey());
            }
        }
        return out;
    }

    private static final Comparator<MessageQueue> QUEUE_ORDER = Comparator.comparing(MessageQueue::getBrokerName)
        .thenComparing(MessageQueue::getTopic).thenComparingInt(MessageQueue::getQueueId);

    /** Every queue of a topic: each broker's queues (all brokers carry every topic with the same count). */
    private List<MessageQueue> allQueues(String topic) {
        List<MessageQueue> out = new ArrayList<>();
        for (String b : brokers.keySet()) {
            for (int q = 0; q < topics.get(topic); q++) {
                out.add(new MessageQueue(topic, b, q));
            }
        }
        return out;
    }

    private static List<String> consumerIds(Broker b, String group) {
        ConsumerGroupInfo info = b.controller.getConsumerManager().getConsumerGroupInfo(group);
        List<String> ids = info == null ? new ArrayList<>() : new ArrayList<>(info.getAllClientId());
        Collections.sort(ids);
        return ids;
    }

    /**
     * Why the started members are not (yet) settled, or null: every broker lists exactly the group's started
     * members, each member's allocation of each topic it subscribes is what its group's strategy gives it over the
     * topic's queues and those members (the client's own rebalance computation, RebalanceImpl.rebalanceByTopic, done
     * again here with the real strategy class), and a topic every member subscribes is covered by their allocations.
     */
    private String settleProblem() {
        for (Group g : groups) {
            List<String> ids = new ArrayList<>();
            for (Member m : g.members) {
                if (started.contains(m)) {
                    ids.add(m.clientId);
                }
            }
            if (ids.isEmpty()) {
                continue;
            }
            Collections.sort(ids);
            for (Broker b : brokers.values()) {
                List<String> listed = consumerIds(b, g.name);
                if (!listed.equals(ids)) {
                    return b.name + " lists " + listed + " for " + g.name + ", expected " + ids;
                }
            }
            Map<String, Set<MessageQueue>> covered = new LinkedHashMap<>();
            Map<String, Integer> subscribers = new LinkedHashMap<>();
            for (Member m : g.members) {
                if (!started.contains(m)) {
                    continue;
                }
                for (String topic : m.topics()) {
                    List<MessageQueue> mqAll = allQueues(topic);
                    Collections.sort(mqAll);
                    List<MessageQueue> expected = new ArrayList<>(g.strategy().allocate(g.name, m.clientId, mqAll, ids));
                    expected.sort(QUEUE_ORDER);
                    List<MessageQueue> actual = allocation(m, topic);
                    if (!actual.equals(expected)) {
                        return g.name + " " + m.clientId + " holds " + actual + " of " + topic + ", its strategy gives " + expected;
                    }
                    if (m.isLite() && !new HashSet<>(actual).equals(liveQueues(m).stream()
                            .filter(q -> q.getTopic().equals(topic)).collect(java.util.stream.Collectors.toSet()))) {
                        return g.name + " " + m.clientId + " pulls " + actual + " of " + topic + ", its rebalance holds "
                            + liveQueues(m);
                    }
                    covered.computeIfAbsent(topic, k -> new HashSet<>()).addAll(actual);
                    subscribers.merge(topic, 1, Integer::sum);
                }
            }
            for (Map.Entry<String, Set<MessageQueue>> e : covered.entrySet()) {
                if (subscribers.get(e.getKey()) == ids.size() && e.getValue().size() != allQueues(e.getKey()).size()) {
                    return g.name + " covers " + e.getValue().size() + " queues of " + e.getKey();
                }
            }
        }
        return null;
    }

    private Map<String, Object> settleSnapshot() {
        Map<String, Object> snap = new LinkedHashMap<>();
        for (Member m : started) {
            snap.put(m.group.name + "/" + m.clientId, allocation(m, null).toString());
        }
        for (Group g : groups) {
            for (Broker b : brokers.values()) {
                snap.put(g.name + "@" + b.name, consumerIds(b, g.name));
            }
        }
        return snap;
    }

    /** Waits until settleProblem() is null and nothing in settleSnapshot() changed for `window` ms. */
    private void waitStable(long window) throws Exception {
        long begin = System.currentTimeMillis();
        long deadline = begin + STABLE_TIMEOUT_MS;
        Map<String, Object> last = null;
        long since = begin;
        String problem;
        while (true) {
            Map<String, Object> snap = settleSnapshot();
            problem = settleProblem();
            long now = System.currentTimeMillis();
            if (!snap.equals(last)) {
                last = snap;
                since = now;
                log("allocation " + snap + (problem == null ? "" : " (" + problem + ")"));
            }
            if (problem == null && now - since >= window) {
                return;
            }
            if (now > deadline) {
                throw new IllegalStateException("consumers not stable after " + STABLE_TIMEOUT_MS / 1000 + " s: "
                    + (problem == null ? "allocation still changing" : problem) + "; last allocation " + last);
            }
            Thread.sleep(POLL_MS);
        }
    }

    /** Queues of a topic some member subscribes that no member subscribing it holds (RocketMQ allocates over ALL members). */
    private JSONArray unassigned(Group g) {
        JSONArray out = new JSONArray();
        for (String topic : g.topics()) {
            Set<MessageQueue> held = new HashSet<>();
            for (Member m : g.members) {
                if (m.topics().contains(topic)) {
                    held.addAll(allocation(m, topic));
                }
            }
            List<MessageQueue> all = allQueues(topic);
            all.sort(QUEUE_ORDER);
            for (MessageQueue mq : all) {
                if (!held.contains(mq)) {
                    out.add(queueJson(mq));
                }
            }
        }
        return out;
    }

    private static JSONObject queueJson(MessageQueue mq) {
        JSONObject o = new JSONObject();
        o.put("broker", mq.getBrokerName());
        o.put("topic", mq.getTopic());
        o.put("queue", mq.getQueueId());
        return o;
    }

    /**
     * What each broker keeps for the group (ConsumerGroupInfo.findSubscriptionData) for every topic a member
     * subscribes or the broker holds, retry topics left out; type, expression and sub_version null when it holds none.
     */
    private JSONArray kept(Group g, Broker only) {
        JSONArray out = new JSONArray();
        for (Broker b : new java.util.TreeMap<>(brokers).values()) {
            if (only != null && only != b) {
                continue;
            }
            ConsumerGroupInfo info = b.controller.getConsumerManager().getConsumerGroupInfo(g.name);
            Set<String> ts = g.topics();
            if (info != null) {
                ts.addAll(info.getSubscriptionTable().keySet());
            }
            for (String topic : ts) {
                if (topic.startsWith(MixAll.RETRY_GROUP_TOPIC_PREFIX)) {
                    continue;
                }
                JSONObject row = new JSONObject();
                row.put("broker", b.name);
                row.put("topic", topic);
                var sd = info == null ? null : info.findSubscriptionData(topic);
                row.put("type", sd == null ? null : sd.getExpressionType());
                row.put("expression", sd == null ? null : sd.getSubString());
                row.put("sub_version", sd == null ? null : sd.getSubVersion());
                out.add(row);
            }
        }
        return out;
    }

    /** A broker's ConsumerManager event for a group (on the broker's thread, right after the change it reports). */
    private void keptEvent(Broker b, String group) {
        if (!watching) {
            return;
        }
        for (Group g : groups) {
            Set<String> seen = keptSeen.get(g.name);
            if (g.name.equals(group) && seen != null) {
                for (Object row : kept(g, b)) {
                    seen.add(rowText(row));
                }
            }
        }
    }

    private static String rowText(Object row) {
        return JSON.toJSONString(row, com.alibaba.fastjson2.JSONWriter.Feature.WriteNulls);
    }

    /** Every distinct kept row seen from kept_before to kept_after, sorted by broker, topic, sub_version (null first). */
    private JSONArray seenRows(Group g) {
        List<JSONObject> rows = new ArrayList<>();
        for (String text : keptSeen.get(g.name)) {
            rows.add(JSON.parseObject(text));
        }
        rows.sort(Comparator.comparing((JSONObject r) -> r.getString("broker")).thenComparing(r -> r.getString("topic"))
            .thenComparing(r -> r.getLong("sub_version"), Comparator.nullsFirst(Comparator.naturalOrder()))
            .thenComparing(r -> String.valueOf(r.getString("type")) + "\0" + r.getString("expression")));
        return new JSONArray(rows);
    }

    private JSONObject memberJson(Member m) throws Exception {
        JSONObject o = new JSONObject();
        o.put("client_id", m.clientId);
        o.put("consumer", m.kind);
        JSONArray subs = new JSONArray();
        var inner = m.rebalance().getSubscriptionInner();
        for (String topic : m.topics()) {
            var sd = inner.get(topic);
            JSONObject s = new JSONObject();
            s.put("topic", topic);
            s.put("type", sd == null ? null : sd.getExpressionType());
            s.put("expression", sd == null ? null : sd.getSubString());
            s.put("sub_version", sd == null ? null : sd.getSubVersion());
            subs.add(s);
        }
        o.put("subscriptions", subs);
        JSONArray alloc = new JSONArray();
        for (MessageQueue mq : allocation(m, null)) {
            alloc.add(queueJson(mq));
        }
        o.put("allocation", alloc);
        JSONArray offsets = new JSONArray();
        for (MessageQueue mq : allocation(m, null)) {
            JSONObject q = queueJson(mq);
            q.put("offset", m.offsetStore().readOffset(mq, ReadOffsetType.READ_FROM_MEMORY));
            q.put("max_offset", broker(mq.getBrokerName()).controller.getMessageStore().getMaxOffsetInQueue(mq.getTopic(), mq.getQueueId()));
            if (m.isLite()) {
                q.put("pull_offset", m.liteImpl.getAssignedMessageQueue().getPullOffset(mq));
            }
            offsets.add(q);
        }
        o.put("offsets", offsets);
        List<JSONObject> rows = new ArrayList<>(m.received);
        rows.sort(Comparator.comparing((JSONObject r) -> r.getString("broker")).thenComparing(r -> r.getString("topic"))
            .thenComparingInt(r -> r.getIntValue("queue")).thenComparingLong(r -> r.getLongValue("queue_offset")));
        o.put("received", new JSONArray(rows));
        return o;
    }

    // ---- producer, drain, offsets -----------------------------------------------------------------------------

    private JSONArray send() throws Exception {
        JSONArray out = new JSONArray();
        JSONArray msgs = spec.getJSONArray("messages");
        if (msgs == null || msgs.isEmpty()) {
            return out;
        }
        producer = new DefaultMQProducer("rmqref_group_producer");
        producer.setNamesrvAddr(namesrvAddr);
        producer.setClientIP("127.0.0.1");
        producer.setInstanceName("rmqref-producer");
        producer.setVipChannelEnabled(false);
        producer.setSendMsgTimeout(15_000);
        producer.start();
        for (int i = 0; i < msgs.size(); i++) {
            JSONObject m = msgs.getJSONObject(i);
            String topic = m.getString("topic");
            String broker = StoreBroker.str(m, "broker", brokers.keySet().iterator().next());
            int queue = m.getIntValue("queue", 0);
            if (!topics.containsKey(topic) || !brokers.containsKey(broker) || queue < 0 || queue >= topics.get(topic)) {
                throw new IllegalArgumentException("message " + i + " names no existing queue: " + m);
            }
            String body = StoreBroker.str(m, "body", "m" + i);
            Message msg = new Message(topic, m.getString("tags"), m.getString("keys"), body.getBytes(StandardCharsets.UTF_8));
            JSONObject props = m.getJSONObject("properties");
            if (props != null) {
                for (String k : props.keySet()) {
                    msg.putUserProperty(k, props.getString(k));
                }
            }
            SendResult r = producer.send(msg, new MessageQueue(topic, broker, queue));
            if (r.getSendStatus() != SendStatus.SEND_OK) {
                throw new IllegalStateException("message " + i + " sent with status " + r.getSendStatus());
            }
            JSONObject row = new JSONObject();
            row.put("index", i);
            row.put("broker", broker);
            row.put("topic", topic);
            row.put("queue", queue);
            row.put("queue_offset", r.getQueueOffset());
            row.put("commit_log_offset", MessageDecoder.decodeMessageId(r.getOffsetMsgId()).getOffset());
            row.put("msg_id", r.getOffsetMsgId());
            out.add(row);
        }
        log("sent " + out.size() + " messages");
        return out;
    }

    private Broker broker(String name) {
        return brokers.get(name);
    }

    /**
     * Each member's progress in each queue it holds of a topic every member of its group subscribes (or of every topic
     * it subscribes, for a member whose pulls carry its own subscription), against the broker's max offset. A push
     * member's in-memory offset must equal it (an empty pull moves it there, correctTagsOffset). A lite pull member's
     * pull offset must equal it, every message it pulled must have been polled (the process queue empty) and its
     * offset store must hold what poll() consumed (the auto-commit done): its consumed offset only moves past
     * messages poll() returned, so messages the filters skipped at a queue's tail are never committed.
     * A topic only some members subscribe is not waited for a member pulling with the kept subscription: each
     * heartbeat of a member without it removes it from the group's subscription table
     * (ConsumerGroupInfo.updateSubscription), so pulls of it fail with SUBSCRIPTION_NOT_EXIST whenever one lands
     * after such a heartbeat, possibly every time.
     */
    private String drainProblem() throws Exception {
        for (Member m : started) {
            if (m.pollFailure != null) {
                throw new IllegalStateException(m.group.name + " " + m.clientId + " poll failed: " + m.pollFailure, m.pollFailure);
            }
            for (String topic : m.topics()) {
                if (!m.group.everyMemberSubscribes(topic) && !m.postsSubscription()) {
                    continue;
                }
                for (MessageQueue mq : allocation(m, topic)) {
                    long offset = m.offsetStore().readOffset(mq, ReadOffsetType.READ_FROM_MEMORY);
                    long max = broker(mq.getBrokerName()).controller.getMessageStore().getMaxOffsetInQueue(topic, mq.getQueueId());
                    String at = m.group.name + " " + m.clientId + " (" + m.kind + ") ";
                    if (!m.isLite()) {
                        if (offset != max) {
                            return at + "at " + offset + " of " + max + " in " + mq;
                        }
                        continue;
                    }
                    AssignedMessageQueue assigned = m.liteImpl.getAssignedMessageQueue();
                    long pulled = assigned.getPullOffset(mq);
                    ProcessQueue pq = assigned.getProcessQueue(mq);
                    long cached = pq == null ? 0 : pq.getMsgCount().get();
                    long consumed = assigned.getConsumerOffset(mq);
                    if (pulled != max) {
                        return at + "pulled to " + pulled + " of " + max + " in " + mq;
                    }
                    if (cached != 0) {
                        return at + "has " + cached + " pulled messages not polled yet in " + mq;
                    }
                    if (consumed >= 0 && offset != consumed) {
                        return at + "committed " + offset + ", consumed " + consumed + " in " + mq;
                    }
                }
            }
        }
        return null;
    }

    private void waitDrained() throws Exception {
        long begin = System.currentTimeMillis();
        long deadline = begin + DRAIN_TIMEOUT_MS;
        long lastCount = -1;
        long since = begin;
        String lastProblem = "";
        while (true) {
            long count = 0;
            for (Member m : started) {
                count += m.count.get();
            }
            String problem = drainProblem();
            long now = System.currentTimeMillis();
            if (count != lastCount) {
                lastCount = count;
                since = now;
            }
            if (!Objects.equals(problem, lastProblem)) {
                log("drain: " + count + " received" + (problem == null ? ", every offset at its queue's end" : ", " + problem));
                lastProblem = problem;
            }
            if (problem == null && now - since >= DRAIN_QUIET_MS) {
                return;
            }
            if (now > deadline) {
                throw new IllegalStateException("consumers did not reach the end after " + DRAIN_TIMEOUT_MS / 1000 + " s: "
                    + (problem == null ? "still receiving" : problem));
            }
            Thread.sleep(POLL_MS);
        }
    }

    /**
     * Each member's offsets sent to the brokers (its consumer's persistConsumerOffset: the offset store's persistAll of
     * its queues; a lite pull member's offset store holds what its auto-commit committed), then read back from
     * ConsumerOffsetManager.
     */
    private void persistOffsets() throws Exception {
        for (Member m : started) {
            m.persistOffsets();
        }
        long deadline = System.currentTimeMillis() + OFFSET_TIMEOUT_MS;
        while (true) {
            String problem = null;
            for (Member m : started) {
                for (MessageQueue mq : allocation(m, null)) {
                    long offset = m.offsetStore().readOffset(mq, ReadOffsetType.READ_FROM_MEMORY);
                    long held = broker(mq.getBrokerName()).controller.getConsumerOffsetManager()
                        .queryOffset(m.group.name, mq.getTopic(), mq.getQueueId());
                    if (offset >= 0 && held != offset) {
                        problem = m.group.name + " " + mq + ": broker holds " + held + ", member " + offset;
                    }
                }
            }
            if (problem == null) {
                log("offsets on the brokers");
                return;
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("consumer offsets did not reach the brokers: " + problem);
            }
            Thread.sleep(POLL_MS);
            for (Member m : started) {
                m.persistOffsets();
            }
        }
    }

    // ---- shutdown ---------------------------------------------------------------------------------------------

    private void shutdown() {
        for (Member m : started) {
            quietly("consumer " + m.group.name + " " + m.clientId, () -> {
                if (m.isLite()) {
                    // The poll thread stops first (poll() on a consumer shut down throws); shutdown() persists the
                    // committed offsets and unregisters, as a push consumer's does.
                    m.stopPolling = true;
                    if (m.poller != null) {
                        m.poller.join(LITE_POLLER_JOIN_MS);
                    }
                    m.lite.shutdown();
                } else {
                    m.push.shutdown();
                }
            });
        }
        if (producer != null) {
            quietly("producer", () -> producer.shutdown());
        }
        // Brokers side by side: each BrokerController.shutdown() takes ~10 s (service threads joined one by one,
        // the store's own 3 s sleep).
        List<Thread> stopping = new ArrayList<>();
        for (Broker b : brokers.values()) {
            if (b.controller != null) {
                Thread t = new Thread(() -> quietly("broker " + b.name, () -> {
                    // Every config the broker keeps, written as its own persist() writes it (shutdown writes offsets and
                    // filters, the rest are written when they change).
                    b.controller.getTopicConfigManager().persist();
                    b.controller.getSubscriptionGroupManager().persist();
                    QuickShutdown.run(b.controller.getMessageStore(), b.controller::shutdown);
                }), "rmqref-shutdown-" + b.name);
                t.start();
                stopping.add(t);
            }
        }
        for (Thread t : stopping) {
            try {
                t.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        if (namesrv != null) {
            quietly("name server", () -> namesrv.shutdown());
        }
        if (namesrvHome != null) {
            quietly("name server home", () -> {
                try (var walk = Files.walk(namesrvHome)) {
                    walk.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
                }
            });
        }
        log("shut down");
    }

    private interface Step {
        void run() throws Exception;
    }

    private void quietly(String what, Step step) {
        try {
            step.run();
            log("shut down " + what);
        } catch (Throwable t) {
            log("shutdown of " + what + " failed: " + t);
        }
    }
}
