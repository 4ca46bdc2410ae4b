package rmqref;

import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.broker.filter.MessageEvaluationContext;
import org.apache.rocketmq.filter.FilterFactory;
import org.apache.rocketmq.filter.expression.Expression;
import org.apache.rocketmq.filter.expression.MQFilterException;
import org.apache.rocketmq.filter.util.BitsArray;
import org.apache.rocketmq.filter.util.BloomFilter;
import org.apache.rocketmq.filter.util.BloomFilterData;

/**
 * The harness's {@code bench} mode: times the real broker filter calls (SQL92 evaluate, bloom isHit) in a warm
 * single-threaded loop, giving the Java baseline the Python replay's throughput is compared with (PROTOCOL.md).
 */
final class BenchMode {
    private static final double DEFAULT_WARMUP_SECONDS = 1.0;
    /** Calls between two clock reads for the one-call-per-step kinds (sql, bloom_is_hit). */
    private static final int CALLS_PER_CLOCK_READ = 256;
    /** Messages between two clock reads for sql_multi (each message is K evaluations, K up to hundreds). */
    private static final int MESSAGES_PER_CLOCK_READ = 64;

    private BenchMode() {
    }

    /** One timed call on the i-th prepared input; returns the broker's decision. */
    private interface Step {
        boolean run(int i);
    }

    static int run(String in, String out) throws Exception {
        JSONObject root = JsonIn.readObject(Path.of(in));
        JSONArray cases = root.getJSONArray("cases");
        List<Object> results = new ArrayList<>(cases.size());
        for (int i = 0; i < cases.size(); i++) {
            results.add(benchCase(cases.getJSONObject(i)));
        }
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("results", results);
        JsonOut.write(Path.of(out), doc);
        return 0;
    }

    private static Map<String, Object> benchCase(JSONObject c) {
        Map<String, Object> r = new LinkedHashMap<>();
        if (c.containsKey("id")) {
            r.put("id", c.get("id"));
        }
        try {
            String kind = c.containsKey("kind") ? JsonIn.string(c, "kind") : "sql";
            double seconds = c.getDoubleValue("seconds");
            double warmup = c.containsKey("warmup_seconds") ? c.getDoubleValue("warmup_seconds") : DEFAULT_WARMUP_SECONDS;
            r.put("kind", kind);
            switch (kind) {
                case "sql":
                    sql(c, r, warmup, seconds);
                    break;
                case "bloom_is_hit":
                    bloomIsHit(c, r, warmup, seconds);
                    break;
                case "sql_multi":
                    sqlMulti(c, r, warmup, seconds);
                    break;
                default:
                    throw new IllegalArgumentException("unknown bench kind: " + kind);
            }
        } catch (Throwable t) {
            Object id = r.get("id");
            r.clear();
            if (c.containsKey("id")) {
                r.put("id", id);
            }
            r.putAll(EvalMode.error(t, t instanceof MQFilterException ? EvalMode.chainMessage(t) : t.getMessage()));
        }
        return r;
    }

    private static void sql(JSONObject c, Map<String, Object> r, double warmup, double seconds) throws Exception {
        String expr = JsonIn.string(c, "expr");
        r.put("expr", expr);
        Expression compiled = FilterFactory.INSTANCE.get("SQL92").compile(expr);
        List<Map<String, String>> props = EvalMode.props(c.getJSONArray("props"));
        if (props.isEmpty()) {
            throw new IllegalArgumentException("sql bench needs at least one props map");
        }
        MessageEvaluationContext[] contexts = new MessageEvaluationContext[props.size()];
        for (int i = 0; i < contexts.length; i++) {
            contexts[i] = new MessageEvaluationContext(props.get(i));
        }
        long[] errors = new long[1];
        Step step = i -> {
            try {
                return Boolean.TRUE.equals(compiled.evaluate(contexts[i]));
            } catch (Throwable t) {
                errors[0]++;
                return false;
            }
        };
        timed(step, contexts.length, warmup, CALLS_PER_CLOCK_READ);
        errors[0] = 0;
        r.putAll(timed(step, contexts.length, seconds, CALLS_PER_CLOCK_READ));
        r.put("errors", errors[0]);
    }

