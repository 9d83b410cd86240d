// The JSON record writer shared by our Java test programs (ApacheClient, LifecycleClient,
// SecureClient, ValuesClient); tests/support/apache/maven.py and values.py compile it beside
// each of them.
//
// Input:  the values a program records: maps, lists, strings, numbers, booleans, null, the
//         Java client's MessageIds, byte arrays (as hex), and JSON text made elsewhere (Raw).
// Output: JSON text (`json`), the forms of a record's parts (`id`, `batchId`, `hex`, `opt`,
//         `entry`, `clientVersion`), and the record file (`write`).
// Rule:   a map's keys keep the map's own order (a LinkedHashMap's insertion order, a
//         TreeMap's sorted order); a string is quoted with '"' and '\' escaped and every
//         control character as \\uXXXX, everything else as is (UTF-8 in the file); any other
//         object is the string of its toString(). A MessageId is {"ledger_id", "entry_id",
//         "partition"} (and "first_chunk", the id of a chunked message's first chunk), or
//         {"text"} when the client gives no position (a chunked message's id); batchId adds
//         "batch_index" and "batch_size" (null when the message is not in a batch). The record
//         is written to OUT.tmp, then renamed to OUT, so that OUT exists only when complete.
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageIdAdv;
import org.apache.pulsar.client.api.PulsarClient;

final class Json {
    private Json() {}

    /** JSON text made elsewhere, written as is. */
    record Raw(String text) {}

    /** Maps, lists, strings, numbers, booleans, null and Raw text as JSON text. */
    static String json(Object value) {
        if (value == null || value instanceof Number || value instanceof Boolean) {
            return String.valueOf(value);
        }
        if (value instanceof Raw raw) {
            return raw.text();
        }
        if (value instanceof Map<?, ?> map) {
            List<String> items = new ArrayList<>();
            map.forEach((k, v) -> items.add(str(String.valueOf(k)) + ": " + json(v)));
            return "{" + String.join(", ", items) + "}";
        }
        if (value instanceof List<?> list) {
            List<String> items = new ArrayList<>();
            list.forEach(v -> items.add(json(v)));
            return "[" + String.join(",\n ", items) + "]";
        }
        return str(value.toString());
    }

    /** A string as JSON text ("null" for null). */
    static String str(String text) {
        if (text == null) {
            return "null";
        }
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }

    /** Bytes as lowercase hex, two digits a byte. */
    static String hex(byte[] bytes) {
        StringBuilder out = new StringBuilder(bytes.length * 2);
        for (byte b : bytes) {
            out.append(String.format("%02x", b & 0xff));
        }
        return out.toString();
    }

    /** An optional number: its value, or null. */
    static Long opt(Optional<Long> value) {
        return value.orElse(null);
    }

    /** A map of the keys and values given in turn (key1, value1, key2, value2...), in order. */
    static Map<String, Object> entry(Object... kv) {
        Map<String, Object> e = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            e.put((String) kv[i], kv[i + 1]);
        }
        return e;
    }

    /** A MessageId's position (the header says the form); null for null. */
    static Map<String, Object> id(MessageId id) {
        if (id == null) {
            return null;
        }
        if (!(id instanceof MessageIdAdv adv)) {
            return entry("text", id.toString());
        }
        Map<String, Object> e = entry("ledger_id", adv.getLedgerId(),
                "entry_id", adv.getEntryId(), "partition", adv.getPartitionIndex());
        if (adv.getFirstChunkMessageId() != null) {
            e.put("first_chunk", id(adv.getFirstChunkMessageId()));
        }
        return e;
    }

    /** `id`, with the message's index in its batch and the batch's size (null, null if none). */
    static Map<String, Object> batchId(MessageId id) {
        Map<String, Object> e = id(id);
        MessageIdAdv adv = (MessageIdAdv) id;
        boolean batched = adv.getBatchIndex() >= 0;
        e.put("batch_index", batched ? adv.getBatchIndex() : null);
        e.put("batch_size", batched ? adv.getBatchSize() : null);
        return e;
    }

    /** The version of the Java client on the class path (null if its jar does not say). */
    static String clientVersion() {
        Package pkg = PulsarClient.class.getPackage();
        return pkg == null ? null : pkg.getImplementationVersion();
    }

    /** Write `record` as JSON (and a newline) to `out`, atomically (the header says how). */
    static void write(String out, Object record) throws java.io.IOException {
        Path path = Path.of(out);
        Path tmp = path.resolveSibling(path.getFileName() + ".tmp");
        Files.writeString(tmp, json(record) + "\n", StandardCharsets.UTF_8);
        Files.move(tmp, path);
    }
}
