package rmqref;

import java.nio.ByteBuffer;
import java.util.List;
import org.apache.rocketmq.common.KeyBuilder;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.CommitLog;
import org.apache.rocketmq.store.DispatchRequest;
import org.apache.rocketmq.store.GetMessageResult;

/**
 * The 5.x line's answers to the calls whose signature or behaviour differs between release lines (the 4.9 tree has
 * a class of the same name). Everything here is a direct call of the release's own code.
 */
final class Release {
    /** Which source line this build is (src/rocketmq-5 or src/rocketmq-4.9). */
    static final String LINE = "5";

    /**
     * ExpressionForRetryMessageFilter.isMatchedByCommitLog: 5.x returns true for every TAG subscription before it
     * looks at the topic, so a TAG subscription to a retry topic never evaluates the original topic's SQL filter.
     */
    static final boolean RETRY_FILTER_EVALUATES_TAG_SUBSCRIPTIONS = false;

    /** SendMessageProcessor (5.x) writes a producer's WAIT property into the stored properties string. */
    static final boolean SEND_STORES_WAIT_PROPERTY = true;

    private Release() {
    }

    /**
     * Null, except for `group` on a build whose RemotingSerializable cannot encode a request body: 5.5.1's calls
     * fastjson2's JSON.toJSONBytes(Object, Charset, JSONWriter.Feature...), which the harness's fastjson2 (2.0.43,
     * what 5.3.3 declares; 5.5.1 declares 2.0.63) lacks, and a real broker, name server and client talk through it
     * (5.3.3's goes through fastjson 1.x). Probed with the call itself.
     */
    static String unavailable(String mode) {
        if ("group".equals(mode)) {
            try {
                org.apache.rocketmq.remoting.protocol.RemotingSerializable.encode(new java.util.HashMap<String, String>());
            } catch (LinkageError e) {
                return "RemotingSerializable.encode fails on this build's fastjson2 (" + e
                    + "): the release's remoting needs a newer fastjson2 than the harness's pom pins (2.0.43)";
            }
        }
        return null;
    }

    /** The client's decode of a pull response (PullAPIWrapper.processPullResult, 5.x: decodesBatch). */
    static List<MessageExt> clientDecodes(ByteBuffer response) {
        return MessageDecoder.decodesBatch(response, true, true, true);
    }

    /** The queue offset of each returned message, as GetMessageResult records it (5.x keeps them). */
    static List<Long> queueOffsets(GetMessageResult r, PullRecordingFilter rec, long requestOffset) {
        return r.getMessageQueueOffset();
    }

    /** GetMessageResult.getFilterMessageCount (5.x). */
    static Integer filterMessageCount(GetMessageResult r) {
        return r.getFilterMessageCount();
    }

    /** The consumer group ExpressionForRetryMessageFilter reads from a retry topic (5.x: KeyBuilder.parseGroup). */
    static String retryGroup(String retryTopic) {
        return KeyBuilder.parseGroup(retryTopic);
    }

    /** One step of CommitLog.recoverNormally's walk: checkMessageAndReturnSize(buf, checkCRC, checkDupInfo=false, readBody=true). */
    static DispatchRequest checkMessageAndReturnSize(CommitLog commitLog, ByteBuffer buf, boolean checkCRC) {
        return commitLog.checkMessageAndReturnSize(buf, checkCRC, false, true);
    }
}
