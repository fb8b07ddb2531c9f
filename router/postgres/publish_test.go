package postgres

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/router"
)

func TestARepublishedBatchIsAbsorbedAndCountedAsDuplicates(t *testing.T) {
	t.Parallel()
	in := newInbox(t)
	d := newDriver(t, in.options())
	topic := "again." + suffix()
	msgs := messages(topic, 10)
	requireNoErrors(t, d.Publish(testCtx(t), msgs))

	var dups atomic.Int64
	again := append(slices.Clone(msgs[:5]), messages(topic, 2)...) // five again, two new
	requireNoErrors(t, d.Publish(router.WithDuplicates(testCtx(t), &dups), again))

	if n := len(in.rows(t, topic)); n != 12 {
		t.Fatalf("%d rows after a re-publish of 5 and 2 new messages, want 12", n)
	}
	if got := d.Duplicates(); got != 5 {
		t.Fatalf("Duplicates() = %d, want 5", got)
	}
	if got := dups.Load(); got != 5 {
		t.Fatalf("the caller's duplicate counter holds %d, want 5", got)
	}
}

func TestTwoCopiesOfAMessageInOneBatchMakeOneRow(t *testing.T) {
	t.Parallel()
	in := newInbox(t)
	d := newDriver(t, in.options())
	topic := "twice." + suffix()
	msgs := messages(topic, 3)
	msgs = append(msgs, msgs[1])
	requireNoErrors(t, d.Publish(testCtx(t), msgs))
	if n := len(in.rows(t, topic)); n != 3 {
		t.Fatalf("%d rows, want 3", n)
	}
	if got := d.Duplicates(); got != 1 {
		t.Fatalf("Duplicates() = %d, want 1", got)
	}
}

// refused is a payload a constraint of the consumer's refuses (refuse): a refusal
// only the database knows of, for a message bound for the same topic as the others.
var refused = []byte("refused")

func refuse(t *testing.T, in *inbox) {
	t.Helper()
	in.exec(t, "ALTER TABLE {table} ADD CONSTRAINT no_refused CHECK (payload <> 'refused'::bytea)")
}

func TestAMessageTheDatabaseRefusesFailsAloneAndTheRestKeepTheirOrder(t *testing.T) {
	t.Parallel()
	in := newInbox(t)
	d := newDriver(t, in.options())
	topic := "data." + suffix()
	refuse(t, in)
	msgs := messages(topic, 8)
	msgs[3].Payload = refused

	var dups atomic.Int64
	errs := d.Publish(router.WithDuplicates(testCtx(t), &dups), msgs)
	for i, err := range errs {
		switch {
		case i == 3 && router.KindOf(err) != router.KindPermanent:
			t.Fatalf("the refused message: %v (%s), want permanent", err, router.KindOf(err))
		case i == 3 && !strings.Contains(err.Error(), `violates check constraint "no_refused"`):
			t.Fatalf("the refused message's error %q does not name the constraint", err)
		case i != 3 && err != nil:
			t.Fatalf("message %d failed beside the refused one: %v", i, err)
		}
	}
	var seqs []string
	for _, r := range in.rows(t, topic) {
		seqs = append(seqs, r.Headers["seq"])
	}
	if want := []string{"0", "1", "2", "4", "5", "6", "7"}; !slices.Equal(seqs, want) {
		t.Fatalf("rows by seq hold messages %v, want %v", seqs, want)
	}
	if d.Duplicates() != 0 || dups.Load() != 0 {
		t.Fatalf("%d duplicates counted (%d reported): nothing of the refused batch may have been committed", d.Duplicates(), dups.Load())
	}
}

func TestAnOrderedPublishHoldsBackAKeyBehindAMessageTheDatabaseRefused(t *testing.T) {
	t.Parallel()
	in := newInbox(t)
	d := newDriver(t, in.options())
	topic := "ordered." + suffix()
	refuse(t, in)
	msgs := messages(topic, 7) // keys cycle over three: 1 and 4 share key-1
	msgs[1].Payload = refused

	rt, err := router.New([]router.Route{{Stream: "orders", DriverName: "inbox", Driver: d}})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := rt.Publisher("orders")
	if err != nil {
		t.Fatal(err)
	}
	errs := pub.PublishOrdered(testCtx(t), msgs)
	for i, err := range errs {
		switch {
		case i == 1 && router.KindOf(err) != router.KindPermanent:
			t.Fatalf("the refused head: %v (%s), want permanent", err, router.KindOf(err))
		case i == 4 && router.KindOf(err) != router.KindHeldBack:
			t.Fatalf("message 4, behind the refused head of its key: %v (%s), want held back", err, router.KindOf(err))
		case i != 1 && i != 4 && err != nil:
			t.Fatalf("message %d of another key failed: %v", i, err)
		}
	}
	if n := len(in.rows(t, topic)); n != 5 {
		t.Fatalf("%d rows, want the 5 messages of the other keys", n)
	}
}

