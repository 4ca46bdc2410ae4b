package rmqref;

import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.broker.filter.MessageEvaluationContext;
import org.apache.rocketmq.filter.FilterFactory;
import org.apache.rocketmq.filter.FilterSpi;
import org.apache.rocketmq.filter.expression.Expression;
import org.apache.rocketmq.filter.expression.MQFilterException;
import org.apache.rocketmq.filter.util.BitsArray;
import org.apache.rocketmq.filter.util.BloomFilter;
import org.apache.rocketmq.filter.util.BloomFilterData;

/**
 * The harness's {@code eval} mode: answers SQL92, tag-hash, subscription and bloom cases with the real RocketMQ
 * classes of the release on the classpath, so the Python filters can be checked against what the broker itself
 * computes (PROTOCOL.md).
 */
final class EvalMode {
    private EvalMode() {
    }

    static int run(String in, String out) throws Exception {
        JSONObject root = JsonIn.readObject(Path.of(in));
        JSONArray cases = root.getJSONArray("cases");
        List<Object> results = new ArrayList<>(cases.size());
        for (int i = 0; i < cases.size(); i++) {
            results.add(evalCase(cases.getJSONObject(i)));
        }
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("results", results);
        JsonOut.write(Path.of(out), doc);
        return 0;
    }

    /** One case → one result map; the id is echoed first, and any throw replaces the other fields by an error. */
    static Map<String, Object> evalCase(JSONObject c) {
        Map<String, Object> r = new LinkedHashMap<>();
        if (c.containsKey("id")) {
            r.put("id", c.get("id"));
        }
        try {
            String kind = c.getString("kind");
            if (kind == null) {
                throw new IllegalArgumentException("case has no kind");
            }
            switch (kind) {
                case "sql":
                    sql(c, r);
                    break;
                case "tag_hash":
                    r.put("hash", JsonIn.string(c, "tag").hashCode());
                    break;
                case "subscription":
                    subscription(c, r);
                    break;
                case "bloom":
                    bloom(c, r);
                    break;
                case "decompress":
                    decompress(c, r);
                    break;
                case "bloom_data_equals":
                    r.put("equals", bloomData(c.getJSONObject("a")).equals(bloomData(c.getJSONObject("b"))));
                    break;
                default:
                    throw new IllegalArgumentException("unknown case kind: " + kind);
            }
        } catch (Throwable t) {
            Object id = r.get("id");
            r.clear();
            if (c.containsKey("id")) {
                r.put("id", id);
            }
            r.putAll(error(t, t.getMessage()));
        }
        return r;
    }

    private static void sql(JSONObject c, Map<String, Object> r) {
        String expr = JsonIn.string(c, "expr");
        List<Map<String, String>> propsList = props(c.getJSONArray("props"));
        Expression compiled;
        try {
            FilterSpi spi = FilterFactory.INSTANCE.get("SQL92");
            compiled = spi.compile(expr);
        } catch (Throwable t) {
            r.put("compile", error(t, chainMessage(t)));
            return;
        }
        r.put("compile", "ok");
        List<Object> evals = new ArrayList<>(propsList.size());
        for (Map<String, String> props : propsList) {
            evals.add(evaluate(compiled, new MessageEvaluationContext(props)));
        }
        r.put("evals", evals);
    }

    /** Evaluates like ExpressionMessageFilter.isMatchedByCommitLog and reports the raw value and the decision. */
    static Map<String, Object> evaluate(Expression compiled, MessageEvaluationContext ctx) {
        Object value;
        try {
            value = compiled.evaluate(ctx);
        } catch (Throwable t) {
            Map<String, Object> e = error(t, t.getMessage());
            e.put("match", false);
            return e;
        }
        Map<String, Object> e = new LinkedHashMap<>();
        if (value == null) {
            e.put("type", "null");
            e.put("value", null);
        } else {
            e.put("type", value.getClass().getSimpleName());
            e.put("value", value instanceof Boolean ? value : String.valueOf(value));
        }
        e.put("match", Boolean.TRUE.equals(value));
        return e;
    }

    /** Each props map becomes a HashMap of String values; JSON null is stored as a null value (= missing). */
    static List<Map<String, String>> props(JSONArray arr) {
        List<Map<String, String>> list = new ArrayList<>();
        if (arr == null) {
            return list;
        }
        for (int i = 0; i < arr.size(); i++) {
            JSONObject o = arr.getJSONObject(i);
            Map<String, String> m = new HashMap<>();
            for (Map.Entry<String, Object> e : o.entrySet()) {
                Object v = e.getValue();
                if (v != null && !(v instanceof String)) {
                    throw new IllegalArgumentException("property " + e.getKey() + " is not a string: " + v);
                }
                m.put(e.getKey(), (String) v);
            }
            list.add(m);
        }
        return list;
    }

