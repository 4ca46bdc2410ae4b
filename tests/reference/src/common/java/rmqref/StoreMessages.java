package rmqref;

import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.TopicFilterType;
import org.apache.rocketmq.common.compression.CompressionType;
import org.apache.rocketmq.common.compression.CompressorFactory;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;

/**
 * Builds one MessageExtBrokerInner from a scenario MESSAGE event the way the broker's SendMessageProcessor does
 * (the class is the release's own, from StoreBroker.newInner: common.message in 5.x, store in 4.9).
 */
final class StoreMessages {
    private StoreMessages() {
    }

    /** Parses "1.2.3.4:5" or "[::1]:5" (literal IPs only, so no DNS lookup happens). */
    static InetSocketAddress host(String text) throws Exception {
        int colon = text.lastIndexOf(':');
        String ip = text.substring(0, colon);
        if (ip.startsWith("[") && ip.endsWith("]")) {
            ip = ip.substring(1, ip.length() - 1);
        }
        return new InetSocketAddress(InetAddress.getByName(ip), Integer.parseInt(text.substring(colon + 1)));
    }

    /** Formats an address as the protocol writes it: IPv4 "a.b.c.d:port", IPv6 "[full form]:port". */
    static String hostText(java.net.SocketAddress a) {
        InetSocketAddress s = (InetSocketAddress) a;
        String ip = s.getAddress().getHostAddress();
        return (s.getAddress() instanceof java.net.Inet6Address ? "[" + ip + "]" : ip) + ":" + s.getPort();
    }

    static byte[] body(JSONObject m) {
        if (m.containsKey("bodyBase64")) {
            return Base64.getDecoder().decode(m.getString("bodyBase64"));
        }
        String text = m.getString("body");
        return text == null ? new byte[0] : text.getBytes(StandardCharsets.UTF_8);
    }

    /** Compresses with the real client compressor; returns the sysFlag bits the producer would set. */
    static int compress(JSONObject m, byte[][] bodyHolder) throws Exception {
        JSONObject c = m.getJSONObject("compress");
        if (c == null) {
            return 0;
        }
        if (c.containsKey("typeBits")) {
            // A body stored as given under COMPRESSED_FLAG and raw type bits (4-7 name no codec).
            return MessageSysFlag.COMPRESSED_FLAG | (c.getIntValue("typeBits") << 8);
        }
        String type = c.getString("type");
        int level = c.getIntValue("level", 5);
        if (c.getBooleanValue("asIs")) {
            // The codec's flags over a body stored as given: a corrupt or foreign "compressed" body.
            return MessageSysFlag.COMPRESSED_FLAG | CompressionType.of(type).getCompressionFlag();
        }
        if ("legacy-zlib".equals(type)) {
            bodyHolder[0] = CompressorFactory.getCompressor(CompressionType.ZLIB).compress(bodyHolder[0], level);
            return MessageSysFlag.COMPRESSED_FLAG;
        }
        CompressionType ct = CompressionType.of(type);
        bodyHolder[0] = CompressorFactory.getCompressor(ct).compress(bodyHolder[0], level);
        return MessageSysFlag.COMPRESSED_FLAG | ct.getCompressionFlag();
    }

    static String keys(JSONObject m) {
        Object k = m.get("keys");
        if (k instanceof JSONArray) {
            return String.join(MessageConst.KEY_SEPARATOR, ((JSONArray) k).toJavaList(String.class));
        }
        return k == null ? null : k.toString();
    }

