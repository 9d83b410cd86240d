// The Go client's side of the real-peer tests (tests/support/gopeer/build.py, run.py).
//
// Input:  flags: -url SERVICE_URL -topic TOPIC -sub SUBSCRIPTION -scenario plain|batch|chunk
// -compression none|lz4|zlib|zstd -count N -size M -chunk C -out OUT_JSON.
// Output: OUT_JSON, this client's own record of what it did: every message it sent (the
// producer, sequence id, key, value bytes as hex, properties and the MessageID the broker
// gave back: ledger, entry, batch index, partition, and a chunked message's first chunk)
// and every message it received and acknowledged (the MessageID, value, properties,
// publish time, the broker publish time and index of the broker entry metadata as
// Message.BrokerPublishTime() and Index() give them, the redelivery count), and every
// entry the client discarded as corrupt, with its reason (discards.go).
// Rule:   one Exclusive subscription (from the earliest message) is made first, so nothing is
// missed; then one producer sends, numbering its messages 0, 1, ... as their sequence
// ids (set explicitly), with the codec -compression:
// plain: N messages one by one, batching off, each Send waiting for its receipt;
// batch: N batches of M messages, cut by count only (BatchingMaxMessages M, the publish
// delay an hour, the byte bound far above): M SendAsync, then Flush;
// chunk: N messages of M bytes each, batching off, chunking on with chunks of at most
// C bytes (ChunkMaxMessageSize).
// The consumer then receives every message (60 s bound each) and acknowledges each with
// the client's default ack grouping, until each one sent is received or discarded;
// everything is closed before the record is written
// (tmp file, then rename). Any failure exits non-zero with its reason.
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/sirupsen/logrus"
)

const clientModule = "github.com/apache/pulsar-client-go"

type messageID struct {
	LedgerID   int64      `json:"ledger_id"`
	EntryID    int64      `json:"entry_id"`
	Partition  int32      `json:"partition"`
	BatchIndex *int32     `json:"batch_index"`
	BatchSize  *int32     `json:"batch_size"`
	FirstChunk *messageID `json:"first_chunk,omitempty"`
}

type sentEntry struct {
	Producer   string            `json:"producer"`
	SequenceID int64             `json:"sequence_id"`
	Key        string            `json:"key"`
	Batched    bool              `json:"batched"`
	ValueHex   string            `json:"value_hex"`
	Properties map[string]string `json:"properties"`
	MessageID  messageID         `json:"message_id"`
}

type receivedEntry struct {
	Producer          string            `json:"producer"`
	Key               string            `json:"key"`
	ValueHex          string            `json:"value_hex"`
	Properties        map[string]string `json:"properties"`
	PublishTime       int64             `json:"publish_time"`
	BrokerPublishTime *int64            `json:"broker_publish_time"`
	Index             *uint64           `json:"index"`
	RedeliveryCount   uint32            `json:"redelivery_count"`
	Acked             bool              `json:"acked"`
	MessageID         messageID         `json:"message_id"`
}

type discardedEntry struct {
	MessageID       messageID `json:"message_id"`
	ValidationError string    `json:"validation_error"`
}

type record struct {
	Client           string           `json:"client"`
	ClientVersion    string           `json:"client_version"`
	Topic            string           `json:"topic"`
	Subscription     string           `json:"subscription"`
	SubscriptionType string           `json:"subscription_type"`
	Scenario         string           `json:"scenario"`
	Compression      string           `json:"compression"`
	Count            int              `json:"count"`
	Size             int              `json:"size"`
	ChunkMax         int              `json:"chunk_max"`
	Sent             []sentEntry      `json:"sent"`
	Received         []receivedEntry  `json:"received"`
	Discarded        []discardedEntry `json:"discarded"`
}

type options struct {
	url, topic, sub, scenario, compression, out string
	count, size, chunk                          int
}

var codecs = map[string]pulsar.CompressionType{
	"none": pulsar.NoCompression, "lz4": pulsar.LZ4, "zlib": pulsar.ZLib, "zstd": pulsar.ZSTD,
}

