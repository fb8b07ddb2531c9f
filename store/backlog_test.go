package store

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
)

// backlogFixture is a table whose stream "small" holds 45 pending rows (3 deferred) and
// 5 failed ones; a test adds the rows of its stream "big". The store counts exactly up
// to 1,000 rows.
type backlogFixture struct {
	pg    *testenv.PG
	store *Store
	ctx   context.Context
}

func newBacklogFixture(t *testing.T, layout migrations.Layout) *backlogFixture {
	t.Helper()
	pg := testenv.NewPGLayout(t, layout)
	s, err := New(pg.Pool, pg.Table)
	if err != nil {
		t.Fatal(err)
	}
	s.countLimit = 1000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	f := &backlogFixture{pg: pg, store: s, ctx: ctx}
	f.add(t, "small", 50, 10)
	return f
}

// add inserts n rows of stream, mixed on every page: every failEvery-th failed, the
// others pending, and of those the ones numbered 1 modulo 20 deferred.
func (f *backlogFixture) add(t *testing.T, stream string, n, failEvery int) {
	t.Helper()
	q := f.pg.Table.Qualified()
	if _, err := f.pg.Pool.Exec(f.ctx, `
		INSERT INTO `+q+` (stream, topic, payload, status, last_error, deferred_since)
		SELECT $1, 't', '\x00',
		       CASE WHEN g % $3 = 0 THEN 'failed' ELSE 'pending' END,
		       CASE WHEN g % $3 = 0 THEN 'broker refused it' END,
		       CASE WHEN g % $3 <> 0 AND g % 20 = 1 THEN now() END
		FROM generate_series(1, $2::int) g`, stream, n, failEvery); err != nil {
		t.Fatal(err)
	}
	// The plans the counts take are the ones of a table autovacuum has analyzed.
	if _, err := f.pg.Pool.Exec(f.ctx, "ANALYZE "+q); err != nil {
		t.Fatal(err)
	}
}

func (f *backlogFixture) pages(t *testing.T) int64 {
	t.Helper()
	var pages int64
	if err := f.pg.Pool.QueryRow(f.ctx, tablePagesSQL, f.pg.Table.Qualified()).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	return pages
}

