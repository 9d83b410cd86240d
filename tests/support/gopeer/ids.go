// The MessageIDs of the Go client as our record writes them.
//
// Input:  a pulsar.MessageID (sent: the broker's receipt; received: the delivery's).
// Output: idOf(): a messageID with ledger, entry, partition, batch index and size (null
// when the client says the message is not in a batch: index -1), and for a chunked
// message the first chunk's id.
// Rule:   the client's interface hides a chunked message's first chunk; its serialized form
// (MessageIdData, field 7 first_chunk_message_id) holds it, read here with protowire.
package main

import (
	"github.com/apache/pulsar-client-go/pulsar"
	"google.golang.org/protobuf/encoding/protowire"
)

// idOf: the id's fields; a chunked message's first chunk is read from its serialized form
// (MessageIdData.first_chunk_message_id, field 7), which the client's interface hides.
func idOf(id pulsar.MessageID) messageID {
	out := messageID{LedgerID: id.LedgerID(), EntryID: id.EntryID(), Partition: id.PartitionIdx()}
	if idx := id.BatchIdx(); idx >= 0 {
		size := id.BatchSize()
		out.BatchIndex, out.BatchSize = &idx, &size
	}
	out.FirstChunk = firstChunk(id.Serialize())
	return out
}

func firstChunk(data []byte) *messageID {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return nil
		}
		data = data[n:]
		if num == 7 && typ == protowire.BytesType {
			inner, m := protowire.ConsumeBytes(data)
			if m < 0 {
				return nil
			}
			return idData(inner)
		}
		m := protowire.ConsumeFieldValue(num, typ, data)
		if m < 0 {
			return nil
		}
		data = data[m:]
	}
	return nil
}

func idData(data []byte) *messageID {
	out := &messageID{Partition: -1}
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 || typ != protowire.VarintType {
			return out
		}
		v, m := protowire.ConsumeVarint(data[n:])
		if m < 0 {
			return out
		}
		data = data[n+m:]
		switch num {
		case 1:
			out.LedgerID = int64(v)
		case 2:
			out.EntryID = int64(v)
		case 3:
			out.Partition = int32(v)
		}
	}
	return out
}
