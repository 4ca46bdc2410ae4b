package rmqref;

import com.alibaba.fastjson2.JSONObject;
import java.lang.reflect.Field;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.broker.filter.ConsumerFilterData;
import org.apache.rocketmq.broker.filter.ConsumerFilterManager;
import org.apache.rocketmq.broker.filter.ExpressionMessageFilter;
import org.apache.rocketmq.broker.filter.MessageEvaluationContext;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.filter.ExpressionType;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.filter.util.BitsArray;
import org.apache.rocketmq.store.ConsumeQueueExt;
import org.apache.rocketmq.store.MessageFilter;

/** Wraps the real broker filter: every decision is the real one; each call is logged with the branch that decided. */
final class PullRecordingFilter implements MessageFilter {
    private final ExpressionMessageFilter real;
    private final boolean retryFilter;
    private final Subscription sub;
    private final ConsumerFilterData cfd;
    private final ConsumerFilterManager mgr;
    private final boolean bloomDataValid;
    final List<JSONObject> cqCalls = new ArrayList<>();
    final Map<Long, JSONObject> clCalls = new HashMap<>();
    /** Index in {@link #cqCalls} of each unit the commit log layer accepted, in order: the units getMessage returned. */
    final List<Integer> returnedUnits = new ArrayList<>();

    PullRecordingFilter(ExpressionMessageFilter real, boolean retryFilter, Subscription sub,
        ConsumerFilterData cfd, ConsumerFilterManager mgr) throws Exception {
        this.real = real;
        this.retryFilter = retryFilter;
        this.sub = sub;
        this.cfd = cfd;
        this.mgr = mgr;
        Field f = ExpressionMessageFilter.class.getDeclaredField("bloomDataValid");
        f.setAccessible(true);
        this.bloomDataValid = f.getBoolean(real);
    }

    boolean bloomDataValid() {
        return bloomDataValid;
    }

    /** Clears the per-getMessage-call logs. */
    void reset() {
        cqCalls.clear();
        clCalls.clear();
        returnedUnits.clear();
    }

    @Override
    public boolean isMatchedByConsumeQueue(Long tagsCode, ConsumeQueueExt.CqExtUnit cqExtUnit) {
        boolean result = real.isMatchedByConsumeQueue(tagsCode, cqExtUnit);
        String branch = branch(tagsCode, cqExtUnit);
        boolean predicted = !"TAG_NOT_IN_SET".equals(branch) && !"SQL_BLOOM_MISS".equals(branch);
        JSONObject o = new JSONObject();
        o.put("result", result);
        o.put("branch", predicted == result ? branch : "UNEXPLAINED:" + branch);
        o.put("tagsCode", tagsCode == null ? null : Long.toString(tagsCode));
        o.put("ext", RecordListing.extJson(cqExtUnit));
        cqCalls.add(o);
        return result;
    }

    /** Mirrors ExpressionMessageFilter.isMatchedByConsumeQueue to name the branch that decided. */
    private String branch(Long tagsCode, ConsumeQueueExt.CqExtUnit ext) {
        if (sub == null) {
            return "NO_SUBSCRIPTION";
        }
        if (sub.classFilterMode()) {
            return "CLASS_FILTER";
        }
        if (ExpressionType.isTagType(sub.expressionType())) {
            if (tagsCode == null) {
                return "TAG_NULL_CODE";
            }
            if (sub.subString().equals(Subscription.SUB_ALL)) {
                return "TAG_ALL";
            }
            return sub.codes().contains(tagsCode.intValue()) ? "TAG_IN_SET" : "TAG_NOT_IN_SET";
        }
        if (cfd == null || cfd.getExpression() == null || cfd.getCompiledExpression() == null) {
            return "SQL_NO_FILTER_DATA";
        }
        if (cfd.getBloomFilterData() == null) {
            return "SQL_NO_BLOOM_DATA";
        }
        if (ext == null) {
            return "SQL_NO_EXT";
        }
        if (!cfd.isMsgInLive(ext.getMsgStoreTime())) {
            return "SQL_NOT_IN_LIVE";
        }
        byte[] bitmap = ext.getFilterBitMap();
        if (bitmap == null) {
            return "SQL_NO_BITMAP";
        }
        if (!bloomDataValid) {
            return "SQL_BLOOM_DATA_INVALID";
        }
        if (bitmap.length * Byte.SIZE != cfd.getBloomFilterData().getBitNum()) {
            return "SQL_BITMAP_LENGTH_MISMATCH";
        }
        try {
            return mgr.getBloomFilter().isHit(cfd.getBloomFilterData(), BitsArray.create(bitmap))
                ? "SQL_BLOOM_HIT" : "SQL_BLOOM_MISS";
        } catch (Throwable e) {
            return "SQL_BLOOM_EXCEPTION";
        }
    }

    @Override
    public boolean isMatchedByCommitLog(ByteBuffer msgBuffer, Map<String, String> properties) {
        long queueOffset = msgBuffer.getLong(msgBuffer.position() + MessageDecoder.QUEUE_OFFSET_POSITION);
        long phy = msgBuffer.getLong(msgBuffer.position() + MessageDecoder.PHY_POS_POSITION);
        String sqlValue = sqlValue(msgBuffer.duplicate());
        boolean result = real.isMatchedByCommitLog(msgBuffer, properties);
        JSONObject o = new JSONObject();
        o.put("result", result);
        o.put("commitLogOffset", phy);
        o.put("sqlValue", sqlValue);
        clCalls.put(queueOffset, o);
        if (result) {
            returnedUnits.add(cqCalls.size() - 1);
        }
        return result;
    }

    /**
     * Classifies the SQL value the real filter sees (null when it evaluates none: TAG subscriptions, except a TAG
     * subscription to a retry topic under 4.9's ExpressionForRetryMessageFilter, which evaluates the original
     * topic's filter data).
     */
    private String sqlValue(ByteBuffer buf) {
        if (sub == null || sub.classFilterMode()) {
            return null;
        }
        boolean retryTopic = retryFilter && sub.topic().startsWith(MixAll.RETRY_GROUP_TOPIC_PREFIX);
        if (ExpressionType.isTagType(sub.expressionType())
            && !(retryTopic && Release.RETRY_FILTER_EVALUATES_TAG_SUBSCRIPTIONS)) {
            return null;
        }
        ConsumerFilterData data = cfd;
        Map<String, String> props = null;
        try {
            props = MessageDecoder.decodeProperties(buf);
        } catch (Throwable e) {
            return "EXCEPTION:" + e.getClass().getSimpleName() + ": " + e.getMessage();
        }
        if (retryTopic) {
            String realTopic = props == null ? null : props.get(MessageConst.PROPERTY_RETRY_TOPIC);
            data = mgr.get(realTopic, Release.retryGroup(sub.topic()));
        }
        if (data == null || data.getExpression() == null || data.getCompiledExpression() == null) {
            return "NO_FILTER_DATA";
        }
        try {
            Object v = data.getCompiledExpression().evaluate(new MessageEvaluationContext(props));
            if (v == null) {
                return "NULL";
            }
            if (v instanceof Boolean) {
                return (Boolean) v ? "TRUE" : "FALSE";
            }
            return "NON_BOOLEAN:" + v.getClass().getSimpleName();
        } catch (Throwable e) {
            return "EXCEPTION:" + e.getClass().getSimpleName() + ": " + e.getMessage();
        }
    }
}
