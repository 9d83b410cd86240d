// The reference client's side of the Apache broker tests (tests/support/apache/client.py).
//
// Input:  argv = SERVICE_URL TOPIC SUBSCRIPTION SINGLES BATCHES BATCH_SIZE OUT_JSON.
// Output: OUT_JSON (written by Json.java), this client's own record of what it did: every
//         message it sent (the producer, sequence id, key, value bytes as hex, properties and
//         the MessageId the broker gave back) and every message it received (the MessageId,
//         value, properties, sequence id, the broker publish time and index of the broker
//         entry metadata, the redelivery count), each received message acknowledged.
// Rule:   one Exclusive subscription is made first (so nothing is missed), then SINGLES
//         messages are sent one by one by a producer without batching, then BATCHES
//         batches of BATCH_SIZE messages by a batching producer whose batches are cut by
//         count only (the publish delay is an hour; each batch is flushed when full). Each
//         producer numbers its messages 0, 1, ... as their sequence ids (set explicitly); the
//         consumer then receives every message, acknowledging each, and everything is
//         closed before the record is written. Any failure exits non-zero with its reason.
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;

public final class ApacheClient {
    private ApacheClient() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 7) {
            System.err.println(
                    "usage: ApacheClient URL TOPIC SUBSCRIPTION SINGLES BATCHES BATCH_SIZE OUT");
            System.exit(2);
        }
        String url = args[0], topic = args[1], subscription = args[2];
        int singles = Integer.parseInt(args[3]), batches = Integer.parseInt(args[4]);
        int batchSize = Integer.parseInt(args[5]);
        List<Object> sent = new ArrayList<>(), received = new ArrayList<>();
        try (PulsarClient client = PulsarClient.builder().serviceUrl(url).build()) {
            Consumer<byte[]> consumer = client.newConsumer().topic(topic)
                    .subscriptionName(subscription).subscriptionType(SubscriptionType.Exclusive)
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
            Producer<byte[]> single = client.newProducer().topic(topic)
                    .producerName("apache-single").enableBatching(false).create();
            for (int i = 0; i < singles; i++) {
                String key = "k" + (i % 3);
                byte[] value = value("single", i);
                Map<String, String> props = Map.of("i", Integer.toString(i), "kind", "single");
                MessageId id = single.newMessage().sequenceId(i).key(key).value(value)
                        .properties(props).send();
                sent.add(sentEntry("apache-single", i, key, value, props, id, false));
            }
            Producer<byte[]> batched = client.newProducer().topic(topic)
                    .producerName("apache-batched").enableBatching(true)
                    .batchingMaxMessages(batchSize).batchingMaxPublishDelay(1, TimeUnit.HOURS)
                    .create();
            for (int b = 0; b < batches; b++) {
                List<CompletableFuture<MessageId>> futures = new ArrayList<>();
                List<byte[]> values = new ArrayList<>();
                for (int j = 0; j < batchSize; j++) {
                    int i = b * batchSize + j;
                    byte[] value = value("batched", i);
                    values.add(value);
                    futures.add(batched.newMessage().sequenceId(i).key("k" + (i % 3)).value(value)
                            .properties(Map.of("i", Integer.toString(i), "kind", "batched"))
                            .sendAsync());
                }
                batched.flush();
                for (int j = 0; j < batchSize; j++) {
                    int i = b * batchSize + j;
                    MessageId id = futures.get(j).get(60, TimeUnit.SECONDS);
                    sent.add(sentEntry("apache-batched", i, "k" + (i % 3), values.get(j),
                            Map.of("i", Integer.toString(i), "kind", "batched"), id, true));
                }
            }
            for (int n = 0; n < singles + batches * batchSize; n++) {
                Message<byte[]> msg = consumer.receive(60, TimeUnit.SECONDS);
                if (msg == null) {
                    throw new IllegalStateException(
                            "received " + n + " messages, then none in 60 s");
                }
                consumer.acknowledge(msg);
                received.add(receivedEntry(msg));
            }
            single.close();
            batched.close();
            consumer.close();
        }
        Map<String, Object> record = Json.entry("client", "java",
                "client_version", Json.clientVersion(), "topic", topic,
                "subscription", subscription, "subscription_type", "Exclusive",
                "batch_size", batchSize, "sent", sent, "received", received);
        Json.write(args[6], record);
    }

    /** Message i of a producer: text, and for every fifth one bytes that are not UTF-8. */
    static byte[] value(String kind, int i) {
        byte[] text = ("apache " + kind + " message " + i).getBytes(StandardCharsets.UTF_8);
        if (i % 5 != 4) {
            return text;
        }
        byte[] bytes = new byte[text.length + 3];
        System.arraycopy(text, 0, bytes, 0, text.length);
        bytes[text.length] = (byte) 0xff;
        bytes[text.length + 1] = (byte) 0x00;
        bytes[text.length + 2] = (byte) i;
        return bytes;
    }

    static Map<String, Object> sentEntry(String producer, long seq, String key, byte[] value,
            Map<String, String> props, MessageId id, boolean batched) {
        return Json.entry("producer", producer, "sequence_id", seq, "key", key,
                "batched", batched, "value_hex", Json.hex(value),
                "properties", new TreeMap<>(props), "message_id", Json.batchId(id));
    }

    static Map<String, Object> receivedEntry(Message<byte[]> msg) {
        return Json.entry("producer", msg.getProducerName(),
                "sequence_id", msg.getSequenceId(), "key", msg.getKey(),
                "value_hex", Json.hex(msg.getData()),
                "properties", new TreeMap<>(msg.getProperties()),
                "publish_time", msg.getPublishTime(),
                "broker_publish_time", Json.opt(msg.getBrokerPublishTime()),
                "index", Json.opt(msg.getIndex()),
                "redelivery_count", msg.getRedeliveryCount(), "acked", true,
                "message_id", Json.batchId(msg.getMessageId()));
    }
}
