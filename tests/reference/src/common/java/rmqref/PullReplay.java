package rmqref;

import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.broker.filter.ConsumerFilterData;
import org.apache.rocketmq.broker.filter.ConsumerFilterManager;
import org.apache.rocketmq.broker.filter.ExpressionForRetryMessageFilter;
import org.apache.rocketmq.broker.filter.ExpressionMessageFilter;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.filter.ExpressionType;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.filter.util.BloomFilterData;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.GetMessageStatus;

/** Replays the broker's pull (PullMessageProcessor's filter choice + DefaultMessageStore.getMessage) per subscription. */
final class PullReplay {
    private final StoreBroker b;

    PullReplay(StoreBroker b) {
        this.b = b;
    }

    static JSONObject bloomJson(BloomFilterData d) {
        if (d == null) {
            return null;
        }
        JSONObject o = new JSONObject();
        o.put("bitPos", d.getBitPos());
        o.put("bitNum", d.getBitNum());
        return o;
    }

    JSONObject replay(JSONArray subs) throws Exception {
        JSONArray out = new JSONArray();
        for (int i = 0; i < subs.size(); i++) {
            out.add(subscription(subs.getJSONObject(i)));
        }
        JSONObject o = new JSONObject();
        o.put("subscriptions", out);
        return o;
    }

    private JSONObject subscription(JSONObject s) throws Exception {
        String group = s.getString("group");
        String topic = s.getString("topic");
        String type = StoreBroker.str(s, "type", ExpressionType.TAG);
        String expression = StoreBroker.str(s, "expression", Subscription.SUB_ALL);
        String path = StoreBroker.str(s, "path", "registered");
        int batchSize = s.getIntValue("batchSize", 32);
        ConsumerFilterManager mgr = b.filters();
        JSONObject row = new JSONObject();
        row.put("group", group);
        row.put("topic", topic);
        row.put("type", type);
        row.put("expression", expression);
        row.put("path", path);
        row.put("batchSize", batchSize);
        row.put("filterClass", null);
        row.put("filterData", null);
        row.put("queues", new JSONArray());

        Subscription sd;
        try {
            sd = Subscription.build(topic, expression, type);
        } catch (Exception e) {
            row.put("subVersion", s.getLongValue("subVersion", 0L));
            row.put("answer", "SUBSCRIPTION_PARSE_FAILED");
            row.put("answerMessage", e.getMessage());
            return row;
        }
        JSONObject sdj = new JSONObject();
        sdj.put("subString", sd.subString());
        sdj.put("expressionType", sd.expressionType());
        sdj.put("tags", new ArrayList<>(sd.tags()));
        sdj.put("codes", new ArrayList<>(sd.codes()));
        row.put("subscriptionData", sdj);
        boolean tag = ExpressionType.isTagType(sd.expressionType());
        ConsumerFilterData cfd = null;
        long subVersion;
        String answer = "OK";
        if ("posted".equals(path)) {
            subVersion = s.getLongValue("subVersion", 0L);
            if (!tag) {
                cfd = ConsumerFilterManager.build(topic, group, expression, type, subVersion);
            }
        } else {
            ConsumerFilterData registered = mgr.get(topic, group);
            subVersion = s.containsKey("subVersion") ? s.getLongValue("subVersion")
                : (registered == null ? 0L : registered.getClientVersion());
            if (!tag) {
                cfd = registered;
                if (cfd == null) {
                    answer = "FILTER_DATA_NOT_EXIST";
                } else if (cfd.getClientVersion() < subVersion) {
                    answer = "FILTER_DATA_NOT_LATEST";
                }
            }
        }
        sd.setSubVersion(subVersion);
        row.put("subVersion", subVersion);
        if ("OK".equals(answer) && !tag && !b.brokerConfig.isEnablePropertyFilter()) {
            answer = "SYSTEM_ERROR";
        }
        row.put("answer", answer);
        JSONObject fd = StoreMode.filterDataJson(cfd);
        row.put("filterData", fd);
        if (!"OK".equals(answer)) {
            return row;
        }
        boolean retry = b.brokerConfig.isFilterSupportRetry();
        ExpressionMessageFilter real = retry ? new ExpressionForRetryMessageFilter(sd.data, cfd, mgr)
            : new ExpressionMessageFilter(sd.data, cfd, mgr);
        PullRecordingFilter rec = new PullRecordingFilter(real, retry, sd, cfd, mgr);
        row.put("filterClass", real.getClass().getSimpleName());
        if (fd != null) {
            fd.put("bloomDataValid", rec.bloomDataValid());
        }
        JSONArray queues = new JSONArray();
        for (int qid : queueIds(s, topic)) {
            JSONObject starts = s.getJSONObject("startOffsets");
            long start = starts != null && starts.containsKey(String.valueOf(qid))
                ? starts.getLongValue(String.valueOf(qid)) : 0L;
            queues.add(queue(group, topic, qid, batchSize, sd, rec, start));
        }
        row.put("queues", queues);
        return row;
    }

