// The official Java client producing and consuming with each of its schemas
// (tests/support/apache/values.py runs it; tests/test_apache_values.py judges the capture).
//
// Input:  argv = SERVICE_URL TOPIC_PREFIX OUT_JSON; the classes protoc made of values.proto,
//         and Json.java (compiled beside this program: it writes the record).
// Output: OUT_JSON, this client's own record: per case (one topic each, TOPIC_PREFIX-CASE),
//         the schema it declared, every message it sent (producer, sequence id, value, the
//         MessageId the broker gave back) and every message each subscription received
//         (subscription, MessageId, producer, sequence id, key, value, and the schema version
//         bytes Message.getSchemaVersion() gave, as hex). A value is written in a neutral
//         JSON form, from the Java objects themselves: integers and booleans as JSON; FLOAT
//         and DOUBLE as Float/Double.toString text; text as a string; byte[] as hex; Date,
//         Time, Timestamp as getTime() ms; Instant as [epochSecond, nano]; LocalDate as its
//         epoch day; LocalTime as its nano of day; LocalDateTime as [epoch day, nano of day];
//         a KeyValue as {"key", "value"}; a record (POJO or GenericRecord) as an object of
//         its fields; a protobuf message as JsonFormat prints it (proto field names, fields
//         at their default included).
// Rule:   two PulsarClients, so producers and consumers are on connections of their own
//         (the consumers' connection learns schemas by GET_SCHEMA, not from the producers).
//         Per case the subscriptions are made first (Earliest), then the producer sends
//         each value (no batching, sequence ids 0, 1, ...), then every subscription receives
//         every message and acknowledges it. Avro and JSON evolve: a producer with version
//         1 of the record (id, name), then one with version 2 (a field qty added, default
//         7), read by a GenericRecord consumer of version 2 and an AUTO_CONSUME one. Any
//         failure exits non-zero with its reason. The producers' schemas are SchemaDefinitions
//         of the Avro record text (a POJO and a definition cannot both be given): they write
//         the POJOs OrderV1 and OrderV2 by their fields' names.
import com.google.protobuf.ByteString;
import com.google.protobuf.MessageOrBuilder;
import com.google.protobuf.util.JsonFormat;
import java.nio.charset.StandardCharsets;
import java.sql.Time;
import java.sql.Timestamp;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Date;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.schema.Field;
import org.apache.pulsar.client.api.schema.GenericRecord;
import org.apache.pulsar.client.api.schema.SchemaDefinition;
import org.apache.pulsar.common.schema.KeyValue;
import org.apache.pulsar.common.schema.KeyValueEncodingType;
import org.apache.pulsar.common.schema.SchemaInfo;
import org.apache.pulsar.common.schema.SchemaType;
import pulsardissector.values.ValuesProto;

public final class ValuesClient {
    private ValuesClient() {}

    static final String V1_DEF = "{\"type\": \"record\", \"name\": \"Order\", \"fields\": ["
            + "{\"name\": \"id\", \"type\": \"long\"},"
            + " {\"name\": \"name\", \"type\": [\"null\", \"string\"], \"default\": null}]}";
    static final String V2_DEF = "{\"type\": \"record\", \"name\": \"Order\", \"fields\": ["
            + "{\"name\": \"id\", \"type\": \"long\"},"
            + " {\"name\": \"name\", \"type\": [\"null\", \"string\"], \"default\": null},"
            + " {\"name\": \"qty\", \"type\": \"int\", \"default\": 7}]}";

    /** Version 1 of the record: what the first producer writes. */
    public static final class OrderV1 {
        public long id;
        public String name;

        public OrderV1() {}

        OrderV1(long id, String name) {
            this.id = id;
            this.name = name;
        }
    }

    /** Version 2: a field added, with a default. */
    public static final class OrderV2 {
        public long id;
        public String name;
        public int qty;

        public OrderV2() {}

        OrderV2(long id, String name, int qty) {
            this.id = id;
            this.name = name;
            this.qty = qty;
        }
    }

