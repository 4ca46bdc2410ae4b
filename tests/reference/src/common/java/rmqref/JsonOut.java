package rmqref;

import java.io.IOException;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

/**
 * Minimal JSON writer that emits pure ASCII (every non-ASCII UTF-16 unit as a \\uXXXX escape), so lone
 * surrogates and other odd strings reach Python exactly instead of being replaced by an encoder.
 */
final class JsonOut {
    private static final char[] HEX = "0123456789abcdef".toCharArray();

    private JsonOut() {
    }

    /** Writes {@code value} as JSON to {@code path} (ASCII, hence also valid UTF-8). */
    static void write(Path path, Object value) throws IOException {
        StringBuilder sb = new StringBuilder(1 << 16);
        append(sb, value);
        sb.append('\n');
        Files.write(path, sb.toString().getBytes(StandardCharsets.US_ASCII));
    }

    /** Appends one JSON value: Map (string keys), List, int[], String, Boolean, integral or decimal Number, null. */
    static void append(StringBuilder sb, Object v) {
        if (v == null) {
            sb.append("null");
        } else if (v instanceof String) {
            appendString(sb, (String) v);
        } else if (v instanceof Boolean) {
            sb.append(((Boolean) v).booleanValue() ? "true" : "false");
        } else if (v instanceof Integer || v instanceof Long || v instanceof Short || v instanceof Byte
                || v instanceof BigInteger) {
            sb.append(v.toString());
        } else if (v instanceof BigDecimal) {
            sb.append(((BigDecimal) v).toString());
        } else if (v instanceof Double || v instanceof Float) {
            double d = ((Number) v).doubleValue();
            if (Double.isNaN(d) || Double.isInfinite(d)) {
                throw new IllegalArgumentException("JSON cannot carry " + d);
            }
            sb.append(v.toString());
        } else if (v instanceof Map) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (!first) {
                    sb.append(',');
                }
                first = false;
                appendString(sb, String.valueOf(e.getKey()));
                sb.append(':');
                append(sb, e.getValue());
            }
            sb.append('}');
        } else if (v instanceof List) {
            sb.append('[');
            boolean first = true;
            for (Object o : (List<?>) v) {
                if (!first) {
                    sb.append(',');
                }
                first = false;
                append(sb, o);
            }
            sb.append(']');
        } else if (v instanceof int[]) {
            int[] a = (int[]) v;
            sb.append('[');
            for (int i = 0; i < a.length; i++) {
                if (i > 0) {
                    sb.append(',');
                }
                sb.append(a[i]);
            }
            sb.append(']');
        } else {
            throw new IllegalArgumentException("cannot write " + v.getClass().getName() + " as JSON");
        }
    }

    /** Appends a JSON string literal, escaping quotes, backslashes, controls and every char above 0x7E. */
    static void appendString(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                sb.append('\\').append(c);
            } else if (c >= 0x20 && c < 0x7f) {
                sb.append(c);
            } else {
                sb.append("\\u").append(HEX[(c >> 12) & 15]).append(HEX[(c >> 8) & 15])
                        .append(HEX[(c >> 4) & 15]).append(HEX[c & 15]);
            }
        }
        sb.append('"');
    }
}