    private List<Integer> queueIds(JSONObject s, String topic) throws Exception {
        if (s.containsKey("queueIds")) {
            return s.getJSONArray("queueIds").toJavaList(Integer.class);
        }
        return b.queueIds(topic);
    }

    private JSONObject queue(String group, String topic, int qid, int batchSize, Subscription sd,
        PullRecordingFilter rec, long start) throws Exception {
        long min = b.store.getMinOffsetInQueue(topic, qid);
        long max = b.store.getMaxOffsetInQueue(topic, qid);
        TreeMap<Long, JSONObject> units = b.units(topic, qid, min, max);
        Map<Long, long[]> raw = RecordListing.rawUnits(b.root, topic, qid);
        JSONObject q = new JSONObject();
        q.put("queueId", qid);
        q.put("minOffset", min);
        q.put("maxOffset", max);
        JSONArray calls = new JSONArray();
        JSONArray unitRows = new JSONArray();
        JSONArray messages = new JSONArray();
        long offset = start;
        for (int call = 0; call < 1_000_000; call++) {
            rec.reset();
            GetMessageResult r = b.store.getMessage(group, topic, qid, offset, batchSize, rec);
            JSONObject c = new JSONObject();
            c.put("index", call);
            c.put("requestOffset", offset);
            calls.add(c);
            if (r == null) {
                c.put("status", "NULL");
                break;
            }
            long next;
            try {
                next = r.getNextBeginOffset();
                c.put("status", r.getStatus().name());
                c.put("nextBeginOffset", next);
                c.put("minOffset", r.getMinOffset());
                c.put("maxOffset", r.getMaxOffset());
                c.put("messageCount", r.getMessageCount());
                c.put("filterMessageCount", Release.filterMessageCount(r));
                Map<Long, Boolean> kept = new HashMap<>();
                Map<Long, Boolean> decoded = new HashMap<>();
                List<ByteBuffer> bufs = r.getMessageBufferList();
                List<Long> qos = Release.queueOffsets(r, rec, offset);
                int clientDecoded = clientDecodedCount(bufs);
                for (int i = 0; i < bufs.size(); i++) {
                    JSONObject msg = message(bufs.get(i), sd, topic);
                    msg.put("queueOffset", qos.get(i));
                    msg.put("call", call);
                    msg.put("clientDecoded", i < clientDecoded);
                    if (i >= clientDecoded) {
                        msg.put("clientKept", false);
                    }
                    messages.add(msg);
                    kept.put(qos.get(i), msg.getBoolean("clientKept"));
                    decoded.put(qos.get(i), i < clientDecoded);
                }
                for (int k = 0; k < rec.cqCalls.size(); k++) {
                    unitRows.add(unitRow(offset + k, call, rec.cqCalls.get(k), rec.clCalls.get(offset + k),
                        kept.get(offset + k), decoded.get(offset + k), units.get(offset + k), raw.get(offset + k)));
                }
            } finally {
                r.release();
            }
            GetMessageStatus st = r.getStatus();
            if (st == GetMessageStatus.OFFSET_OVERFLOW_ONE || st == GetMessageStatus.NO_MESSAGE_IN_QUEUE
                || st == GetMessageStatus.NO_MATCHED_LOGIC_QUEUE || st == GetMessageStatus.OFFSET_OVERFLOW_BADLY
                || next == offset) {
                break;
            }
            offset = next;
        }
        q.put("calls", calls);
        q.put("units", unitRows);
        q.put("messages", messages);
        return q;
    }

    /**
     * How many of a pull's returned messages the client decodes: PullAPIWrapper.processPullResult runs
     * MessageDecoder.decodesBatch (5.x; readBody, decompressBody, isClient: the ClientConfig defaults) or
     * MessageDecoder.decodes (4.9) over the response body, which is the returned buffers one after another; the
     * first record that fails to decode (e.g. a compressed body that does not inflate) ends the list, so it and
     * every later message are lost.
     */
    private static int clientDecodedCount(List<ByteBuffer> bufs) {
        int total = 0;
        for (ByteBuffer b : bufs) {
            total += b.remaining();
        }
        ByteBuffer all = ByteBuffer.allocate(total);
        for (ByteBuffer b : bufs) {
            all.put(b.duplicate());
        }
        all.flip();
        return Release.clientDecodes(all).size();
    }

