package rmqref;

import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import org.apache.rocketmq.store.CommitLog;
import org.apache.rocketmq.store.DispatchRequest;

/**
 * `scan` mode: walk each given commitlog file exactly as CommitLog.recoverNormally walks one mapped file, with the
 * real CommitLog.checkMessageAndReturnSize(buffer, checkCRC, false, true) (5.x; 4.9: (buffer, checkCRC, true)).
 *
 * The CommitLog belongs to a DefaultMessageStore built (never loaded, never started) on a scratch root, so its
 * configuration is the default MessageStoreConfig (forceVerifyPropCRC false, the default delay levels). The input
 * files are only ever mapped READ_ONLY.
 */
final class ScanMode {
    private ScanMode() {
    }

    static int run(String in, String out) throws Exception {
        JSONObject req = JsonIn.readObject(Paths.get(in));
        Boolean crc = req.getBoolean("checkCRC");
        if (crc == null) {
            throw new IllegalArgumentException("checkCRC is required");
        }
        JSONArray files = req.getJSONArray("files");
        if (files == null) {
            throw new IllegalArgumentException("files is required");
        }
        Path tmp = Files.createTempDirectory("rmqref-scan");
        try {
            StoreBroker b = new StoreBroker(null, null, tmp.resolve("store"));
            CommitLog commitLog = b.store.getCommitLog();
            JSONArray results = new JSONArray();
            for (int i = 0; i < files.size(); i++) {
                JSONObject f = files.getJSONObject(i);
                String path = JsonIn.string(f, "path");
                if (path == null) {
                    throw new IllegalArgumentException("files[" + i + "].path is required");
                }
                long base = f.getLongValue("base", 0L);
                results.add(walk(commitLog, Paths.get(path), base, crc));
            }
            JSONObject result = new JSONObject();
            result.put("checkCRC", crc);
            result.put("results", results);
            QuickShutdown.run(b.store, b.store::shutdown);
            StoreMode.writeJson(Paths.get(out), result);
        } finally {
            Trees.delete(tmp);
        }
        return 0;
    }

    /** The loop body of recoverNormally for one mapped file (dispatching and file switching left out). */
    private static JSONObject walk(CommitLog commitLog, Path path, long base, boolean checkCRC) throws Exception {
        ByteBuffer byteBuffer;
        long size;
        try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ)) {
            size = ch.size();
            MappedByteBuffer mapped = ch.map(FileChannel.MapMode.READ_ONLY, 0, size);
            byteBuffer = mapped.slice();
        }
        JSONArray records = new JSONArray();
        JSONArray sizes = new JSONArray();
        long mappedFileOffset = 0;
        boolean diverged = false;
        DispatchRequest last;
        Throwable thrown = null;
        while (true) {
            if (byteBuffer.position() != mappedFileOffset) {
                diverged = true;
            }
            try {
                last = Release.checkMessageAndReturnSize(commitLog, byteBuffer, checkCRC);
            } catch (Throwable t) {
                // 4.9.7: `new byte[TOTALSIZE]` of a huge TOTALSIZE throws OutOfMemoryError, which its catch (Exception)
                // lets through: recovery itself would throw (the broker does not start).
                last = null;
                thrown = t;
                break;
            }
            int msgSize = last.getMsgSize();
            if (last.isSuccess() && msgSize > 0) {
                records.add(mappedFileOffset);
                sizes.add(msgSize);
                mappedFileOffset += msgSize;
            } else {
                break;
            }
        }
        String kind;
        if (thrown != null) {
            kind = "error";
        } else if (last.isSuccess()) {
            kind = "blank";
        } else if (mappedFileOffset >= size || zeroFrom(byteBuffer, mappedFileOffset)) {
            kind = "end";
        } else {
            kind = "invalid";
        }
        JSONObject o = new JSONObject();
        o.put("path", path.toString());
        o.put("base", base);
        o.put("size", size);
        o.put("records", records);
        o.put("sizes", sizes);
        o.put("stop", mappedFileOffset);
        o.put("stopSuccess", last == null ? null : last.isSuccess());
        o.put("stopMsgSize", last == null ? null : last.getMsgSize());
        o.put("kind", kind);
        if (thrown != null) {
            o.put("stopError", thrown.getClass().getSimpleName() + ": " + thrown.getMessage());
        }
        o.put("bufferDiverged", diverged);
        return o;
    }

    /** True when every byte of the file from {@code off} on is zero (what a preallocated, unwritten tail holds). */
    private static boolean zeroFrom(ByteBuffer buf, long off) {
        for (long p = off; p < buf.limit(); p++) {
            if (buf.get((int) p) != 0) {
                return false;
            }
        }
        return true;
    }
}
