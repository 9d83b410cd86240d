// A Shared consumer of the official Java client with a small receiver queue, fed batches
// then single messages: the run tests/test_apache_permit_leak.py records through a proxy
// that may corrupt a batch in flight (apache/pulsar#26336: the client returns 1 permit for
// a batch that failed its checksum).
//
// Input:  argv = SERVICE_URL TOPIC SUBSCRIPTION BATCHES BATCH_SIZE SINGLES QUEUE OUT_JSON.
//         A Shared consumer (receiverQueueSize QUEUE, acknowledgments sent at once) is
//         subscribed first; then a batching producer sends BATCHES batches of BATCH_SIZE
//         messages (cut by count only, each flushed when full), and a producer without
//         batching SINGLES messages; then the consumer receives and acknowledges each
//         message until none comes for 5 s.
// Output: OUT_JSON (written by Json.java): {"client_version", "queue", "batch_size",
//         "sent": [{"producer", "sequence_id", "batched", "message_id"}],
//         "received": [{"producer", "sequence_id", "message_id"}]} (message ids with their
//         batch index and size, Json.batchId).
// Rule:   nothing here reads the capture; a message sent and never received is one the
//         client discarded (the proxy's corruption), as its record shows.

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;

public class LeakClient {
    public static void main(String[] args) throws Exception {
        String url = args[0], topic = args[1], subscription = args[2];
        int batches = Integer.parseInt(args[3]), batchSize = Integer.parseInt(args[4]);
        int singles = Integer.parseInt(args[5]), queue = Integer.parseInt(args[6]);
        List<Object> sent = new ArrayList<>(), received = new ArrayList<>();
        try (PulsarClient client = PulsarClient.builder().serviceUrl(url).build()) {
            Consumer<byte[]> consumer = client.newConsumer().topic(topic)
                    .subscriptionName(subscription).subscriptionType(SubscriptionType.Shared)
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                    .receiverQueueSize(queue).acknowledgmentGroupTime(0, TimeUnit.MILLISECONDS)
                    .subscribe();
            Producer<byte[]> batched = client.newProducer().topic(topic)
                    .producerName("leak-batched").enableBatching(true)
                    .batchingMaxMessages(batchSize).batchingMaxPublishDelay(1, TimeUnit.HOURS)
                    .create();
            for (int b = 0; b < batches; b++) {
                List<CompletableFuture<MessageId>> futures = new ArrayList<>();
                for (int j = 0; j < batchSize; j++) {
                    int i = b * batchSize + j;
                    futures.add(batched.newMessage().sequenceId(i)
                            .value(("batched " + i).getBytes()).sendAsync());
                }
                batched.flush();
                for (int j = 0; j < batchSize; j++) {
                    sent.add(sentEntry("leak-batched", b * batchSize + j, true,
                            futures.get(j).get(30, TimeUnit.SECONDS)));
                }
            }
            Producer<byte[]> single = client.newProducer().topic(topic)
                    .producerName("leak-single").enableBatching(false).create();
            for (int i = 0; i < singles; i++) {
                MessageId id = single.newMessage().sequenceId(i)
                        .value(("single " + i).getBytes()).send();
                sent.add(sentEntry("leak-single", i, false, id));
            }
            while (true) {
                Message<byte[]> msg = consumer.receive(5, TimeUnit.SECONDS);
                if (msg == null) {
                    break;
                }
                consumer.acknowledge(msg);
                received.add(Json.entry("producer", msg.getProducerName(),
                        "sequence_id", msg.getSequenceId(),
                        "message_id", Json.batchId(msg.getMessageId())));
            }
            batched.close();
            single.close();
            consumer.close();
        }
        Map<String, Object> record = Json.entry("client", "java",
                "client_version", Json.clientVersion(), "topic", topic, "queue", queue,
                "batch_size", batchSize, "sent", sent, "received", received);
        Json.write(args[7], record);
    }

    static Map<String, Object> sentEntry(String producer, long seq, boolean batched,
            MessageId id) {
        return Json.entry("producer", producer, "sequence_id", seq, "batched", batched,
                "message_id", Json.batchId(id));
    }
}
