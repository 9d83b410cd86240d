// The messages the Go client discards instead of handing them to the application.
//
// Input:  the client's log entries (a logrus hook on the client's logger).
// Output: discards: each "Discarding corrupted message" entry as the id it names (its msgID
// field, the wire's MessageIdData: "ledgerId:L entryId:E ...") and its validationError
// (the reason the client's ACK then carries, e.g. ChecksumMismatch); watch(), the count
// so far and a channel closed at the next one.
// Rule:   the client logs such an entry, and acknowledges the message with that validation
// error, when a MESSAGE frame fails its checks (a missing or wrong CRC32C, metadata it
// cannot parse); so the receive loop stops once received + discarded = sent, an event.
package main

import (
	"fmt"
	"regexp"
	"strconv"
	"sync"

	"github.com/sirupsen/logrus"
)

const discardText = "Discarding corrupted message"

var wireID = regexp.MustCompile(`ledgerId:(\d+)\s+entryId:(\d+)`)

type discards struct {
	mu      sync.Mutex
	entries []discardedEntry
	changed chan struct{}
}

func newDiscards() *discards {
	return &discards{entries: []discardedEntry{}, changed: make(chan struct{})}
}

func (d *discards) Levels() []logrus.Level { return logrus.AllLevels }

func (d *discards) Fire(entry *logrus.Entry) error {
	if entry.Message != discardText {
		return nil
	}
	id := messageID{LedgerID: -1, EntryID: -1, Partition: -1}
	if found := wireID.FindStringSubmatch(fmt.Sprint(entry.Data["msgID"])); found != nil {
		id.LedgerID, _ = strconv.ParseInt(found[1], 10, 64)
		id.EntryID, _ = strconv.ParseInt(found[2], 10, 64)
	}
	d.mu.Lock()
	d.entries = append(d.entries, discardedEntry{
		MessageID: id, ValidationError: fmt.Sprint(entry.Data["validationError"]),
	})
	close(d.changed)
	d.changed = make(chan struct{})
	d.mu.Unlock()
	return nil
}

// watch: the discards so far, and a channel closed when the next one comes.
func (d *discards) watch() (int, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.entries), d.changed
}

func (d *discards) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.entries)
}

func (d *discards) all() []discardedEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]discardedEntry{}, d.entries...)
}