func main() {
	var o options
	flag.StringVar(&o.url, "url", "", "service URL")
	flag.StringVar(&o.topic, "topic", "", "topic")
	flag.StringVar(&o.sub, "sub", "", "subscription")
	flag.StringVar(&o.scenario, "scenario", "plain", "plain, batch or chunk")
	flag.StringVar(&o.compression, "compression", "none", "none, lz4, zlib or zstd")
	flag.IntVar(&o.count, "count", 1, "messages (plain, chunk) or batches (batch)")
	flag.IntVar(&o.size, "size", 1, "messages per batch (batch) or bytes per message (chunk)")
	flag.IntVar(&o.chunk, "chunk", 0, "chunk: the largest chunk payload in bytes")
	flag.StringVar(&o.out, "out", "", "the record's path")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "gopeer:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	codec, ok := codecs[o.compression]
	if !ok || o.url == "" || o.topic == "" || o.sub == "" || o.out == "" || o.count < 1 {
		return fmt.Errorf("bad arguments: %+v", o)
	}
	logger := logrus.New()
	logger.SetOutput(os.Stderr)
	logger.SetLevel(logrus.WarnLevel)
	dropped := newDiscards()
	logger.AddHook(dropped)
	client, err := pulsar.NewClient(pulsar.ClientOptions{
		URL: o.url, OperationTimeout: 60 * time.Second, ConnectionTimeout: 30 * time.Second,
		Logger: plog.NewLoggerWithLogrus(logger),
	})
	if err != nil {
		return err
	}
	defer client.Close()
	consumer, err := client.Subscribe(pulsar.ConsumerOptions{
		Topic: o.topic, SubscriptionName: o.sub, Type: pulsar.Exclusive,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	rec := record{
		Client: "go", ClientVersion: clientVersion(), Topic: o.topic, Subscription: o.sub,
		SubscriptionType: "Exclusive", Scenario: o.scenario, Compression: o.compression,
		Count: o.count, Size: o.size, ChunkMax: o.chunk,
		Sent: []sentEntry{}, Received: []receivedEntry{}, Discarded: []discardedEntry{},
	}
	if rec.Sent, err = produce(client, o, codec); err != nil {
		return err
	}
	for remaining(rec.Sent, len(rec.Received), dropped.all()) > 0 {
		msg, err := receive(consumer, dropped)
		if err != nil {
			return fmt.Errorf("received %d messages (%d entries discarded), then: %w",
				len(rec.Received), dropped.count(), err)
		}
		if msg == nil {
			continue // one more discarded: the loop's bound says whether to wait on
		}
		if err := consumer.Ack(msg); err != nil {
			return fmt.Errorf("ack: %w", err)
		}
		rec.Received = append(rec.Received, received(msg))
	}
	consumer.Close()
	rec.Discarded = dropped.all()
	return write(o.out, rec)
}

// remaining: the messages sent but neither received nor discarded; a discarded entry (as the
// wire names it: ledger and entry) counts for every message sent in it.
func remaining(sent []sentEntry, received int, dropped []discardedEntry) int {
	gone := map[[2]int64]bool{}
	for _, d := range dropped {
		gone[[2]int64{d.MessageID.LedgerID, d.MessageID.EntryID}] = true
	}
	left := -received
	for _, e := range sent {
		if !gone[[2]int64{e.MessageID.LedgerID, e.MessageID.EntryID}] {
			left++
		}
	}
	return left
}

// receive: the next message (60 s bound), or nil when the client discarded one meanwhile.
func receive(consumer pulsar.Consumer, dropped *discards) (pulsar.Message, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	before, changed := dropped.watch()
	go func() {
		select {
		case <-changed:
			cancel()
		case <-ctx.Done():
		}
	}()
	msg, err := consumer.Receive(ctx)
	if err != nil && dropped.count() > before {
		return nil, nil
	}
	return msg, err
}

// produce sends the scenario's messages; the sent entries, with the ids the broker gave.
func produce(client pulsar.Client, o options, codec pulsar.CompressionType) ([]sentEntry, error) {
	name := "go-" + o.scenario + "-" + o.compression
	opts := pulsar.ProducerOptions{
		Topic: o.topic, Name: name, CompressionType: codec, SendTimeout: 60 * time.Second,
	}
	switch o.scenario {
	case "plain":
		opts.DisableBatching = true
	case "batch":
		opts.BatchingMaxMessages = uint(o.size)
		opts.BatchingMaxPublishDelay = time.Hour
		opts.BatchingMaxSize = 4 << 20
	case "chunk":
		opts.DisableBatching = true
		opts.EnableChunking = true
		opts.ChunkMaxMessageSize = uint(o.chunk)
	default:
		return nil, fmt.Errorf("unknown scenario %q", o.scenario)
	}
	producer, err := client.CreateProducer(opts)
	if err != nil {
		return nil, fmt.Errorf("create producer: %w", err)
	}
	defer producer.Close()
	if o.scenario == "batch" {
		return sendBatches(producer, name, o)
	}
	sent := []sentEntry{}
	for i := 0; i < o.count; i++ {
		msg := message(o, i)
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		id, err := producer.Send(ctx, msg)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("send %d: %w", i, err)
		}
		sent = append(sent, sentOf(name, msg, id, false))
	}
	return sent, nil
}

func sendBatches(producer pulsar.Producer, name string, o options) ([]sentEntry, error) {
	sent := []sentEntry{}
	for b := 0; b < o.count; b++ {
		type result struct {
			id  pulsar.MessageID
			err error
		}
		results := make([]chan result, o.size)
		msgs := make([]*pulsar.ProducerMessage, o.size)
		for j := 0; j < o.size; j++ {
			msgs[j] = message(o, b*o.size+j)
			done := make(chan result, 1)
			results[j] = done
			producer.SendAsync(context.Background(), msgs[j],
				func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					done <- result{id, err}
				})
		}
		if err := producer.Flush(); err != nil {
			return nil, fmt.Errorf("flush: %w", err)
		}
		for j := 0; j < o.size; j++ {
			select {
			case r := <-results[j]:
				if r.err != nil {
					return nil, fmt.Errorf("send %d: %w", b*o.size+j, r.err)
				}
				sent = append(sent, sentOf(name, msgs[j], r.id, true))
			case <-time.After(90 * time.Second):
				return nil, fmt.Errorf("no receipt for message %d in 90 s", b*o.size+j)
			}
		}
	}
	return sent, nil
}

