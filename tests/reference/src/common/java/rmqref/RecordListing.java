package rmqref;

import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Stream;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
import org.apache.rocketmq.store.ConsumeQueueExt;

/** Reads a written store back: every commit log record through the real MessageDecoder, plus its CQ unit. */
final class RecordListing {
    static final int MAGIC_V1 = 0xDAA320A7;
    static final int MAGIC_V2 = 0xDAA320AB;
    static final int BLANK = 0xCBD43194;

    private final StoreBroker b;
    /**
     * commit log offset → the CQ units pointing at it (as the real iterator resolves them, plus the raw 8-byte
     * field), in reading order; several when a multi-dispatch (LMQ) queue holds the record too.
     */
    private final Map<Long, List<JSONObject>> cqByOffset = new HashMap<>();
    private final JSONArray queues = new JSONArray();
    private final JSONArray files = new JSONArray();

    RecordListing(StoreBroker b) {
        this.b = b;
    }

    JSONArray queues() {
        return queues;
    }

    /** The commit log file table; valid after {@link #listing}. */
    JSONObject commitLogFiles() {
        JSONObject o = new JSONObject();
        o.put("fileSize", b.storeConfig.getMappedFileSizeCommitLog());
        o.put("files", files);
        return o;
    }

    /** Reads every consume queue through the running store's iterator (ext resolution included). */
    void readConsumeQueues() throws Exception {
        for (String topic : b.queueTopics()) {
            for (Integer qid : b.queueIds(topic)) {
                long min = b.store.getMinOffsetInQueue(topic, qid);
                long max = b.store.getMaxOffsetInQueue(topic, qid);
                JSONObject q = new JSONObject();
                q.put("topic", topic);
                q.put("queueId", qid);
                q.put("minOffset", min);
                q.put("maxOffset", max);
                queues.add(q);
                Map<Long, long[]> raw = rawUnits(b.root, topic, qid);
                for (Map.Entry<Long, JSONObject> e : b.units(topic, qid, min, max).entrySet()) {
                    JSONObject u = e.getValue();
                    long[] r = raw.get(e.getKey());
                    u.put("tagsCodeRaw", r == null ? null : Long.toString(r[2]));
                    u.put("topic", topic);
                    u.put("queueId", qid);
                    u.put("queueOffset", e.getKey());
                    cqByOffset.computeIfAbsent(u.getLongValue("commitLogOffset"), k -> new ArrayList<>()).add(u);
                }
            }
        }
    }

    static JSONObject extJson(ConsumeQueueExt.CqExtUnit ext) {
        if (ext == null) {
            return null;
        }
        JSONObject o = new JSONObject();
        o.put("tagsCode", Long.toString(ext.getTagsCode()));
        o.put("msgStoreTime", ext.getMsgStoreTime());
        byte[] bm = ext.getFilterBitMap();
        o.put("bitmapHex", bm == null ? null : HexFormat.of().formatHex(bm));
        return o;
    }

    /** queue offset → {commitLogOffset, size, raw tagsCode field} read straight from the CQ files. */
    static Map<Long, long[]> rawUnits(Path root, String topic, int qid) throws IOException {
        Map<Long, long[]> out = new HashMap<>();
        Path dir = root.resolve("consumequeue").resolve(topic).resolve(String.valueOf(qid));
        if (!Files.isDirectory(dir)) {
            return out;
        }
        try (Stream<Path> s = Files.list(dir)) {
            for (Path f : s.sorted().toList()) {
                long base = Long.parseLong(f.getFileName().toString());
                ByteBuffer buf = ByteBuffer.wrap(Files.readAllBytes(f));
                for (int pos = 0; pos + 20 <= buf.capacity(); pos += 20) {
                    long phy = buf.getLong(pos);
                    int size = buf.getInt(pos + 8);
                    if (phy >= 0 && size > 0) {
                        out.put((base + pos) / 20, new long[] {phy, size, buf.getLong(pos + 12)});
                    }
                }
            }
        }
        return out;
    }

    /** Walks the commit log files by TOTALSIZE (after shutdown) and decodes every record with MessageDecoder. */
    JSONObject listing(Map<Long, String> idByOffset) throws IOException {
        JSONArray records = new JSONArray();
        JSONArray blanks = new JSONArray();
        Path dir = b.root.resolve("commitlog");
        List<Path> paths;
        try (Stream<Path> s = Files.list(dir)) {
            paths = new ArrayList<>(s.sorted().toList());
        }
        for (Path f : paths) {
            String name = f.getFileName().toString();
            long base = Long.parseLong(name);
            byte[] bytes = Files.readAllBytes(f);
            ByteBuffer buf = ByteBuffer.wrap(bytes);
            int pos = 0;
            int count = 0;
            JSONObject file = new JSONObject();
            file.put("name", name);
            file.put("size", bytes.length);
            file.put("blankAt", null);
            file.put("blankSize", null);
            while (pos + 8 <= bytes.length) {
                int total = buf.getInt(pos);
                int magic = buf.getInt(pos + 4);
                if (magic == BLANK) {
                    JSONObject bl = new JSONObject();
                    bl.put("file", name);
                    bl.put("filePos", pos);
                    bl.put("commitLogOffset", base + pos);
                    bl.put("size", total);
                    blanks.add(bl);
                    file.put("blankAt", pos);
                    file.put("blankSize", total);
                    break;
                }
                if ((magic != MAGIC_V1 && magic != MAGIC_V2) || total <= 0 || pos + total > bytes.length) {
                    break;
                }
                records.add(record(bytes, pos, total, name, base, idByOffset));
                count++;
                pos += total;
            }
            boolean allZero = true;
            for (byte x : bytes) {
                if (x != 0) {
                    allZero = false;
                    break;
                }
            }
            file.put("dataEnd", pos);
            file.put("records", count);
            file.put("allZero", allZero);
            files.add(file);
        }
        JSONObject out = new JSONObject();
        out.put("fileSize", b.storeConfig.getMappedFileSizeCommitLog());
        out.put("records", records);
        out.put("blanks", blanks);
        return out;
    }

