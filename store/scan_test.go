package store_test

import (
	"slices"
	"testing"

	"github.com/outboxd/outboxd/store"
)

// TestAScanKeepsTheFiltersNoIndexCoversAndSaysHowFarItLooked: key, topic and error
// text each keep exactly their rows; a scan stops at its budget and reports the last
// id it examined, and resuming from there finds the rest; a requeue count and a
// requeue chunk honour the same filters.
func TestAScanKeepsTheFiltersNoIndexCoversAndSaysHowFarItLooked(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ids := f.insertKeyed(t, "orders", "a", "b", "a", "c", "a", "b")
	f.setStatus(t, "failed", ids[2], ids[3], ids[4])
	if _, err := f.pg.Pool.Exec(f.ctx, `UPDATE `+f.pg.Table.Qualified()+` SET topic = 'other', last_error = 'Timeout talking to broker'
		WHERE id = $1`, ids[4]); err != nil {
		t.Fatal(err)
	}
	scan := func(sf store.ScanFilter) store.ScanPage {
		t.Helper()
		if sf.Limit == 0 {
			sf.Limit = 100
		}
		if sf.Scan == 0 {
			sf.Scan = 100
		}
		p, err := f.store.ScanMessages(f.ctx, sf)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	idsOf := func(p store.ScanPage) []int64 {
		var out []int64
		for _, r := range p.Rows {
			out = append(out, r.ID)
		}
		return out
	}
	for _, c := range []struct {
		name string
		sf   store.ScanFilter
		want []int64
	}{
		{"a key keeps the rows of that key", store.ScanFilter{Key: "a"}, []int64{ids[0], ids[2], ids[4]}},
		{"a topic keeps the rows of that topic", store.ScanFilter{Topic: "other"}, []int64{ids[4]}},
		{"error text matches in any case", store.ScanFilter{ErrorContains: "TIMEOUT"}, []int64{ids[4]}},
		{"error text among failed rows of a stream", store.ScanFilter{MessageFilter: store.MessageFilter{Status: "failed", Stream: "orders"},
			ErrorContains: "said no"}, []int64{ids[2], ids[3]}},
		{"an id range bounds the rows", store.ScanFilter{MessageFilter: store.MessageFilter{AfterID: ids[0], ToID: ids[2]}, Key: "a"}, []int64{ids[2]}},
		{"a key with pending rows", store.ScanFilter{MessageFilter: store.MessageFilter{Status: "pending"}, Key: "b"}, []int64{ids[1], ids[5]}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := idsOf(scan(c.sf)); !slices.Equal(got, c.want) {
				t.Errorf("ids %v, want %v", got, c.want)
			}
		})
	}

	p := scan(store.ScanFilter{Key: "c", Scan: 2})
	if len(p.Rows) != 0 || p.Scanned != 2 || p.LastScanned != ids[1] {
		t.Fatalf("a scan of 2 rows for key c: %d rows, scanned %d up to %d; want none, 2, up to %d", len(p.Rows), p.Scanned, p.LastScanned, ids[1])
	}
	p = scan(store.ScanFilter{MessageFilter: store.MessageFilter{AfterID: p.LastScanned}, Key: "c", Scan: 2})
	if got := idsOf(p); !slices.Equal(got, []int64{ids[3]}) {
		t.Errorf("resuming after the scanned rows: ids %v, want [%d]", got, ids[3])
	}

	rf := store.RequeueFilter{Stream: "orders", ErrorContains: "timeout", Limit: 10}
	if n, err := f.store.CountFailed(f.ctx, rf); err != nil || n != 1 {
		t.Errorf("count of failed rows with error text timeout: %d, %v; want 1", n, err)
	}
	res, err := f.store.RequeueFailed(f.ctx, store.RequeueFilter{Stream: "orders", Key: "c", Limit: 10})
	if err != nil || res.Requeued != 1 || res.LastID != ids[3] {
		t.Errorf("requeue of failed rows of key c: %+v, %v; want 1 requeued, last id %d", res, err, ids[3])
	}
}