    private static void subscription(JSONObject c, Map<String, Object> r) throws Exception {
        String topic = JsonIn.string(c, "topic");
        String expr = JsonIn.string(c, "expr");
        Subscription sd = c.containsKey("type")
                ? Subscription.build(topic, expr, JsonIn.string(c, "type"))
                : Subscription.buildTag(topic, expr);
        r.put("sub_string", sd.subString());
        r.put("expression_type", sd.expressionType());
        r.put("tags", new ArrayList<>(sd.tags()));
        r.put("codes", new ArrayList<>(sd.codes()));
        r.put("sub_all", "*".equals(sd.subString()));
    }

    /**
     * A stored body inflated as the client's MessageDecoder does when its sysFlag has COMPRESSED_FLAG: the codec
     * from MessageSysFlag.getCompressionType, then that Compressor's decompress (bodies of length 0 are never
     * inflated by the decoder, so the case is not special-cased here).
     */
    private static void decompress(JSONObject c, Map<String, Object> r) throws Exception {
        int sysFlag = c.getIntValue("sys_flag");
        byte[] body = java.util.Base64.getDecoder().decode(JsonIn.string(c, "body"));
        org.apache.rocketmq.common.compression.Compressor compressor =
            org.apache.rocketmq.common.compression.CompressorFactory.getCompressor(
                org.apache.rocketmq.common.sysflag.MessageSysFlag.getCompressionType(sysFlag));
        r.put("body", java.util.Base64.getEncoder().encodeToString(compressor.decompress(body)));
    }

    private static void bloom(JSONObject c, Map<String, Object> r) {
        BloomFilter bf = BloomFilter.createByFn(c.getIntValue("f"), c.getIntValue("n"));
        r.put("m", bf.getM());
        r.put("k", bf.getK());
        BitsArray bits = BitsArray.create(bf.getM());
        JSONArray keys = c.getJSONArray("keys");
        if (keys != null) {
            List<Object> gen = new ArrayList<>();
            List<Object> valid = new ArrayList<>();
            for (int i = 0; i < keys.size(); i++) {
                BloomFilterData d = bf.generate(JsonIn.element(keys, i));
                Map<String, Object> g = new LinkedHashMap<>();
                g.put("bit_pos", d.getBitPos());
                g.put("bit_num", d.getBitNum());
                gen.add(g);
                valid.add(bf.isValid(d));
                bf.hashTo(d, bits);
            }
            r.put("generate", gen);
            r.put("bits_hex", hex(bits.bytes()));
            r.put("valid", valid);
        }
        JSONArray probes = c.getJSONArray("probes");
        if (probes != null) {
            List<Object> hits = new ArrayList<>();
            for (int i = 0; i < probes.size(); i++) {
                hits.add(bf.isHit(bf.generate(JsonIn.element(probes, i)), bits));
            }
            r.put("hits", hits);
        }
    }

    private static BloomFilterData bloomData(JSONObject o) {
        JSONArray pos = o.getJSONArray("bit_pos");
        int[] bitPos = null;
        if (pos != null) {
            bitPos = new int[pos.size()];
            for (int i = 0; i < bitPos.length; i++) {
                bitPos[i] = pos.getIntValue(i);
            }
        }
        return new BloomFilterData(bitPos, o.getIntValue("bit_num"));
    }

    static String hex(byte[] bytes) {
        StringBuilder sb = new StringBuilder(bytes.length * 2);
        for (byte b : bytes) {
            sb.append(Character.forDigit((b >> 4) & 15, 16)).append(Character.forDigit(b & 15, 16));
        }
        return sb.toString();
    }

    /** {"error": simple class name, "message": msg, "causes": [{"error", "message"} per getCause() link]}. */
    static Map<String, Object> error(Throwable t, String message) {
        Map<String, Object> e = new LinkedHashMap<>();
        e.put("error", t.getClass().getSimpleName());
        e.put("message", message);
        List<Object> causes = new ArrayList<>();
        for (Throwable x = t.getCause(); x != null && causes.size() < 20; x = x.getCause()) {
            Map<String, Object> cm = new LinkedHashMap<>();
            cm.put("error", x.getClass().getSimpleName());
            cm.put("message", x.getMessage());
            causes.add(cm);
        }
        if (!causes.isEmpty()) {
            e.put("causes", causes);
        }
        return e;
    }

    /**
     * The compile-error message: MQFilterException's own errorMessage (its getMessage() is only the cause's
     * toString), then " / SimpleName: message" for each cause in the chain.
     */
    static String chainMessage(Throwable t) {
        StringBuilder sb = new StringBuilder();
        sb.append(t instanceof MQFilterException ? ((MQFilterException) t).getErrorMessage() : t.getMessage());
        int depth = 0;
        for (Throwable x = t.getCause(); x != null && depth < 20; x = x.getCause(), depth++) {
            sb.append(" / ").append(x.getClass().getSimpleName()).append(": ").append(x.getMessage());
        }
        return sb.toString();
    }
}