    private static JSONObject unitRow(long qo, int call, JSONObject cq, JSONObject cl, Boolean clientKept,
        Boolean clientDecoded, JSONObject unit, long[] raw) {
        JSONObject u = new JSONObject();
        u.put("queueOffset", qo);
        u.put("commitLogOffset", unit == null ? null : unit.get("commitLogOffset"));
        u.put("size", unit == null ? null : unit.get("size"));
        u.put("call", call);
        u.put("tagsCodeRaw", raw == null ? null : Long.toString(raw[2]));
        u.put("tagsCode", cq.get("tagsCode"));
        JSONObject ext = cq.getJSONObject("ext");
        u.put("ext", ext != null);
        u.put("extMsgStoreTime", ext == null ? null : ext.get("msgStoreTime"));
        u.put("bitmapHex", ext == null ? null : ext.get("bitmapHex"));
        u.put("attributionOk", unit != null && java.util.Objects.equals(unit.get("tagsCode"), cq.get("tagsCode")));
        boolean cqResult = cq.getBooleanValue("result");
        String branch = cq.getString("branch");
        u.put("cqResult", cqResult);
        u.put("cqBranch", branch);
        u.put("clCalled", cl != null);
        u.put("clResult", cl == null ? null : cl.get("result"));
        u.put("sqlValue", cl == null ? null : cl.get("sqlValue"));
        boolean returned = clientKept != null;
        u.put("brokerReturned", returned);
        u.put("clientDecoded", clientDecoded);
        u.put("clientKept", clientKept);
        u.put("delivered", returned && clientKept);
        String outcome;
        if (returned && !clientDecoded) {
            outcome = "CLIENT_DECODE_FAILED";
        } else if (returned) {
            outcome = clientKept ? "DELIVERED" : "TAG_CLIENT_MISMATCH";
        } else if (!cqResult) {
            outcome = "TAG_NOT_IN_SET".equals(branch) ? "TAG_HASH_MISS"
                : "SQL_BLOOM_MISS".equals(branch) ? "BLOOM_MISS" : "CQ_REJECTED_OTHER";
        } else if (cl != null && !cl.getBooleanValue("result")) {
            String v = cl.getString("sqlValue");
            outcome = v == null ? "CL_REJECTED_OTHER" : v.equals("FALSE") ? "SQL_FALSE" : v.equals("NULL") ? "SQL_NULL"
                : v.startsWith("EXCEPTION") ? "SQL_ERROR" : v.startsWith("NON_BOOLEAN") ? "SQL_NON_BOOLEAN"
                : "CL_REJECTED_OTHER";
        } else {
            outcome = "NOT_READ";
        }
        u.put("outcome", outcome);
        u.put("bloomFalsePositive", "SQL_BLOOM_HIT".equals(branch) && cl != null && !cl.getBooleanValue("result"));
        return u;
    }

    /** One broker-returned record as the client decodes it, with PullAPIWrapper's exact tag re-check. */
    private static JSONObject message(ByteBuffer buf, Subscription sd, String topic) {
        MessageExt stored = MessageDecoder.decode(buf.duplicate(), true, false, true);
        MessageExt client = MessageDecoder.decode(buf.duplicate(), true, true, true);
        MessageExt m = client != null ? client : stored;
        JSONObject o = new JSONObject();
        o.put("commitLogOffset", m.getCommitLogOffset());
        o.put("size", m.getStoreSize());
        String seen = m.getTopic();
        String retryTopic = m.getProperty(MessageConst.PROPERTY_RETRY_TOPIC);
        if (retryTopic != null && topic.startsWith(MixAll.RETRY_GROUP_TOPIC_PREFIX)) {
            seen = retryTopic;
        }
        o.put("topic", seen);
        o.put("tags", m.getTags());
        o.put("keys", m.getKeys());
        o.put("uniqKey", m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
        // The client's msgId (MessageClientExt.getMsgId: UNIQ_KEY when there is one) and the offset msg id
        // (store host + port + commit log offset, MessageDecoder.createMessageId) are different ids: keep both.
        if (client instanceof MessageClientExt) {
            o.put("msgId", client.getMsgId());
            o.put("offsetMsgId", ((MessageClientExt) client).getOffsetMsgId());
        } else {
            String uniq = MessageClientIDSetter.getUniqID(m);
            o.put("msgId", uniq != null ? uniq : m.getMsgId());
            o.put("offsetMsgId", m.getMsgId());
        }
        o.put("properties", m.getProperties() == null ? new JSONObject() : new JSONObject(new TreeMap<>(m.getProperties())));
        o.put("body", stored == null || stored.getBody() == null ? "" : Base64.getEncoder().encodeToString(stored.getBody()));
        o.put("bodyDecompressed", client == null ? null
            : Base64.getEncoder().encodeToString(client.getBody() == null ? new byte[0] : client.getBody()));
        // The sysFlag the consumer's message holds: 5.x's decode clears COMPRESSED_FLAG once it inflated the body,
        // 4.9's keeps it.
        o.put("clientSysFlag", client == null ? null : client.getSysFlag());
        boolean keep = true;
        if (!sd.tags().isEmpty() && !sd.classFilterMode()) {
            keep = m.getTags() != null && sd.tags().contains(m.getTags());
        }
        o.put("clientKept", keep);
        return o;
    }
}
