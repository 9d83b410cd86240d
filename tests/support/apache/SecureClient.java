// The official Java client against the secured Apache broker (tests/support/apache/secure.py).
//
// Input:  argv = MODE URL TOPIC SECRET_B64 ROLE LIFETIME_S TRUST_CERT OUT_JSON. SECRET_B64 is
//         the broker's HS256 token secret (base64), ROLE the tokens' subject, LIFETIME_S their
//         lifetime in seconds (0: no expiry), TRUST_CERT the CA file for pulsar+ssl ("-": none).
//         MODE is one of:
//         refresh  tokens that expire after LIFETIME_S; one message is sent, then one more
//                  after each new token the broker made the client fetch (AUTH_CHALLENGE),
//                  until REFRESHES new tokens were handed out; every message is consumed.
//         denied   a producer then a consumer on TOPIC: each attempt's outcome is recorded.
//         plain    PLAIN messages produced and consumed.
//         txn      transactions: txn 1 sends two messages and commits; the consumer gets
//                  them; txn 2 acknowledges the first and sends a third, and aborts.
//         chunk    a chunking producer sends a CHUNK_BYTES message, which is consumed; then a
//                  producer without chunking tries the same message.
// Output: OUT_JSON (written by Json.java), this client's own record: "mode", "topic", "role",
//         "client_version", "tokens" (every token the supplier made: its number, when, its
//         expiry, the supplier call that made it, its text), "sent" (producer name, sequence
//         id, sha256 and size of the value, message id, txn, when), "received" (message id,
//         producer, sequence id, sha256, size), "acks" (message id, txn), "txns" (most/least
//         bits, outcome), "attempts" (what was tried, ok or the exception's class and
//         message).
// Rule:   tokens are JWTs signed with HS256 here (role in "sub", expiry in "exp"); the
//         supplier hands out its current token until it expires, then makes a new one (as a
//         real token source does). Waits are for events (a new
//         token, a message), each bounded by WAIT_S. Everything is closed before the record
//         is written; an unexpected failure exits non-zero with its reason.
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import org.apache.pulsar.client.api.AuthenticationFactory;
import org.apache.pulsar.client.api.ClientBuilder;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.transaction.Transaction;
import org.apache.pulsar.client.api.transaction.TxnID;

public final class SecureClient {
    static final int REFRESHES = 2, PLAIN = 3, CHUNK_BYTES = 200 * 1024, WAIT_S = 60;
    static final List<Object> tokens = new ArrayList<>();
    static final List<Object> sent = new ArrayList<>(), received = new ArrayList<>();
    static final List<Object> acks = new ArrayList<>(), txns = new ArrayList<>();
    static final List<Object> attempts = new ArrayList<>();
    static String current;
    static Long currentExp;
    static int calls;

