// The reference client's side of the lifecycle and dispatch tests against the Apache broker
// (tests/support/apache/lifecycle.py runs it; tests/test_apache_errors.py and
// tests/test_apache_dispatch.py read its record).
//
// Input:  argv = SERVICE_URL WEB_URL PREFIX SCENARIO[,SCENARIO...] OUT_JSON. Each scenario
//         uses its own topic, persistent://public/default/PREFIX-SCENARIO, except those of a
//         namespace of their own, persistent://public/PREFIX-SCENARIO/t (topic_not_found,
//         not_allowed), which the caller creates with its policies before the run; the
//         caller also creates PREFIX-partitioned (3 partitions) and terminates
//         PREFIX-terminated_producer. The admin calls made during a scenario (terminate,
//         unload) go to WEB_URL.
// Output: OUT_JSON (written by Json.java), {"client_version", "scenarios": {SCENARIO: its
//         record}}: what this client saw, in its own words: the exceptions it got (class and message), the message ids
//         the broker gave back and delivered (with partition, redelivery count, key and the
//         consumer that got each), the consumer event listener's becameActive/becameInactive
//         calls, the reachedEndOfTopic callback, the admin answers, the schemas its
//         producers declared (type and name, as their SchemaInfo says).
// Rule:   every scenario runs in a PulsarClient of its own (its own connection), one after
//         the other, and closes everything before the next; waits are for events (a
//         callback, a message), bounded by WAIT seconds; an unexpected failure exits
//         non-zero. Producers do not batch, so one message is one SEND and one MESSAGE.
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.ConsumerBuilder;
import org.apache.pulsar.client.api.ConsumerEventListener;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageListener;
import org.apache.pulsar.client.api.MessageRoutingMode;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.ProducerAccessMode;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;

public final class LifecycleClient {
    static final long WAIT = 60;
    static String url, web, prefix;

