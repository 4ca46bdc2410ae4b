package rmqref;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import org.apache.rocketmq.broker.filter.ConsumerFilterManager;
import org.apache.rocketmq.remoting.protocol.filter.FilterAPI;
import org.apache.rocketmq.remoting.protocol.heartbeat.SubscriptionData;

/**
 * The release's SubscriptionData (5.x: org.apache.rocketmq.remoting.protocol.heartbeat) behind one name, so the
 * shared sources (src/common) never import it. {@link #data} is the real object: passing it to a broker constructor
 * from shared code compiles against whichever release is on the classpath.
 */
final class Subscription {
    static final String SUB_ALL = SubscriptionData.SUB_ALL;

    final SubscriptionData data;

    private Subscription(SubscriptionData data) {
        this.data = data;
    }

    /** FilterAPI.build(topic, expression, type), as PullMessageProcessor parses a posted subscription. */
    static Subscription build(String topic, String expression, String type) throws Exception {
        return new Subscription(FilterAPI.build(topic, expression, type));
    }

    /** FilterAPI.buildSubscriptionData(topic, expression): the TAG parse. */
    static Subscription buildTag(String topic, String expression) throws Exception {
        return new Subscription(FilterAPI.buildSubscriptionData(topic, expression));
    }

    /** A SubscriptionData set field by field (no FilterAPI), as a consumer heartbeat carries it. */
    static Subscription of(String topic, String subString, String expressionType, long subVersion) {
        SubscriptionData sd = new SubscriptionData();
        sd.setTopic(topic);
        sd.setSubString(subString);
        sd.setExpressionType(expressionType);
        sd.setSubVersion(subVersion);
        return new Subscription(sd);
    }

    /** ConsumerFilterManager.register(group, subList): what DefaultConsumerIdsChangeListener calls on REGISTER. */
    static void register(ConsumerFilterManager mgr, String group, List<Subscription> subs) {
        List<SubscriptionData> subList = new ArrayList<>();
        for (Subscription s : subs) {
            subList.add(s.data);
        }
        mgr.register(group, subList);
    }

    String topic() {
        return data.getTopic();
    }

    String subString() {
        return data.getSubString();
    }

    String expressionType() {
        return data.getExpressionType();
    }

    Set<String> tags() {
        return data.getTagsSet();
    }

    Set<Integer> codes() {
        return data.getCodeSet();
    }

    boolean classFilterMode() {
        return data.isClassFilterMode();
    }

    void setSubVersion(long v) {
        data.setSubVersion(v);
    }
}