    /**
     * Every one of K compiled selectors on each message in turn (the broker's per-message work at dispatch or in a
     * pull's commit-log layer for K groups); with {@code bloom}, CommitLogDispatcherCalcBitMap's bitmap too: a fresh
     * BitsArray per message and hashTo of each TRUE filter's BloomFilterData.
     */
    private static void sqlMulti(JSONObject c, Map<String, Object> r, double warmup, double seconds) throws Exception {
        JSONArray exprs = c.getJSONArray("exprs");
        Expression[] compiled = new Expression[exprs.size()];
        for (int k = 0; k < compiled.length; k++) {
            compiled[k] = FilterFactory.INSTANCE.get("SQL92").compile(JsonIn.element(exprs, k));
        }
        List<Map<String, String>> props = EvalMode.props(c.getJSONArray("props"));
        if (props.isEmpty() || compiled.length == 0) {
            throw new IllegalArgumentException("sql_multi bench needs at least one expression and one props map");
        }
        MessageEvaluationContext[] contexts = new MessageEvaluationContext[props.size()];
        for (int i = 0; i < contexts.length; i++) {
            contexts[i] = new MessageEvaluationContext(props.get(i));
        }
        JSONObject bloom = c.getJSONObject("bloom");
        BloomFilter bf = bloom == null ? null : BloomFilter.createByFn(bloom.getIntValue("f"), bloom.getIntValue("n"));
        BloomFilterData[] data = new BloomFilterData[compiled.length];
        if (bf != null) {
            JSONArray keys = bloom.getJSONArray("keys");
            if (keys == null || keys.size() != compiled.length) {
                throw new IllegalArgumentException("sql_multi bloom needs one key per expression: "
                    + (keys == null ? 0 : keys.size()) + " keys for " + compiled.length + " expressions");
            }
            for (int k = 0; k < data.length; k++) {
                data[k] = bf.generate(JsonIn.element(keys, k));
            }
        }
        long[] errors = new long[1];
        long[] checksum = new long[1];
        Step step = i -> {
            BitsArray bits = bf == null ? null : BitsArray.create(bf.getM());
            boolean any = false;
            for (int k = 0; k < compiled.length; k++) {
                boolean hit;
                try {
                    hit = Boolean.TRUE.equals(compiled[k].evaluate(contexts[i]));
                } catch (Throwable t) {
                    errors[0]++;
                    hit = false;
                }
                if (hit) {
                    any = true;
                    if (bits != null) {
                        bf.hashTo(data[k], bits);
                    }
                }
            }
            if (bits != null) {
                checksum[0] += bits.bytes()[0];
            }
            return any;
        };
        timed(step, contexts.length, warmup, MESSAGES_PER_CLOCK_READ);
        errors[0] = 0;
        Map<String, Object> t = timed(step, contexts.length, seconds, MESSAGES_PER_CLOCK_READ);
        long messages = (Long) t.get("evaluations");
        double secs = (Double) t.get("seconds");
        r.put("filters", compiled.length);
        r.put("messages", messages);
        r.put("evaluations", messages * compiled.length);
        r.put("seconds", secs);
        r.put("per_second", secs > 0 ? messages * compiled.length / secs : 0.0);
        r.put("messages_per_second", secs > 0 ? messages / secs : 0.0);
        r.put("matches", t.get("matches"));
        r.put("errors", errors[0]);
        if (bf != null) {
            r.put("bitmaps_per_second", secs > 0 ? messages / secs : 0.0);
            r.put("checksum", checksum[0]);
        }
    }

    private static void bloomIsHit(JSONObject c, Map<String, Object> r, double warmup, double seconds) {
        int f = c.getIntValue("f");
        int n = c.getIntValue("n");
        r.put("f", f);
        r.put("n", n);
        BloomFilter bf = BloomFilter.createByFn(f, n);
        BitsArray bits = BitsArray.create(bf.getM());
        JSONArray keys = c.getJSONArray("keys");
        JSONArray probes = c.containsKey("probes") ? c.getJSONArray("probes") : keys;
        for (int i = 0; i < keys.size(); i++) {
            bf.hashTo(bf.generate(JsonIn.element(keys, i)), bits);
        }
        if (probes.isEmpty()) {
            throw new IllegalArgumentException("bloom_is_hit bench needs at least one key or probe");
        }
        BloomFilterData[] data = new BloomFilterData[probes.size()];
        for (int i = 0; i < data.length; i++) {
            data[i] = bf.generate(JsonIn.element(probes, i));
        }
        Step step = i -> bf.isHit(data[i], bits);
        timed(step, data.length, warmup, CALLS_PER_CLOCK_READ);
        r.putAll(timed(step, data.length, seconds, CALLS_PER_CLOCK_READ));
    }

    /**
     * Calls {@code step} round-robin over {@code size} inputs until {@code seconds} have passed (the clock is read
     * every {@code batch} calls); returns evaluations (calls), seconds, per_second and matches (the count also keeps
     * the JIT honest).
     */
    private static Map<String, Object> timed(Step step, int size, double seconds, int batch) {
        long budget = (long) (seconds * 1e9);
        long matches = 0;
        long count = 0;
        int i = 0;
        long start = System.nanoTime();
        long elapsed = 0;
        while (elapsed < budget) {
            for (int j = 0; j < batch; j++) {
                if (step.run(i)) {
                    matches++;
                }
                if (++i == size) {
                    i = 0;
                }
            }
            count += batch;
            elapsed = System.nanoTime() - start;
        }
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("evaluations", count);
        m.put("seconds", elapsed / 1e9);
        m.put("per_second", elapsed > 0 ? count / (elapsed / 1e9) : 0.0);
        m.put("matches", matches);
        return m;
    }
}
