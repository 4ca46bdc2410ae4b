package rmqref;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.CommitLog;
import org.apache.rocketmq.store.DispatchRequest;
import org.apache.rocketmq.store.GetMessageResult;

/**
 * The 4.9 line's answers to the calls whose signature or behaviour differs between release lines (the 5.x tree has
 * a class of the same name). Everything here is a direct call of 4.9.7's own code, or (queueOffsets) bookkeeping
 * 4.9's GetMessageResult does not do.
 */
final class Release {
    /** Which source line this build is (src/rocketmq-5 or src/rocketmq-4.9). */
    static final String LINE = "4.9";

    /**
     * ExpressionForRetryMessageFilter.isMatchedByCommitLog (4.9.7): on a retry topic it looks the original topic's
     * filter data up and evaluates it for TAG subscriptions too (`!isRetryTopic && isTagType` is its only early
     * return for TAG), so a TAG subscription to %RETRY%group is filtered by the group's SQL92 filter on the original
     * topic. 5.x returns true for every TAG subscription.
     */
    static final boolean RETRY_FILTER_EVALUATES_TAG_SUBSCRIPTIONS = true;

    /**
     * SendMessageProcessor.asyncSendMessage (4.9.7): a producer's WAIT property is left out of the stored
     * properties string (and kept in the message's map).
     */
    static final boolean SEND_STORES_WAIT_PROPERTY = false;

    private Release() {
    }

    /** Why a mode cannot run on 4.9.7, or null. */
    static String unavailable(String mode) {
        if ("rebuild".equals(mode)) {
            return "4.9.7's CommitLog.recoverNormally does not dispatch: DefaultMessageStore.load() only truncates, "
                + "the consume queues are rebuilt by the reput thread in start(), which polls dispatchBehindBytes() "
                + "every 1000 ms, so there is no synchronous rebuild for the mode to time";
        }
        return null;
    }

    /**
     * The client's decode of a pull response: PullAPIWrapper.processPullResult (4.9.7) calls
     * MessageDecoder.decodes(byteBuffer), i.e. clientDecode(readBody=true) = decode(buf, true, deCompressBody=true,
     * isClient=true) record after record until one returns null.
     */
    static List<MessageExt> clientDecodes(ByteBuffer response) {
        return MessageDecoder.decodes(response);
    }

    /**
     * 4.9.7's GetMessageResult keeps no queue offsets: each returned message is the unit whose commit log check
     * accepted it (getMessage adds exactly those, in order), at requestOffset + its index among the units the call
     * examined (the recording filter sees every examined unit; 4.9's loop skips units without a filter call only
     * after a commit log file was removed).
     */
    static List<Long> queueOffsets(GetMessageResult r, PullRecordingFilter rec, long requestOffset) {
        List<Long> out = new ArrayList<>(rec.returnedUnits.size());
        for (int k : rec.returnedUnits) {
            out.add(requestOffset + k);
        }
        if (out.size() != r.getMessageBufferList().size()) {
            throw new IllegalStateException("getMessage returned " + r.getMessageBufferList().size()
                + " messages but the filter accepted " + out.size());
        }
        return out;
    }

    /** 4.9.7's GetMessageResult has no filterMessageCount. */
    static Integer filterMessageCount(GetMessageResult r) {
        return null;
    }

    /** The consumer group ExpressionForRetryMessageFilter reads from a retry topic (4.9.7: the text after %RETRY%). */
    static String retryGroup(String retryTopic) {
        return retryTopic.substring(MixAll.RETRY_GROUP_TOPIC_PREFIX.length());
    }

    /**
     * One step of CommitLog.recoverNormally's walk: 4.9.7 calls checkMessageAndReturnSize(buf, checkCRCOnRecover),
     * i.e. (buf, checkCRC, readBody=true); there is no checkDupInfo.
     */
    static DispatchRequest checkMessageAndReturnSize(CommitLog commitLog, ByteBuffer buf, boolean checkCRC) {
        return commitLog.checkMessageAndReturnSize(buf, checkCRC, true);
    }
}