    /**
     * The broker's inner message for a scenario message: producer map → properties string → broker HashMap(128),
     * UNIQ_KEY and CLUSTER added, propertiesString set last (store writes it verbatim).
     */
    static MessageExt build(JSONObject m, String id, String topic, StoreBroker b,
        TopicFilterType filterType, boolean prepared) throws Exception {
        var inner = StoreBroker.newInner();
        JSONObject retry = m.getJSONObject("retry");
        inner.setTopic(topic);
        inner.setQueueId(retry != null ? 0 : m.getIntValue("queueId", 0));
        inner.setFlag(m.getIntValue("flag", 0));
        inner.setBornTimestamp(m.containsKey("bornTimestamp") ? m.getLongValue("bornTimestamp") : System.currentTimeMillis());
        inner.setBornHost(host(StoreBroker.str(m, "bornHost", "127.0.0.1:50000")));
        inner.setStoreHost(host(StoreBroker.str(m, "storeHost",
            b.brokerConfig.getBrokerIP1() + ":" + b.serverConfig.getListenPort())));
        inner.setReconsumeTimes(m.getIntValue("reconsumeTimes", retry != null ? 1 : 0));
        byte[][] bodyHolder = {body(m)};
        int sysFlag = compress(m, bodyHolder);
        inner.setBody(bodyHolder[0]);
        if (filterType == TopicFilterType.MULTI_TAG) {
            sysFlag |= MessageSysFlag.MULTI_TAGS_FLAG;
        }
        if (prepared) {
            sysFlag |= MessageSysFlag.TRANSACTION_PREPARED_TYPE;
        }
        inner.setSysFlag(sysFlag);

        Map<String, String> producer = new HashMap<>();
        String tags = m.getString("tags");
        if (tags != null) {
            producer.put(MessageConst.PROPERTY_TAGS, tags);
        }
        String keys = keys(m);
        if (keys != null) {
            producer.put(MessageConst.PROPERTY_KEYS, keys);
        }
        producer.put(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, StoreBroker.str(m, "uniqKey", "UNIQ-" + id));
        int delay = m.getIntValue("delayLevel", 0);
        if (delay > 0 && retry == null) {
            producer.put(MessageConst.PROPERTY_DELAY_TIME_LEVEL, String.valueOf(delay));
        }
        if (prepared) {
            producer.put(MessageConst.PROPERTY_TRANSACTION_PREPARED, "true");
            producer.put(MessageConst.PROPERTY_PRODUCER_GROUP, StoreBroker.str(m, "producerGroup", "PG_" + id));
        }
        JSONObject props = m.getJSONObject("props");
        Map<String, String> emptyValued = new HashMap<>();
        if (props != null) {
            for (String k : props.keySet()) {
                String v = props.getString(k);
                if (v == null) {
                    continue;
                }
                if (v.isEmpty() || k.isEmpty()) {
                    emptyValued.put(k, v);
                } else {
                    producer.put(k, v);
                }
            }
        }
        Map<String, String> brokerMap = MessageDecoder.string2messageProperties(
            MessageDecoder.messageProperties2String(producer));
        MessageAccessor.setProperties(inner, brokerMap);
        for (Map.Entry<String, String> e : emptyValued.entrySet()) {
            MessageAccessor.putProperty(inner, e.getKey(), e.getValue());
        }
        inner.setTagsCode(StoreBroker.tagsString2tagsCode(filterType, inner.getTags()));
        MessageAccessor.putProperty(inner, MessageConst.PROPERTY_CLUSTER, b.brokerConfig.getBrokerClusterName());
        if (retry != null) {
            String group = retry.getString("group");
            MessageAccessor.putProperty(inner, MessageConst.PROPERTY_RETRY_TOPIC, retry.getString("originalTopic"));
            MessageAccessor.putProperty(inner, MessageConst.PROPERTY_ORIGIN_MESSAGE_ID,
                StoreBroker.str(retry, "originMsgId", "ORIGIN-" + id));
            MessageAccessor.putProperty(inner, MessageConst.PROPERTY_REAL_TOPIC, MixAll.getRetryTopic(group));
            MessageAccessor.putProperty(inner, MessageConst.PROPERTY_REAL_QUEUE_ID, "0");
            MessageAccessor.putProperty(inner, MessageConst.PROPERTY_DELAY_TIME_LEVEL,
                String.valueOf(retry.getIntValue("delayLevel", 3 + inner.getReconsumeTimes() - 1)));
            MessageAccessor.putProperty(inner, MessageConst.PROPERTY_WAIT_STORE_MSG_OK, "false");
            inner.setPropertiesString(MessageDecoder.messageProperties2String(inner.getProperties()));
            MessageAccessor.clearProperty(inner, MessageConst.PROPERTY_DELAY_TIME_LEVEL);
            return inner;
        }
        String wait = inner.getProperty(MessageConst.PROPERTY_WAIT_STORE_MSG_OK);
        if (wait != null && !Release.SEND_STORES_WAIT_PROPERTY) {
            // 4.9's SendMessageProcessor: WAIT is left out of the stored properties string, kept in the map.
            inner.getProperties().remove(MessageConst.PROPERTY_WAIT_STORE_MSG_OK);
            inner.setPropertiesString(MessageDecoder.messageProperties2String(inner.getProperties()));
            inner.getProperties().put(MessageConst.PROPERTY_WAIT_STORE_MSG_OK, wait);
            return inner;
        }
        inner.setPropertiesString(MessageDecoder.messageProperties2String(inner.getProperties()));
        return inner;
    }
}