// message i of a run: text (repeated, so that codecs shrink it), every fifth one ending in
// bytes that are not UTF-8; a chunk run's messages are -size bytes long.
func message(o options, i int) *pulsar.ProducerMessage {
	text := fmt.Sprintf("go %s message %d; ", o.scenario, i)
	value := []byte(strings.Repeat(text, 4))
	if o.scenario == "chunk" {
		value = []byte(strings.Repeat(text, o.size/len(text)+1))[:o.size]
	}
	if i%5 == 4 {
		value = append(value, 0xff, 0x00, byte(i))
	}
	seq := int64(i)
	return &pulsar.ProducerMessage{
		Payload: value, Key: fmt.Sprintf("k%d", i%3), SequenceID: &seq,
		Properties: map[string]string{"i": fmt.Sprint(i), "kind": o.scenario},
	}
}

func sentOf(name string, msg *pulsar.ProducerMessage, id pulsar.MessageID, batched bool) sentEntry {
	return sentEntry{
		Producer: name, SequenceID: *msg.SequenceID, Key: msg.Key, Batched: batched,
		ValueHex: hex.EncodeToString(msg.Payload), Properties: msg.Properties,
		MessageID: idOf(id),
	}
}

func received(msg pulsar.Message) receivedEntry {
	entry := receivedEntry{
		Producer: msg.ProducerName(), Key: msg.Key(), ValueHex: hex.EncodeToString(msg.Payload()),
		Properties: msg.Properties(), PublishTime: msg.PublishTime().UnixMilli(),
		Index: msg.Index(), RedeliveryCount: msg.RedeliveryCount(), Acked: true,
		MessageID: idOf(msg.ID()),
	}
	if t := msg.BrokerPublishTime(); t != nil {
		ms := t.UnixMilli()
		entry.BrokerPublishTime = &ms
	}
	return entry
}

// clientVersion: the CONNECT client_version the library reports ("Pulsar-Go-" + its module
// version, from the build information, as pulsar/internal/version.go makes it).
func clientVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == clientModule {
				return "Pulsar-Go-" + dep.Version
			}
		}
	}
	return "Pulsar-Go-version-unknown"
}

func write(path string, rec record) error {
	data, err := json.MarshalIndent(rec, "", " ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