    static final List<Object> CASES = new ArrayList<>();
    static PulsarClient producers;
    static PulsarClient consumers;
    static String prefix;

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: ValuesClient URL TOPIC_PREFIX OUT");
            System.exit(2);
        }
        prefix = args[1];
        try (PulsarClient p = PulsarClient.builder().serviceUrl(args[0]).build();
                PulsarClient c = PulsarClient.builder().serviceUrl(args[0]).build()) {
            producers = p;
            consumers = c;
            byte[] text = "plain text \u00e9".getBytes(StandardCharsets.UTF_8);
            byte[] binary = {0, (byte) 0xff, (byte) 0xfe, 'b', 'i', 'n'};
            plain(List.of(text, binary, new byte[0]));
            simple("BYTES", Schema.BYTES, List.of(text, binary));
            simple("STRING", Schema.STRING, List.of("h\u00e9llo \"q\" \ud83d\ude00", "", "tab\t"));
            simple("BOOLEAN", Schema.BOOL, List.of(true, false));
            simple("INT8", Schema.INT8, List.of((byte) -128, (byte) 0, (byte) 127));
            simple("INT16", Schema.INT16, List.of((short) -32768, (short) 1234, (short) 32767));
            simple("INT32", Schema.INT32, List.of(Integer.MIN_VALUE, -1, Integer.MAX_VALUE));
            simple("INT64", Schema.INT64, List.of(Long.MIN_VALUE, 1L << 40, Long.MAX_VALUE));
            simple("FLOAT", Schema.FLOAT, List.of(0.1f, -3.5f, Float.MAX_VALUE, Float.NaN,
                    Float.NEGATIVE_INFINITY, 1.0e-45f));
            simple("DOUBLE", Schema.DOUBLE, List.of(0.1, -1.0e300, Double.MIN_VALUE,
                    Double.POSITIVE_INFINITY, Double.NaN));
            simple("DATE", Schema.DATE, List.of(new Date(1614834367123L), new Date(-86400001L)));
            simple("TIME", Schema.TIME, List.of(new Time(18367008L), new Time(86399999L)));
            simple("TIMESTAMP", Schema.TIMESTAMP,
                    List.of(new Timestamp(1614834367123L), new Timestamp(0L)));
            simple("INSTANT", Schema.INSTANT, List.of(Instant.ofEpochSecond(1614834367L,
                    123456789), Instant.ofEpochSecond(-1L, 5)));
            simple("LOCAL_DATE", Schema.LOCAL_DATE,
                    List.of(LocalDate.of(2021, 3, 4), LocalDate.of(1969, 12, 31)));
            simple("LOCAL_TIME", Schema.LOCAL_TIME,
                    List.of(LocalTime.of(1, 0, 2, 5), LocalTime.of(23, 59, 59, 999999999)));
            simple("LOCAL_DATE_TIME", Schema.LOCAL_DATE_TIME,
                    List.of(LocalDateTime.of(2021, 3, 4, 5, 6, 7, 100000000),
                            LocalDateTime.of(1900, 1, 1, 0, 0, 0, 1)));
            simple("KV_INLINE", Schema.KeyValue(Schema.INT32, Schema.STRING,
                    KeyValueEncodingType.INLINE),
                    List.of(new KeyValue<>(1, "one"), new KeyValue<>(-2, "two \u00e9")));
            simple("KV_SEPARATED", Schema.KeyValue(Schema.INT32, Schema.STRING,
                    KeyValueEncodingType.SEPARATED),
                    List.of(new KeyValue<>(3, "three"), new KeyValue<>(Integer.MAX_VALUE, "")));
            simple("PROTOBUF", Schema.PROTOBUF(ValuesProto.Order.class), orders());
            simple("PROTOBUF_NATIVE", Schema.PROTOBUF_NATIVE(ValuesProto.Order.class), orders());
            evolve("AVRO", SchemaType.AVRO);
            evolve("JSON", SchemaType.JSON);
        }
        Json.write(args[2], Json.entry("client", "java", "client_version", Json.clientVersion(),
                "prefix", prefix, "cases", CASES));
    }

    static List<ValuesProto.Order> orders() {
        ValuesProto.Order full = ValuesProto.Order.newBuilder().setId((1L << 40) + 1)
                .setCustomer("ann \u00e9").setTotal(12.5).setPaid(true)
                .addAllTags(List.of("a", "b")).setLine(ValuesProto.Line.newBuilder()
                        .setSku("s-1").setQty(3))
                .setKind(ValuesProto.Kind.WHOLESALE)
                .setBlob(ByteString.copyFrom(new byte[] {0, (byte) 0xff, 7})).setCount(-4)
                .build();
        ValuesProto.Order sparse = ValuesProto.Order.newBuilder().setId(-2).setCustomer("bob")
                .build();  // every other field at its default
        return List.of(full, sparse);
    }

    /** A case of one producer and one subscription, both with `schema`. */
    static <T> void simple(String name, Schema<T> schema, List<T> values) throws Exception {
        String topic = prefix + "-" + name.toLowerCase();
        Consumer<T> consumer = subscribe(consumers.newConsumer(schema), topic, "sub");
        Producer<T> producer = producers.newProducer(schema).topic(topic)
                .producerName(name.toLowerCase()).enableBatching(false).create();
        List<Object> sent = new ArrayList<>();
        send(producer, values, 0, sent);
        List<Object> received = receive(consumer, "sub", values.size());
        producer.close();
        consumer.close();
        addCase(name, topic, name, sent, received);
    }

    /** A producer of plain bytes, declaring no schema, and a consumer declaring none. */
    static void plain(List<byte[]> values) throws Exception {
        String topic = prefix + "-none";
        Consumer<byte[]> consumer = subscribe(consumers.newConsumer(), topic, "sub");
        Producer<byte[]> producer = producers.newProducer().topic(topic).producerName("none")
                .enableBatching(false).create();
        List<Object> sent = new ArrayList<>();
        send(producer, values, 0, sent);
        List<Object> received = receive(consumer, "sub", values.size());
        producer.close();
        consumer.close();
        addCase("NONE", topic, null, sent, received);
    }

    /** Version 1 then version 2 of a record schema, read by version 2 and AUTO_CONSUME. */
    static void evolve(String name, SchemaType type) throws Exception {
        String topic = prefix + "-" + name.toLowerCase() + "-evolution";
        Schema<OrderV1> v1 = type == SchemaType.AVRO
                ? Schema.AVRO(SchemaDefinition.<OrderV1>builder().withJsonDef(V1_DEF).build())
                : Schema.JSON(SchemaDefinition.<OrderV1>builder().withJsonDef(V1_DEF).build());
        Schema<OrderV2> v2 = type == SchemaType.AVRO
                ? Schema.AVRO(SchemaDefinition.<OrderV2>builder().withJsonDef(V2_DEF).build())
                : Schema.JSON(SchemaDefinition.<OrderV2>builder().withJsonDef(V2_DEF).build());
        Producer<OrderV1> first = producers.newProducer(v1).topic(topic)
                .producerName(name.toLowerCase() + "-v1").enableBatching(false).create();
        SchemaInfo readerInfo = SchemaInfo.builder().name("Order").type(type)
                .schema(V2_DEF.getBytes(StandardCharsets.UTF_8)).properties(Map.of()).build();
        Consumer<GenericRecord> reader =
                subscribe(consumers.newConsumer(Schema.generic(readerInfo)), topic, "reader-v2");
        Consumer<GenericRecord> auto =
                subscribe(consumers.newConsumer(Schema.AUTO_CONSUME()), topic, "auto");
        List<Object> sent = new ArrayList<>();
        send(first, List.of(new OrderV1(1, "ann"), new OrderV1(2, "b\u00e9")), 0, sent);
        Producer<OrderV2> second = producers.newProducer(v2).topic(topic)
                .producerName(name.toLowerCase() + "-v2").enableBatching(false).create();
        send(second, List.of(new OrderV2(3, "cy", 5), new OrderV2(1L << 40, null, -9)), 0, sent);
        List<Object> received = new ArrayList<>(receive(reader, "reader-v2", 4));
        received.addAll(receive(auto, "auto", 4));
        first.close();
        second.close();
        reader.close();
        auto.close();
        addCase(name, topic, name, sent, received);
    }

    static <T> Consumer<T> subscribe(
            org.apache.pulsar.client.api.ConsumerBuilder<T> builder, String topic, String sub)
            throws Exception {
        return builder.topic(topic).subscriptionName(sub)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
    }

    static <T> void send(Producer<T> producer, List<T> values, long first, List<Object> sent)
            throws Exception {
        for (int i = 0; i < values.size(); i++) {
            long seq = first + i;
            MessageId id = producer.newMessage().sequenceId(seq).value(values.get(i)).send();
            sent.add(Json.entry("producer", producer.getProducerName(), "sequence_id", seq,
                    "value", value(values.get(i)), "message_id", Json.batchId(id)));
        }
    }

    static <T> List<Object> receive(Consumer<T> consumer, String sub, int count)
            throws Exception {
        List<Object> received = new ArrayList<>();
        for (int n = 0; n < count; n++) {
            Message<T> msg = consumer.receive(60, TimeUnit.SECONDS);
            if (msg == null) {
                throw new IllegalStateException(sub + ": received " + n + ", then none in 60 s");
            }
            byte[] version = msg.getSchemaVersion();
            received.add(Json.entry("subscription", sub, "producer", msg.getProducerName(),
                    "sequence_id", msg.getSequenceId(), "key", msg.getKey(),
                    "value", value(msg.getValue()),
                    "schema_version_hex", version == null ? null : Json.hex(version),
                    "message_id", Json.batchId(msg.getMessageId())));
            consumer.acknowledge(msg);
        }
        return received;
    }

    static void addCase(String name, String topic, String declared, List<Object> sent,
            List<Object> received) {
        CASES.add(Json.entry("case", name, "topic", topic, "declared", declared, "sent", sent,
                "received", received));
    }

    /** The neutral JSON form of a value (the header says it), for Json.json. */
    static Object value(Object v) throws Exception {
        if (v == null || v instanceof Boolean || v instanceof Byte || v instanceof Short
                || v instanceof Integer || v instanceof Long) {
            return v;
        }
        if (v instanceof Float || v instanceof Double || v instanceof CharSequence) {
            return v.toString();
        }
        if (v instanceof byte[] bytes) {
            return Json.hex(bytes);
        }
        if (v instanceof Date date) {  // Time and Timestamp are Dates
            return date.getTime();
        }
        if (v instanceof Instant t) {
            return List.of(t.getEpochSecond(), t.getNano());
        }
        if (v instanceof LocalDate d) {
            return d.toEpochDay();
        }
        if (v instanceof LocalTime t) {
            return t.toNanoOfDay();
        }
        if (v instanceof LocalDateTime t) {
            return List.of(t.toLocalDate().toEpochDay(), t.toLocalTime().toNanoOfDay());
        }
        if (v instanceof KeyValue<?, ?> kv) {
            return Json.entry("key", value(kv.getKey()), "value", value(kv.getValue()));
        }
        if (v instanceof OrderV1 o) {
            return Json.entry("id", o.id, "name", o.name);
        }
        if (v instanceof OrderV2 o) {
            return Json.entry("id", o.id, "name", o.name, "qty", o.qty);
        }
        if (v instanceof GenericRecord r) {
            Map<String, Object> fields = new LinkedHashMap<>();
            for (Field f : r.getFields()) {
                fields.put(f.getName(), value(r.getField(f)));
            }
            return fields;
        }
        if (v instanceof MessageOrBuilder m) {
            return new Json.Raw(JsonFormat.printer().preservingProtoFieldNames()
                    .includingDefaultValueFields().omittingInsignificantWhitespace().print(m));
        }
        throw new IllegalArgumentException("no JSON form for " + v.getClass() + ": "
                + Arrays.toString(new Object[] {v}));
    }
}
