package rmqref;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Strict JSON reading on top of fastjson2: UTF-8 input, and string fields must really be JSON strings, so a
 * Python-side typo (a number where a tag was meant) fails loudly instead of being coerced to text.
 */
final class JsonIn {
    private JsonIn() {
    }

    static JSONObject readObject(Path path) throws IOException {
        JSONObject o = JSON.parseObject(new String(Files.readAllBytes(path), StandardCharsets.UTF_8));
        if (o == null) {
            throw new IllegalArgumentException("empty JSON input: " + path);
        }
        return o;
    }

    /** The string at {@code key}: null when absent or JSON null, an error when any other type. */
    static String string(JSONObject o, String key) {
        return asString(o.get(key), key);
    }

    /** The string at index {@code i}: null for JSON null, an error when any other type. */
    static String element(JSONArray a, int i) {
        return asString(a.get(i), "[" + i + "]");
    }

    private static String asString(Object v, String where) {
        if (v != null && !(v instanceof String)) {
            throw new IllegalArgumentException(where + " is not a string: " + v);
        }
        return (String) v;
    }
}