func TestABatchLargerThanOneStatementGoesInOneTransaction(t *testing.T) {
	t.Parallel()
	in := newInbox(t)
	d := newDriver(t, in.options())
	d.chunkBytes = 1000 // about ten messages per statement
	topic := "chunks." + suffix()
	refuse(t, in)

	msgs := messages(topic, 60)
	requireNoErrors(t, d.Publish(testCtx(t), msgs))
	rows := in.rows(t, topic)
	if len(rows) != 60 {
		t.Fatalf("%d rows, want 60", len(rows))
	}
	for i, r := range rows {
		if r.Headers["seq"] != strconv.Itoa(i) {
			t.Fatalf("row %d by seq is message %s", i, r.Headers["seq"])
		}
	}

	// A refusal in the last statement undoes the earlier ones: were they committed,
	// inserting message by message afterwards would find them as duplicates.
	more := messages(topic, 60)
	more[55].Payload = refused
	errs := d.Publish(testCtx(t), more)
	for i, err := range errs {
		if (i == 55) != (err != nil) {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if got := d.Duplicates(); got != 0 {
		t.Fatalf("%d duplicates: the statements before the refused one were committed on their own", got)
	}
	if n := len(in.rows(t, topic)); n != 119 {
		t.Fatalf("%d rows, want 119", n)
	}
}

func TestAMissingInboxFailsEveryMessagePermanentlyAndSaysHowToCreateIt(t *testing.T) {
	t.Parallel()
	in := newInbox(t)
	o := in.options()
	o.Table = "public.no_inbox_" + suffix()
	d := newDriver(t, o)
	for i, err := range d.Publish(testCtx(t), messages("missing", 3)) {
		if router.KindOf(err) != router.KindPermanent {
			t.Fatalf("message %d: %v (%s), want permanent", i, err, router.KindOf(err))
		}
		want := "inbox table " + o.Table + " does not exist: create it with docs/sql/inbox.sql"
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("message %d: %q does not say %q", i, err, want)
		}
	}
}

func TestEveryHeaderArrivesAsAJSONStringAndKeysAndPayloadsAsBytes(t *testing.T) {
	t.Parallel()
	in := newInbox(t)
	d := newDriver(t, in.options())
	topic := "headers." + suffix()
	odd := "quote \" backslash \\ tab \t newline \n bell \a del \x7f é 🙂 </script>"
	msgs := []router.Message{
		{ID: 7, Stream: "orders", Topic: topic, Key: []byte{0, 0xff}, Payload: []byte{0, 1, 2},
			Headers:    map[string]string{odd: odd, "": "empty name", router.HeaderID: "forged", router.HeaderMessageID: "forged"},
			RowDedupID: "h-" + suffix()},
		{ID: 8, Stream: "orders", Topic: topic, RowDedupID: "h-" + suffix()}, // no key, no headers, nil payload
	}
	requireNoErrors(t, d.Publish(testCtx(t), msgs))
	rows := in.rows(t, topic)
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	want := map[string]string{odd: odd, "": "empty name", router.HeaderID: "7", router.HeaderStream: "orders",
		router.HeaderMessageID: msgs[0].RowDedupID}
	if got, _ := json.Marshal(rows[0].Headers); string(got) != string(must(json.Marshal(want))) {
		t.Fatalf("headers %s, want %s", got, must(json.Marshal(want)))
	}
	r := rows[0]
	if r.messageID != msgs[0].RowDedupID || r.outboxID != 7 || r.stream != "orders" || string(r.Key) != "\x00\xff" || string(r.Payload) != "\x00\x01\x02" {
		t.Fatalf("row %+v", r)
	}
	if r := rows[1]; r.Key != nil || r.Payload == nil || len(r.Payload) != 0 || len(r.Headers) != 3 {
		t.Fatalf("a message without key, headers or payload arrived as key=%v payload=%v headers=%v", r.Key, r.Payload, r.Headers)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestACancelledPublishReportsCanceledAndAnExpiredTimeoutRetryable(t *testing.T) {
	t.Parallel()
	in := newInbox(t)
	o := in.options()
	d := newDriver(t, o)
	short := newDriver(t, o)
	// Both drivers open their connections, with the default publish timeout, before
	// inserts turn slow: on a loaded machine opening one (or the warm-up's first insert)
	// can take longer than the short budgets below, which would then end before the
	// insert and be reported as the database unreachable, or fail the warm-up itself.
	// Only then does the short driver get its short budget.
	for _, drv := range []*Driver{d, short} {
		for i, err := range drv.Publish(testCtx(t), messages("warm."+suffix(), 2)) {
			if err != nil {
				t.Fatalf("warm-up message %d: %v", i, err)
			}
		}
	}
	// A second, not 100 ms: the budget must outlast what comes before the insert is
	// sent (the pool pings a connection idle over a second, and a loaded CI machine can
	// stall a goroutine for 100 ms), or it ends before anything reached the database and
	// is rightly reported as unreachable rather than as an insert left unanswered.
	short.timeout = time.Second
	in.exec(t, "DELETE FROM {table}")
	topic := "slow." + suffix()
	// A trigger of the consumer's that takes its time.
	in.exec(t, `CREATE FUNCTION {table}_slow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(3); RETURN NULL; END $$`)
	in.exec(t, "CREATE TRIGGER slow AFTER INSERT ON {table} FOR EACH STATEMENT EXECUTE FUNCTION {table}_slow()")
	t.Cleanup(func() { in.exec(t, "DROP FUNCTION {table}_slow() CASCADE") })

	ctx, cancel := context.WithTimeout(testCtx(t), 100*time.Millisecond)
	defer cancel()
	for i, err := range d.Publish(ctx, messages(topic, 2)) {
		if router.KindOf(err) != router.KindCanceled {
			t.Fatalf("message %d under a context that ended mid-insert: %v (%s), want canceled", i, err, router.KindOf(err))
		}
	}

	for i, err := range short.Publish(testCtx(t), messages(topic, 2)) {
		if err == nil || router.KindOf(err) != router.KindRetryable || !strings.Contains(err.Error(), "no answer within publish_timeout 1s") {
			t.Fatalf("message %d past the publish timeout: %v (%s), want retryable", i, err, router.KindOf(err))
		}
	}
	if n := in.count(t); n != 0 {
		t.Fatalf("%d rows inserted by statements that were cancelled", n)
	}
}

func TestLargePayloadsArriveWholeEachInAStatementOfItsOwn(t *testing.T) {
	t.Parallel()
	in := newInbox(t)
	o := in.options()
	// 18 MiB in four statements: the default 5 s ran out under -race on a loaded host.
	// What is tested is that each payload arrives whole, not how fast.
	o.PublishTimeout = time.Minute
	d := newDriver(t, o)
	d.chunkBytes = 1 << 20
	topic := "large." + suffix()
	msgs := messages(topic, 4)
	for i := range msgs {
		msgs[i].Payload = make([]byte, (3+i)<<20) // 3 to 6 MiB, each over a statement's bound
		_, _ = rand.Read(msgs[i].Payload)
	}
	requireNoErrors(t, d.Publish(testCtx(t), msgs))
	requireNoErrors(t, d.Publish(testCtx(t), msgs)) // again: absorbed
	rows := in.rows(t, topic)
	if len(rows) != 4 || d.Duplicates() != 4 {
		t.Fatalf("%d rows and %d duplicates, want 4 and 4", len(rows), d.Duplicates())
	}
	for i, r := range rows {
		if !bytes.Equal(r.Payload, msgs[i].Payload) {
			t.Fatalf("row %d: a payload of %d bytes arrived as %d bytes, or changed", i, len(msgs[i].Payload), len(r.Payload))
		}
	}
}

func TestAnInboxWithoutAUniqueMessageIDRefusesEveryMessageRatherThanTakeCopies(t *testing.T) {
	t.Parallel()
	in := newInbox(t)
	in.exec(t, "ALTER TABLE {table} DROP CONSTRAINT "+strings.TrimPrefix(in.table, "public.")+"_pkey")
	d := newDriver(t, in.options())
	for i, err := range d.Publish(testCtx(t), messages("nokey", 2)) {
		if want := "has no primary key or unique index on message_id"; router.KindOf(err) != router.KindPermanent || !strings.Contains(err.Error(), want) {
			t.Fatalf("message %d into an inbox without a unique message_id: %v, want permanent saying %q", i, err, want)
		}
	}
	if n := in.count(t); n != 0 {
		t.Fatalf("%d rows went into an inbox that cannot absorb copies", n)
	}
}

func TestAUniqueIndexOfTheConsumersFailsOnlyTheMessageItRefuses(t *testing.T) {
	t.Parallel()
	in := newInbox(t)
	in.exec(t, "CREATE UNIQUE INDEX ON {table} (outbox_id)")
	d := newDriver(t, in.options())
	topic := "unique." + suffix()
	requireNoErrors(t, d.Publish(testCtx(t), messages(topic, 3))) // outbox ids 1 to 3

	later := messages(topic, 5) // new message ids; outbox ids 1 to 5 again
	for i := range later {
		later[i].ID += 2 // 3 to 7: 3 is taken
	}
	errs := d.Publish(testCtx(t), later)
	for i, err := range errs {
		switch {
		case i == 0 && (router.KindOf(err) != router.KindPermanent || !strings.Contains(err.Error(), "duplicate key value violates unique constraint")):
			t.Fatalf("the message whose outbox_id is taken: %v (%s), want permanent", err, router.KindOf(err))
		case i != 0 && err != nil:
			t.Fatalf("message %d failed beside it: %v", i, err)
		}
	}
	if n, dups := in.count(t), d.Duplicates(); n != 7 || dups != 0 {
		t.Fatalf("%d rows and %d duplicates, want 7 and none", n, dups)
	}
}