    private LifecycleClient() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: LifecycleClient URL WEB_URL PREFIX SCENARIOS OUT");
            System.exit(2);
        }
        url = args[0];
        web = args[1];
        prefix = args[2];
        Map<String, Object> scenarios = new LinkedHashMap<>();
        for (String name : args[3].split(",")) {
            try (PulsarClient client = PulsarClient.builder().serviceUrl(url).build()) {
                scenarios.put(name, run(name, client));
            }
        }
        Json.write(args[4], Json.entry("client_version", Json.clientVersion(),
                "scenarios", scenarios));
    }

    static Map<String, Object> run(String name, PulsarClient client) throws Exception {
        Map<String, Object> r = new LinkedHashMap<>();
        String topic = name.equals("topic_not_found") || name.equals("not_allowed")
                ? "persistent://public/" + prefix + "-" + name + "/t"
                : "persistent://public/default/" + prefix + "-" + name;
        r.put("topic", topic);
        switch (name) {
            case "producer_busy" -> {
                Producer<byte[]> first = client.newProducer().topic(topic)
                        .producerName("busy-p").enableBatching(false).create();
                r.put("same_name", failure(() -> client.newProducer().topic(topic)
                        .producerName("busy-p").create()));
                first.close();
                String exclusive = topic + "-exclusive";
                r.put("exclusive_topic", exclusive);
                Producer<byte[]> holder = client.newProducer().topic(exclusive)
                        .producerName("holder").accessMode(ProducerAccessMode.Exclusive)
                        .create();
                r.put("exclusive", failure(() -> client.newProducer().topic(exclusive)
                        .producerName("fenced").accessMode(ProducerAccessMode.Exclusive)
                        .create()));
                holder.close();
            }
            case "consumer_busy" -> {
                Consumer<byte[]> first = subscribe(client, topic, "busy-sub",
                        SubscriptionType.Exclusive).consumerName("busy-a").subscribe();
                r.put("second", failure(() -> subscribe(client, topic, "busy-sub",
                        SubscriptionType.Exclusive).consumerName("busy-b").subscribe()));
                first.close();
            }
            case "topic_not_found", "terminated_producer" -> r.put("producer",
                    failure(() -> client.newProducer().topic(topic).producerName("nf").create()));
            case "incompatible_schema" -> {
                r.put("schemas", Json.entry("strings", schemaOf(Schema.STRING),
                        "longs", schemaOf(Schema.INT64)));
                Producer<String> first = client.newProducer(Schema.STRING).topic(topic)
                        .producerName("strings").create();
                r.put("int64", failure(() -> client.newProducer(Schema.INT64).topic(topic)
                        .producerName("longs").create()));
                first.close();
            }
            case "not_allowed" -> r.put("shared", failure(() -> subscribe(client, topic,
                    "not-allowed-sub", SubscriptionType.Shared).consumerName("na-c").subscribe()));
            case "terminate" -> terminate(client, topic, r);
            case "unload" -> unload(client, topic, r);
            case "failover" -> failover(client, topic, r);
            case "key_shared" -> keyShared(client, topic, r);
            case "partitioned" -> partitioned(client, topic, r);
            case "seek" -> seek(client, topic, r);
            case "nack", "ack_timeout" -> redeliver(client, topic, name, r);
            default -> throw new IllegalArgumentException("no scenario " + name);
        }
        return r;
    }

    /** Producer and consumer open; the topic terminated by the admin API; the consumer's
     * reachedEndOfTopic, then a send on the producer. */
    static void terminate(PulsarClient client, String topic, Map<String, Object> r)
            throws Exception {
        CountDownLatch end = new CountDownLatch(1), got = new CountDownLatch(2);
        List<Object> received = Collections.synchronizedList(new ArrayList<>());
        Consumer<byte[]> consumer = subscribe(client, topic, "end-sub", SubscriptionType.Exclusive)
                .consumerName("end-c").messageListener(new MessageListener<byte[]>() {
                    public void received(Consumer<byte[]> c, Message<byte[]> msg) {
                        received.add(delivery(c, msg));
                        c.acknowledgeAsync(msg);
                        got.countDown();
                    }

                    public void reachedEndOfTopic(Consumer<byte[]> c) {
                        end.countDown();
                    }
                }).subscribe();
        Producer<byte[]> producer = producer(client, topic, "end-p");
        List<Object> sent = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            sent.add(Json.id(producer.newMessage().sequenceId(i).value(bytes(i)).send()));
        }
        await(got, "both messages");
        r.put("sent", sent);
        r.put("received", received);
        r.put("terminate_answer", admin("POST", topic, "/terminate"));
        r.put("reached_end_callback", end.await(WAIT, TimeUnit.SECONDS));
        r.put("has_reached_end", consumer.hasReachedEndOfTopic());
        r.put("send_after", failure(() -> producer.send(bytes(2))));
        producer.close();
        consumer.close();
    }

    /** Producer and consumer open, one message each way; the topic unloaded by the admin
     * API; a second message sent, and received (after whatever the broker redelivers) once
     * both have reconnected. */
    static void unload(PulsarClient client, String topic, Map<String, Object> r)
            throws Exception {
        Consumer<byte[]> consumer = subscribe(client, topic, "unload-sub",
                SubscriptionType.Exclusive).consumerName("unload-c").subscribe();
        Producer<byte[]> producer = producer(client, topic, "unload-p");
        List<Object> sent = new ArrayList<>(), received = new ArrayList<>();
        sent.add(Json.id(producer.newMessage().sequenceId(0).value(bytes(0)).send()));
        received.add(receiveAck(consumer));
        r.put("unload_answer", admin("PUT", topic, "/unload"));
        sent.add(Json.id(producer.newMessage().sequenceId(1).value(bytes(1)).send()));
        received.addAll(receiveUntil(consumer, 1));
        r.put("sent", sent);
        r.put("received", received);
        r.put("producer_disconnected_ms", producer.getLastDisconnectedTimestamp());
        r.put("consumer_disconnected_ms", consumer.getLastDisconnectedTimestamp());
        producer.close();
        consumer.close();
    }

    /** Two consumers on a Failover subscription; the active one closed, the other takes
     * over; every listener call recorded in order. */
    static void failover(PulsarClient client, String topic, Map<String, Object> r)
            throws Exception {
        List<Object> events = Collections.synchronizedList(new ArrayList<>());
        Map<String, CountDownLatch> heard = Map.of("fo-a", new CountDownLatch(1),
                "fo-b", new CountDownLatch(1));
        Map<String, CountDownLatch> active = Map.of("fo-a", new CountDownLatch(1),
                "fo-b", new CountDownLatch(1));
        Map<String, Consumer<byte[]>> consumers = new LinkedHashMap<>();
        for (String name : List.of("fo-a", "fo-b")) {
            ConsumerEventListener listener = new ConsumerEventListener() {
                public void becameActive(Consumer<?> c, int partition) {
                    events.add(Map.of("consumer", name, "active", true, "partition", partition));
                    heard.get(name).countDown();
                    active.get(name).countDown();
                }

                public void becameInactive(Consumer<?> c, int partition) {
                    events.add(Map.of("consumer", name, "active", false, "partition", partition));
                    heard.get(name).countDown();
                }
            };
            consumers.put(name, subscribe(client, topic, "fo-sub", SubscriptionType.Failover)
                    .consumerName(name).consumerEventListener(listener).subscribe());
            await(heard.get(name), name + "'s first listener call");
        }
        String first = active.get("fo-a").getCount() == 0 ? "fo-a" : "fo-b";
        String second = first.equals("fo-a") ? "fo-b" : "fo-a";
        await(active.get(first), first + " active");
        r.put("first_active", first);
        r.put("events_before_close", new ArrayList<>(events));
        consumers.get(first).close();
        await(active.get(second), second + " active after " + first + " closed");
        r.put("events", new ArrayList<>(events));
        consumers.get(second).close();
    }

    /** Two consumers on a Key_Shared subscription, then 20 messages of 5 keys: who got what. */
    static void keyShared(PulsarClient client, String topic, Map<String, Object> r)
            throws Exception {
        int total = 20;
        CountDownLatch all = new CountDownLatch(total);
        List<Object> received = Collections.synchronizedList(new ArrayList<>());
        List<Consumer<byte[]>> consumers = new ArrayList<>();
        for (String name : List.of("ks-a", "ks-b")) {
            consumers.add(subscribe(client, topic, "ks-sub", SubscriptionType.Key_Shared)
                    .consumerName(name).messageListener((c, msg) -> {
                        received.add(delivery(c, msg));
                        c.acknowledgeAsync(msg);
                        all.countDown();
                    }).subscribe());
        }
        Producer<byte[]> producer = producer(client, topic, "ks-p");
        List<Object> sent = new ArrayList<>();
        for (int i = 0; i < total; i++) {
            MessageId id = producer.newMessage().sequenceId(i).key("key-" + (i % 5))
                    .value(bytes(i)).send();
            sent.add(Map.of("key", "key-" + (i % 5), "message_id", Json.id(id)));
        }
        await(all, total + " messages");
        r.put("sent", sent);
        r.put("received", new ArrayList<>(received));
        producer.close();
        for (Consumer<byte[]> c : consumers) {
            c.close();
        }
    }

    /** A topic of 3 partitions (made by the caller): 9 messages routed round robin, received
     * by one consumer of the partitioned topic. */
    static void partitioned(PulsarClient client, String topic, Map<String, Object> r)
            throws Exception {
        Consumer<byte[]> consumer = subscribe(client, topic, "part-sub",
                SubscriptionType.Exclusive).consumerName("part-c").subscribe();
        Producer<byte[]> producer = client.newProducer().topic(topic).producerName("part-p")
                .enableBatching(false).messageRoutingMode(MessageRoutingMode.RoundRobinPartition)
                .create();
        List<Object> sent = new ArrayList<>(), received = new ArrayList<>();
        for (int i = 0; i < 9; i++) {
            sent.add(Json.id(producer.newMessage().sequenceId(i).value(bytes(i)).send()));
        }
        for (int i = 0; i < 9; i++) {
            received.add(receiveAck(consumer));
        }
        r.put("sent", sent);
        r.put("received", received);
        producer.close();
        consumer.close();
    }

    /** 5 messages received and acked; seek to the third's id, receive to the last again;
     * seek to the first's publish time, receive to the last again; after each seek, when
     * the client last saw its consumer disconnected (the broker closes it on a seek). */
    static void seek(PulsarClient client, String topic, Map<String, Object> r) throws Exception {
        Consumer<byte[]> consumer = subscribe(client, topic, "seek-sub",
                SubscriptionType.Exclusive).consumerName("seek-c").subscribe();
        Producer<byte[]> producer = producer(client, topic, "seek-p");
        List<MessageId> ids = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            ids.add(producer.newMessage().sequenceId(i).value(bytes(i)).send());
        }
        List<Object> first = new ArrayList<>();
        long firstPublish = 0;
        for (int i = 0; i < 5; i++) {
            Message<byte[]> msg = consumer.receive((int) WAIT, TimeUnit.SECONDS);
            if (i == 0) {
                firstPublish = msg.getPublishTime();
            }
            consumer.acknowledge(msg);
            first.add(delivery(consumer, msg));
        }
        r.put("sent", ids.stream().map(Json::id).toList());
        r.put("received", first);
        consumer.seek(ids.get(2));
        r.put("seek_id", Json.id(ids.get(2)));
        r.put("after_seek_id", receiveUntil(consumer, 4));
        r.put("disconnected_ms_after_seek_id", consumer.getLastDisconnectedTimestamp());
        consumer.seek(firstPublish);
        r.put("seek_timestamp", firstPublish);
        r.put("after_seek_timestamp", receiveUntil(consumer, 4));
        r.put("disconnected_ms_after_seek_timestamp", consumer.getLastDisconnectedTimestamp());
        producer.close();
        consumer.close();
    }

    /** 3 messages on a Shared subscription, not acknowledged (nack: negatively, with a 100 ms
     * delay; ack_timeout: not at all, with a 1 s ack timeout), received again, then acked. */
    static void redeliver(PulsarClient client, String topic, String name, Map<String, Object> r)
            throws Exception {
        ConsumerBuilder<byte[]> builder = subscribe(client, topic, name + "-sub",
                SubscriptionType.Shared).consumerName(name + "-c");
        builder = name.equals("nack")
                ? builder.negativeAckRedeliveryDelay(100, TimeUnit.MILLISECONDS)
                : builder.ackTimeout(1, TimeUnit.SECONDS);
        Consumer<byte[]> consumer = builder.subscribe();
        Producer<byte[]> producer = producer(client, topic, name + "-p");
        List<Object> sent = new ArrayList<>(), first = new ArrayList<>(), again = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            sent.add(Json.id(producer.newMessage().sequenceId(i).value(bytes(i)).send()));
        }
        for (int i = 0; i < 3; i++) {
            Message<byte[]> msg = consumer.receive((int) WAIT, TimeUnit.SECONDS);
            first.add(delivery(consumer, msg));
            if (name.equals("nack")) {
                consumer.negativeAcknowledge(msg);
            }
        }
        for (int i = 0; i < 3; i++) {
            again.add(receiveAck(consumer));
        }
        r.put("sent", sent);
        r.put("received", first);
        r.put("redelivered", again);
        producer.close();
        consumer.close();
    }

    interface Call {
        Object call() throws Exception;
    }

    /** What a call that should fail threw: its class and message (null if it succeeded). */
    /** A schema's type and name as the client declares it (its SchemaInfo). */
    static Map<String, Object> schemaOf(Schema<?> schema) {
        return Json.entry("type", schema.getSchemaInfo().getType().name(),
                "name", schema.getSchemaInfo().getName());
    }

    static Object failure(Call call) {
        try {
            Object made = call.call();
            if (made instanceof AutoCloseable closeable) {
                closeable.close();
            }
            return null;
        } catch (Exception e) {
            Throwable t = e;
            while ((t instanceof ExecutionException || t.getCause() != null
                    && t.getClass().getName().contains("Completion")) && t.getCause() != null) {
                t = t.getCause();
            }
            return Json.entry("class", t.getClass().getSimpleName(), "message", t.getMessage());
        }
    }

    static ConsumerBuilder<byte[]> subscribe(PulsarClient client, String topic, String sub,
            SubscriptionType type) {
        return client.newConsumer().topic(topic).subscriptionName(sub).subscriptionType(type)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest);
    }

    static Producer<byte[]> producer(PulsarClient client, String topic, String name)
            throws Exception {
        return client.newProducer().topic(topic).producerName(name).enableBatching(false)
                .create();
    }

    static Map<String, Object> receiveAck(Consumer<byte[]> consumer) throws Exception {
        Message<byte[]> msg = consumer.receive((int) WAIT, TimeUnit.SECONDS);
        if (msg == null) {
            throw new IllegalStateException("no message in " + WAIT + " s on " + consumer);
        }
        consumer.acknowledge(msg);
        return delivery(consumer, msg);
    }

    /** Receive and ack until the message of sequence id `last`. */
    static List<Object> receiveUntil(Consumer<byte[]> consumer, long last) throws Exception {
        List<Object> got = new ArrayList<>();
        while (true) {
            Map<String, Object> one = receiveAck(consumer);
            got.add(one);
            if (((Long) one.get("sequence_id")) == last) {
                return got;
            }
        }
    }

    static Map<String, Object> delivery(Consumer<?> consumer, Message<byte[]> msg) {
        return Json.entry("consumer", consumer.getConsumerName(), "topic", msg.getTopicName(),
                "key", msg.getKey(), "sequence_id", msg.getSequenceId(),
                "redelivery_count", msg.getRedeliveryCount(),
                "message_id", Json.id(msg.getMessageId()));
    }

    static byte[] bytes(int i) {
        return ("lifecycle message " + i).getBytes(StandardCharsets.UTF_8);
    }

    static void await(CountDownLatch latch, String what) throws InterruptedException {
        if (!latch.await(WAIT, TimeUnit.SECONDS)) {
            throw new IllegalStateException("waited " + WAIT + " s for " + what);
        }
    }

    /** An admin call on `topic` (POST /terminate, PUT /unload): {"status", "body"}. */
    static Map<String, Object> admin(String method, String topic, String action)
            throws Exception {
        String path = "/admin/v2/" + topic.replace("://", "/") + action;
        HttpRequest request = HttpRequest.newBuilder(URI.create(web + path))
                .method(method, HttpRequest.BodyPublishers.noBody())
                .timeout(java.time.Duration.ofSeconds(WAIT)).build();
        HttpResponse<String> answer = HttpClient.newHttpClient()
                .send(request, HttpResponse.BodyHandlers.ofString());
        if (answer.statusCode() >= 300) {
            throw new IllegalStateException(method + " " + path + ": " + answer.statusCode()
                    + " " + answer.body());
        }
        return Map.of("status", answer.statusCode(), "body", answer.body());
    }
}