// buffers is how many shared buffers (hit or read) one run of sql with args touched.
func (f *backlogFixture) buffers(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var plan []byte
	if err := f.pg.Pool.QueryRow(f.ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var root []struct {
		Plan struct {
			Hit  int64 `json:"Shared Hit Blocks"`
			Read int64 `json:"Shared Read Blocks"`
		}
	}
	if err := json.Unmarshal(plan, &root); err != nil || len(root) != 1 {
		t.Fatalf("plan %s: %v", plan, err)
	}
	return root[0].Plan.Hit + root[0].Plan.Read
}

// vacuumAllVisible vacuums the table, as autovacuum leaves it, until every page is
// all-visible: an index-only scan then reads no row. A snapshot another test holds open
// in the same database keeps VACUUM from marking the newest rows' pages, so it retries.
func (f *backlogFixture) vacuumAllVisible(t *testing.T) {
	t.Helper()
	q := f.pg.Table.Qualified()
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := f.pg.Pool.Exec(f.ctx, "VACUUM ANALYZE "+q); err != nil {
			t.Fatal(err)
		}
		var pages, visible int64
		if err := f.pg.Pool.QueryRow(f.ctx, `SELECT coalesce(sum(relpages), 0), coalesce(sum(relallvisible), 0)
			FROM pg_class WHERE relkind = 'r'
			AND oid IN (SELECT $1::regclass UNION ALL SELECT relid FROM pg_partition_tree($1::regclass))`, q).Scan(&pages, &visible); err != nil {
			t.Fatal(err)
		}
		if pages > 0 && visible == pages {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute of VACUUM, %d of the table's %d pages are all-visible: a snapshot held open?", visible, pages)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func within(got, want int64, share float64) bool {
	return float64(got) >= float64(want)*(1-share) && float64(got) <= float64(want)*(1+share)
}

// A stream's counts past the limit are estimated from a sample of the table's pages
// and marked; a sample of every page is exact, a count known to exceed the limit is
// never estimated below it, and a stream within the limit stays exact beside it.
func TestABacklogPastTheExactLimitIsEstimatedFromASampleOfPages(t *testing.T) {
	t.Parallel()
	inEachLayout(t, func(t *testing.T, f *backlogFixture) {
		// 24,000 rows: 3,000 failed, 21,000 pending of which 1,200 deferred (1 mod 20 is odd).
		f.add(t, "big", 24000, 8)
		wantSmall := Backlog{Stream: "small", Pending: 45, Failed: 5, Deferred: 3}
		for _, c := range []struct {
			name       string
			pages      func() int64
			check      func(b Backlog) bool
			estimated  bool
			wantString string
		}{
			{"a sample of every page is exact", func() int64 { return 1 << 40 },
				func(b Backlog) bool { return b.Pending == 21000 && b.Failed == 3000 && b.Deferred == 1200 },
				false, "exactly 21,000 pending, 3,000 failed, 1,200 deferred"},
			{"a sample of a quarter of the pages is near", func() int64 { return f.pages(t) / 4 },
				func(b Backlog) bool {
					return within(b.Pending, 21000, 0.3) && within(b.Failed, 3000, 0.3) && within(b.Deferred, 1200, 0.4)
				},
				true, "21,000 pending ±30 %, 3,000 failed ±30 %, 1,200 deferred ±40 %"},
			{"a sample of one page never goes below the limit", func() int64 { return 1 },
				func(b Backlog) bool { return b.Pending > 1000 && b.Failed > 1000 && b.Deferred <= b.Pending },
				true, "more than 1,000 pending and failed"},
		} {
			f.store.samplePages = c.pages()
			got, err := f.store.Backlogs(f.ctx, []string{"small", "big"})
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if len(got) != 2 || got[0].Stream != "small" || got[1].Stream != "big" {
				t.Fatalf("%s: sampled %+v; want small, then big", c.name, got)
			}
			small := got[0]
			small.OldestPendingAge = 0
			if small != wantSmall {
				t.Errorf("%s: small stream %+v; want %+v (exact, not estimated)", c.name, small, wantSmall)
			}
			if big := got[1]; !c.check(big) || big.Estimated != c.estimated || big.Leased != 0 {
				t.Errorf("%s: big stream %+v; want %s, estimated %v", c.name, big, c.wantString, c.estimated)
			}
		}
	})
}

// Past the limit, a sample reads about the same pages however long the backlog: a
// backlog five times longer costs less than twice as many buffers. Counting every row
// grew with the backlog (each pending row was read twice, once for the deferred count).
func TestSamplingABacklogPastTheLimitReadsAboutTheSamePagesHoweverLongItIs(t *testing.T) {
	t.Parallel()
	f := newBacklogFixture(t, migrations.Plain)
	f.store.samplePages = 50
	buffers := func() int64 {
		pages := f.pages(t)
		percent := min(100, 100*float64(f.store.samplePages)/float64(pages))
		return f.buffers(t, f.store.sql.backlog, []string{"big"}, f.store.countLimit+1) +
			f.buffers(t, f.store.sql.backlogSample, []string{"big"}, percent)
	}
	f.add(t, "big", 20000, 8)
	short := buffers()
	f.add(t, "big", 80000, 8)
	long := buffers()
	t.Logf("buffers: %d for 20,000 rows, %d for 100,000", short, long)
	if long >= 2*short {
		t.Fatalf("sampling 100,000 rows read %d buffers, 20,000 rows %d: the cost grows with the backlog", long, short)
	}
}

// Within the limit, a sample counts a stream's pending and deferred rows from their
// indexes and does not read the rows themselves: 20,000 pending rows of 1 KiB fill about
// 2,900 heap pages, and the sample touches a small share of that. The deferred rows had
// no index before migration 0008, and counting them read every pending row's page.
func TestCountingABacklogWithinTheLimitReadsIndexesNotTheRows(t *testing.T) {
	t.Parallel()
	inEachLayout(t, func(t *testing.T, f *backlogFixture) {
		f.store.countLimit = 100_000
		q := f.pg.Table.Qualified()
		if _, err := f.pg.Pool.Exec(f.ctx, `
				INSERT INTO `+q+` (stream, topic, payload, deferred_since, last_error)
				SELECT 'big', 't', convert_to(repeat(md5(g::text), 32), 'UTF8'),
				       CASE WHEN g % 1000 = 0 THEN now() END, CASE WHEN g % 1000 = 0 THEN 'connection refused' END
				FROM generate_series(1, 20000) g`); err != nil {
			t.Fatal(err)
		}
		f.vacuumAllVisible(t)
		got, err := f.store.Backlogs(f.ctx, []string{"big"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Pending != 20000 || got[0].Deferred != 20 || got[0].Estimated {
			t.Fatalf("sampled %+v; want exactly 20,000 pending, 20 deferred", got)
		}
		pages := f.pages(t)
		read := f.buffers(t, f.store.sql.backlog, []string{"big"}, f.store.countLimit+1)
		t.Logf("the sample touched %d buffers; the table has %d pages", read, pages)
		if read*4 > pages {
			t.Fatalf("the sample touched %d buffers, more than a quarter of the table's %d pages: it reads the rows", read, pages)
		}
	})
}

// Every page that tells where backlog counts turn into estimates names ExactCountLimit,
// and none names another bound for them.
func TestTheDocsNameTheExactCountLimit(t *testing.T) {
	limit := thousands(ExactCountLimit)
	bound := regexp.MustCompile(`(?:past|up to) ([0-9]{1,3}(?:,[0-9]{3})+)`)
	for _, page := range []string{"metrics.md", "operations.md", "configuration.md", "sql-inspection.md"} {
		doc, err := os.ReadFile("../docs/" + page)
		if err != nil {
			t.Fatal(err)
		}
		named := false
		for _, sentence := range regexp.MustCompile(`[^.|]*estimat[^.|]*`).FindAllString(string(doc), -1) {
			for _, m := range bound.FindAllStringSubmatch(sentence, -1) {
				if m[1] != limit {
					t.Errorf("docs/%s says estimates start past %s; ExactCountLimit is %s: %q", page, m[1], limit, sentence)
				}
				named = true
			}
		}
		if !named {
			t.Errorf("docs/%s does not say that counts past %s are estimated", page, limit)
		}
	}
}

// thousands writes n with commas between groups of three digits, as the docs do.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// inEachLayout runs test, in parallel, on a backlog fixture of each table layout.
func inEachLayout(t *testing.T, test func(t *testing.T, f *backlogFixture)) {
	t.Helper()
	for _, layout := range []migrations.Layout{migrations.Plain, migrations.Partitioned} {
		t.Run(layout.String(), func(t *testing.T) {
			t.Parallel()
			test(t, newBacklogFixture(t, layout))
		})
	}
}