    private JSONObject record(byte[] bytes, int pos, int total, String name, long base, Map<Long, String> ids) {
        ByteBuffer slice = ByteBuffer.wrap(bytes, pos, total).slice();
        MessageExt m = MessageDecoder.decode(slice.duplicate(), true, false, false);
        MessageExt d = MessageDecoder.decode(slice.duplicate(), true, true, false);
        JSONObject o = new JSONObject();
        o.put("file", name);
        o.put("filePos", pos);
        o.put("commitLogOffset", base + pos);
        o.put("size", total);
        int magic = slice.getInt(4);
        o.put("magic", magic);
        o.put("version", magic == MAGIC_V2 ? "V2" : "V1");
        if (m == null) {
            o.put("decodeError", true);
            o.put("scenarioId", ids.get(base + pos));
            return o;
        }
        o.put("bodyCRC", m.getBodyCRC());
        o.put("queueId", m.getQueueId());
        o.put("flag", m.getFlag());
        o.put("queueOffset", m.getQueueOffset());
        o.put("physicalOffset", m.getCommitLogOffset());
        o.put("sysFlag", m.getSysFlag());
        o.put("bornTimestamp", m.getBornTimestamp());
        o.put("bornHost", StoreMessages.hostText(m.getBornHost()));
        o.put("storeTimestamp", m.getStoreTimestamp());
        o.put("storeHost", StoreMessages.hostText(m.getStoreHost()));
        o.put("reconsumeTimes", m.getReconsumeTimes());
        o.put("preparedTransactionOffset", m.getPreparedTransactionOffset());
        byte[] body = m.getBody() == null ? new byte[0] : m.getBody();
        o.put("bodyLength", body.length);
        o.put("body", Base64.getEncoder().encodeToString(body));
        o.put("bodyDecompressed", d == null ? null
            : Base64.getEncoder().encodeToString(d.getBody() == null ? new byte[0] : d.getBody()));
        o.put("topic", m.getTopic());
        o.put("properties", m.getProperties() == null ? new JSONObject() : new JSONObject(new TreeMap<>(m.getProperties())));
        o.put("propertiesString", rawProperties(slice, m.getSysFlag(), body.length, magic));
        o.put("tags", m.getTags());
        o.put("keys", m.getKeys());
        o.put("uniqKey", m.getProperty("UNIQ_KEY"));
        o.put("offsetMsgId", m.getMsgId());
        JSONObject cq = ownUnit(base + pos, m);
        o.put("cq", cq == null ? null : cqJson(cq));
        o.put("scenarioId", ids.get(base + pos));
        return o;
    }

    /**
     * The record's own CQ unit: the one at (its topic, queueId, queueOffset) among the units pointing at its commit log
     * offset; when none matches, the last one read (queues are read in topic order), as before multi-dispatch queues
     * could hold units of records of other topics (4.9 dispatches plain queue names too).
     */
    private JSONObject ownUnit(long commitLogOffset, MessageExt m) {
        List<JSONObject> units = cqByOffset.get(commitLogOffset);
        if (units == null) {
            return null;
        }
        for (JSONObject u : units) {
            if (m.getTopic().equals(u.getString("topic")) && m.getQueueId() == u.getIntValue("queueId")
                && m.getQueueOffset() == u.getLongValue("queueOffset")) {
                return u;
            }
        }
        return units.get(units.size() - 1);
    }

    private static JSONObject cqJson(JSONObject u) {
        JSONObject o = new JSONObject();
        o.put("tagsCodeRaw", u.get("tagsCodeRaw"));
        o.put("tagsCode", u.get("tagsCode"));
        o.put("ext", u.get("ext"));
        return o;
    }

    /** The stored properties text (UTF-8) located by the record layout, or null when PROPERTIESLENGTH ≤ 0. */
    static String rawProperties(ByteBuffer rec, int sysFlag, int bodyLen, int magic) {
        int born = (sysFlag & MessageSysFlag.BORNHOST_V6_FLAG) == 0 ? 8 : 20;
        int store = (sysFlag & MessageSysFlag.STOREHOSTADDRESS_V6_FLAG) == 0 ? 8 : 20;
        int p = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born + 8 + store + 4 + 8 + 4 + bodyLen;
        int topicLen;
        if (magic == MAGIC_V2) {
            topicLen = rec.getShort(p);
            p += 2;
        } else {
            topicLen = rec.get(p);
            p += 1;
        }
        p += topicLen;
        short propLen = rec.getShort(p);
        if (propLen <= 0) {
            return null;
        }
        byte[] pb = new byte[propLen];
        rec.get(p + 2, pb);
        return new String(pb, StandardCharsets.UTF_8);
    }

    /** Every file under the store root with its size (relative paths, sorted). */
    static JSONArray storeFiles(Path root) throws IOException {
        JSONArray a = new JSONArray();
        try (Stream<Path> s = Files.walk(root)) {
            for (Path p : s.filter(Files::isRegularFile).sorted().toList()) {
                JSONObject o = new JSONObject();
                o.put("path", root.relativize(p).toString());
                o.put("size", Files.size(p));
                a.add(o);
            }
        }
        return a;
    }
}