    private SecureClient() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 8) {
            System.err.println("usage: SecureClient MODE URL TOPIC SECRET ROLE LIFETIME CERT OUT");
            System.exit(2);
        }
        String mode = args[0], url = args[1], topic = args[2], role = args[4];
        byte[] secret = Base64.getDecoder().decode(args[3]);
        long lifetime = Long.parseLong(args[5]);
        Supplier<String> supplier = () -> token(secret, role, lifetime);
        ClientBuilder builder = PulsarClient.builder().serviceUrl(url)
                .authentication(AuthenticationFactory.token(supplier))
                .operationTimeout(WAIT_S, TimeUnit.SECONDS)
                .enableTransaction(mode.equals("txn"));
        if (!args[6].equals("-")) {
            builder.tlsTrustCertsFilePath(args[6]);
        }
        try (PulsarClient client = builder.build()) {
            switch (mode) {
                case "refresh" -> refresh(client, topic);
                case "denied" -> denied(client, topic);
                case "plain" -> plain(client, topic);
                case "txn" -> txn(client, topic);
                case "chunk" -> chunk(client, topic);
                default -> throw new IllegalArgumentException("no mode " + mode);
            }
        }
        Json.write(args[7], Json.entry("mode", mode, "topic", topic, "role", role,
                "client_version", Json.clientVersion(), "tokens", tokens, "sent", sent,
                "received", received, "acks", acks, "txns", txns, "attempts", attempts));
    }

    /** The supplier: the current token while it has not expired, else a new one (recorded).
     *  The client asks for one at CONNECT and for each AUTH_CHALLENGE (twice each time). */
    static String token(byte[] secret, String role, long lifetime) {
        long now = System.currentTimeMillis();
        synchronized (tokens) {
            calls++;
            if (current != null && (currentExp == null || now / 1000 < currentExp)) {
                return current;
            }
            Map<String, Object> claims = new LinkedHashMap<>();
            claims.put("sub", role);
            currentExp = lifetime > 0 ? now / 1000 + lifetime : null;
            if (currentExp != null) {
                claims.put("exp", currentExp);
            }
            Base64.Encoder b64 = Base64.getUrlEncoder().withoutPadding();
            String signing = b64.encodeToString(
                    "{\"alg\":\"HS256\"}".getBytes(StandardCharsets.UTF_8))
                    + "." + b64.encodeToString(
                            Json.json(claims).getBytes(StandardCharsets.UTF_8));
            try {
                Mac mac = Mac.getInstance("HmacSHA256");
                mac.init(new SecretKeySpec(secret, "HmacSHA256"));
                current = signing + "." + b64.encodeToString(
                        mac.doFinal(signing.getBytes(StandardCharsets.UTF_8)));
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
            tokens.add(Json.entry("n", tokens.size() + 1, "issued_ms", now, "exp", currentExp,
                    "call", calls, "token", current));
            tokens.notifyAll();
            return current;
        }
    }

    static int tokenCount() {
        synchronized (tokens) {
            return tokens.size();
        }
    }

    /** Wait for a token after the first `seen` (an AUTH_CHALLENGE answered), bounded. */
    static void awaitToken(int seen) throws InterruptedException {
        long deadline = System.currentTimeMillis() + WAIT_S * 1000L;
        synchronized (tokens) {
            while (tokens.size() <= seen) {
                long left = deadline - System.currentTimeMillis();
                if (left <= 0) {
                    throw new IllegalStateException("no new token in " + WAIT_S + " s");
                }
                tokens.wait(left);
            }
        }
    }

    static Consumer<byte[]> subscribe(PulsarClient client, String topic) throws Exception {
        return client.newConsumer().topic(topic).subscriptionName("secure-sub")
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
    }

    static void refresh(PulsarClient client, String topic) throws Exception {
        Consumer<byte[]> consumer = subscribe(client, topic);
        Producer<byte[]> producer = client.newProducer().topic(topic).producerName("refresh")
                .enableBatching(false).create();
        int first = tokenCount();
        for (int i = 0; i <= REFRESHES; i++) {
            if (i > 0) {
                awaitToken(first + i - 1);
            }
            byte[] value = ("after token " + tokenCount()).getBytes(StandardCharsets.UTF_8);
            send(producer, value, i, null, Json.entry("token_n", tokenCount()));
        }
        receive(consumer, REFRESHES + 1, true);
        producer.close();
        consumer.close();
    }

    static void denied(PulsarClient client, String topic) {
        try {
            client.newProducer().topic(topic).producerName("denied").create().close();
            attempts.add(Json.entry("what", "producer", "ok", true));
        } catch (Exception e) {
            attempts.add(failure("producer", e));
        }
        try {
            subscribe(client, topic).close();
            attempts.add(Json.entry("what", "consumer", "ok", true));
        } catch (Exception e) {
            attempts.add(failure("consumer", e));
        }
    }

    static void plain(PulsarClient client, String topic) throws Exception {
        Consumer<byte[]> consumer = subscribe(client, topic);
        Producer<byte[]> producer = client.newProducer().topic(topic).producerName("plain")
                .enableBatching(false).create();
        for (int i = 0; i < PLAIN; i++) {
            send(producer, ("plain " + i).getBytes(StandardCharsets.UTF_8), i, null, null);
        }
        receive(consumer, PLAIN, true);
        producer.close();
        consumer.close();
    }

    static void txn(PulsarClient client, String topic) throws Exception {
        Consumer<byte[]> consumer = subscribe(client, topic);
        Producer<byte[]> producer = client.newProducer().topic(topic).producerName("txn")
                .enableBatching(false).sendTimeout(0, TimeUnit.SECONDS).create();
        Transaction one = client.newTransaction().withTransactionTimeout(5, TimeUnit.MINUTES)
                .build().get(WAIT_S, TimeUnit.SECONDS);
        send(producer, "txn one 0".getBytes(StandardCharsets.UTF_8), 0, one, null);
        send(producer, "txn one 1".getBytes(StandardCharsets.UTF_8), 1, one, null);
        one.commit().get(WAIT_S, TimeUnit.SECONDS);
        txns.add(txnEntry(one, "committed"));
        List<Message<byte[]>> got = receive(consumer, 2, false);
        Transaction two = client.newTransaction().withTransactionTimeout(5, TimeUnit.MINUTES)
                .build().get(WAIT_S, TimeUnit.SECONDS);
        consumer.acknowledgeAsync(got.get(0).getMessageId(), two).get(WAIT_S, TimeUnit.SECONDS);
        acks.add(Json.entry("message_id", Json.id(got.get(0).getMessageId()),
                "txn", txnId(two)));
        send(producer, "txn two 2".getBytes(StandardCharsets.UTF_8), 2, two, null);
        two.abort().get(WAIT_S, TimeUnit.SECONDS);
        txns.add(txnEntry(two, "aborted"));
        producer.close();
        consumer.close();
    }

    static void chunk(PulsarClient client, String topic) throws Exception {
        Consumer<byte[]> consumer = subscribe(client, topic);
        byte[] value = new byte[CHUNK_BYTES];
        for (int i = 0; i < value.length; i++) {
            value[i] = (byte) ((i * 31 + i / 1024) & 0xff);
        }
        Producer<byte[]> chunking = client.newProducer().topic(topic).producerName("chunking")
                .enableBatching(false).enableChunking(true).create();
        send(chunking, value, 0, null, null);
        receive(consumer, 1, true);
        Producer<byte[]> whole = client.newProducer().topic(topic).producerName("unchunked")
                .enableBatching(false).create();
        try {
            whole.newMessage().sequenceId(0).value(value).send();
            attempts.add(Json.entry("what", "unchunked send", "ok", true));
        } catch (Exception e) {
            attempts.add(failure("unchunked send", e));
        }
        chunking.close();
        whole.close();
        consumer.close();
    }

    static void send(Producer<byte[]> producer, byte[] value, long seq, Transaction txn,
            Map<String, Object> extra) throws Exception {
        var builder = txn == null ? producer.newMessage() : producer.newMessage(txn);
        MessageId id = builder.sequenceId(seq).value(value).send();
        sent.add(sentEntry(producer, value, seq, Json.id(id), txn == null ? null : txnId(txn),
                extra));
    }

    static Map<String, Object> sentEntry(Producer<byte[]> producer, byte[] value, long seq,
            Object id, Object txn, Map<String, Object> extra) throws Exception {
        Map<String, Object> e = Json.entry("producer", producer.getProducerName(),
                "sequence_id", seq, "size", value.length, "sha256", sha(value),
                "message_id", id, "txn", txn, "sent_ms", System.currentTimeMillis());
        if (extra != null) {
            e.putAll(extra);
        }
        return e;
    }

    static List<Message<byte[]>> receive(Consumer<byte[]> consumer, int n, boolean ack)
            throws Exception {
        List<Message<byte[]>> got = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            Message<byte[]> msg = consumer.receive(WAIT_S, TimeUnit.SECONDS);
            if (msg == null) {
                throw new IllegalStateException("received " + i + ", then none in " + WAIT_S);
            }
            got.add(msg);
            received.add(Json.entry("message_id", Json.id(msg.getMessageId()), "producer",
                    msg.getProducerName(), "sequence_id", msg.getSequenceId(),
                    "size", msg.getData().length, "sha256", sha(msg.getData())));
            if (ack) {
                consumer.acknowledge(msg);
                acks.add(Json.entry("message_id", Json.id(msg.getMessageId()), "txn", null));
            }
        }
        return got;
    }

    static Map<String, Object> failure(String what, Exception e) {
        Throwable cause = e;
        while ((cause instanceof ExecutionException || cause instanceof CompletionException)
                && cause.getCause() != null) {
            cause = cause.getCause();
        }
        return Json.entry("what", what, "ok", false, "exception", cause.getClass().getName(),
                "message", String.valueOf(cause.getMessage()));
    }

    static Map<String, Object> txnEntry(Transaction txn, String outcome) {
        Map<String, Object> e = txnId(txn);
        e.put("outcome", outcome);
        return e;
    }

    static Map<String, Object> txnId(Transaction txn) {
        TxnID id = txn.getTxnID();
        return Json.entry("most_bits", id.getMostSigBits(), "least_bits", id.getLeastSigBits());
    }

    static String sha(byte[] data) throws Exception {
        return Json.hex(MessageDigest.getInstance("SHA-256").digest(data));
    }
}
