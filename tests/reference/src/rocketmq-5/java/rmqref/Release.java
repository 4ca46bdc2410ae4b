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

    /** Null: every mode runs on the 5.x line. */
    static String unavailable(String mode) {
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
