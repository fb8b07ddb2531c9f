package store_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/store"
)

// BenchmarkDrainModes measures the SQL ceiling of a drain (claim and write-back, no
// broker, 1 KiB payloads, batch 100, two claimers as a default stream's concurrency)
// for each claim mode and acknowledgement, interleaved round by round on tables of
// their own, and reports each one's median rate over the rounds:
//
//   - lease/update: today's default, a lease UPDATE per claim and an UPDATE per ack;
//   - lease/delete: the same with acknowledgement by DELETE (retention 0);
//   - transaction/update: row locks held in a transaction, acknowledged by UPDATE and
//     committed in one round trip (store.ClaimHeld, Commit);
//   - transaction/delete: the same with acknowledgement by DELETE;
//   - transaction/update/external: transaction/update with the payload stored out of
//     line (STORAGE EXTERNAL, toast_tuple_target 128);
//   - lease/update/from-start, transaction/update/from-start: every claim walks the
//     claim index from its start, as claims did before they resumed from the previous
//     one's position (store.Position).
//
// OUTBOXD_DRAIN_BACKLOG sets the backlog (100000), OUTBOXD_DRAIN_ROUNDS the rounds (3),
// OUTBOXD_DRAIN_CLAIMERS the claimers (2; 8 is four replicas' default pipelines).
//
//	go test -run '^$' -bench DrainModes -benchtime 1x -timeout 60m ./store/
func BenchmarkDrainModes(b *testing.B) {
	backlog := envInt(b, "OUTBOXD_DRAIN_BACKLOG", 100000)
	rounds := envInt(b, "OUTBOXD_DRAIN_ROUNDS", 3)
	claimers := envInt(b, "OUTBOXD_DRAIN_CLAIMERS", 2)
	type mode struct {
		name      string
		held, del bool
		external  bool
		fromStart bool // every claim from the zero Position, as before positions
		own       bool // each claimer resumes after its own claims, not the furthest
	}
	modes := []mode{
		{name: "lease/update"},
		{name: "lease/delete", del: true},
		{name: "transaction/update", held: true},
		{name: "transaction/delete", held: true, del: true},
		{name: "transaction/update/external", held: true, external: true},
		{name: "lease/update/from-start", fromStart: true},
		{name: "transaction/update/from-start", held: true, fromStart: true},
		{name: "transaction/update/own-resume", held: true, own: true},
	}
	if only := os.Getenv("OUTBOXD_DRAIN_MODES"); only != "" {
		modes = slices.DeleteFunc(modes, func(m mode) bool { return !slices.Contains(splitComma(only), m.name) })
	}
	type table struct {
		f  *fixture
		st *store.Store
	}
	tables := make([]table, len(modes))
	for i, m := range modes {
		f := setupB(b)
		st := f.store
		if m.del {
			var err error
			if st, err = store.New(f.pg.Pool, f.pg.Table, store.WithAckByDelete()); err != nil {
				b.Fatal(err)
			}
		}
		if m.external {
			q := f.pg.Table.Qualified()
			for _, sql := range []string{`ALTER TABLE ` + q + ` ALTER COLUMN payload SET STORAGE EXTERNAL`,
				`ALTER TABLE ` + q + ` SET (toast_tuple_target = 128)`} {
				if _, err := f.pg.Pool.Exec(context.Background(), sql); err != nil {
					b.Fatal(err)
				}
			}
		}
		tables[i] = table{f, st}
	}
	rates := make([][]float64, len(modes))
	for b.Loop() {
		for r := 0; r < rounds; r++ {
			for i, m := range modes {
				t := tables[i]
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
				if _, err := t.f.pg.Pool.Exec(ctx, "TRUNCATE "+t.f.pg.Table.Qualified()); err != nil {
					b.Fatal(err)
				}
				t.f.ctx = ctx
				t.f.insertPayload(b, "orders", backlog, 1024)
				if err := t.st.BenchVacuum(ctx, true); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				moved := drainModes(b, ctx, t.st, m.held, m.fromStart, m.own, claimers, 100)
				elapsed := time.Since(start)
				cancel()
				if moved != backlog {
					b.Fatalf("%s moved %d of %d", m.name, moved, backlog)
				}
				rate := float64(moved) / elapsed.Seconds()
				rates[i] = append(rates[i], rate)
				fmt.Fprintf(os.Stderr, "round %d %-28s %8.0f msg/s\n", r+1, m.name, rate)
			}
		}
	}
	for i, m := range modes {
		slices.Sort(rates[i])
		med := rates[i][len(rates[i])/2]
		fmt.Fprintf(os.Stderr, "median %-28s %8.0f msg/s  (÷ first %.2f)\n", m.name, med, med/median(rates[0]))
		b.ReportMetric(med, m.name+"_msgs/s")
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// drainModes drains stream orders with workers claimers of batch rows each until a
// claim comes back empty, and returns how many rows were acknowledged. Claims resume as
// a pipeline's do, from one store.Resume shared by the claimers, or from one each (own),
// or always start from the start (fromStart).
func drainModes(b *testing.B, ctx context.Context, st *store.Store, held, fromStart, own bool, workers, batch int) int {
	var mu sync.Mutex
	moved := 0
	var wg sync.WaitGroup
	shared := new(store.Resume)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resume := shared
			if own {
				resume = new(store.Resume)
			}
			for {
				from := resume.From(time.Now())
				if fromStart {
					from = store.Position{}
				}
				var c store.Claim
				var err error
				if held {
					c, err = st.ClaimHeld(ctx, "orders", batch, "bench", 30*time.Second, from)
				} else {
					c, err = st.Claim(ctx, "orders", batch, "bench", 30*time.Second, from)
				}
				if err != nil {
					b.Error(err)
					return
				}
				if resume.Claimed(c, batch); len(c.Messages) == 0 {
					if from.IsZero() {
						return
					}
					continue
				}
				var res store.AckResult
				if held {
					res, err = st.Commit(ctx, c.Token, c.IDs())
				} else {
					res, err = st.Ack(ctx, c.Token, c.IDs())
				}
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				moved += res.Changed
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return moved
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	return n
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}
