package app

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// smapsEntry is one mapping as /proc/<pid>/smaps shows it, with the lines startSpans
// reads.
func smapsEntry(r, perms string, inode, rss, anon int) string {
	return r + " " + perms + " 00000000 fe:00 " + strconv.Itoa(inode) + "   /bin/outboxd\n" +
		"Size:              1024 kB\n" +
		"Rss:               " + strconv.Itoa(rss) + " kB\n" +
		"Anonymous:         " + strconv.Itoa(anon) + " kB\n" +
		"VmFlags: rd mr mw me\n"
}

func TestOnlyTheExecutablesUnwrittenReadOnlyMappingsAreReleased(t *testing.T) {
	const exe = 42
	for _, tc := range []struct {
		name  string
		smaps string
		want  int // spans found
	}{
		{"The executable's text, resident and never written, is released",
			smapsEntry("00400000-00500000", "r-xp", exe, 800, 0), 1},
		{"The executable's read-only data is released",
			smapsEntry("00500000-00600000", "r--p", exe, 700, 0), 1},
		{"A writable mapping of the executable keeps its pages",
			smapsEntry("00600000-00700000", "rw-p", exe, 500, 0), 0},
		{"A read-only mapping holding a copy on write (a relocated segment) keeps its pages",
			smapsEntry("00500000-00600000", "r--p", exe, 700, 4), 0},
		{"Another file's mapping is not the executable's to release",
			smapsEntry("7f0000000000-7f0000100000", "r-xp", exe+1, 300, 0), 0},
		{"A mapping with nothing resident is left alone",
			smapsEntry("00400000-00500000", "r-xp", exe, 0, 0), 0},
		{"A mapping whose Anonymous line is missing is not trusted",
			"00400000-00500000 r-xp 00000000 fe:00 42 /bin/outboxd\nRss: 800 kB\n", 0},
		{"Of a whole map, the text and read-only data are released and the rest kept",
			smapsEntry("00400000-00500000", "r-xp", exe, 800, 0) +
				smapsEntry("00500000-00600000", "r--p", exe, 700, 0) +
				smapsEntry("00600000-00700000", "rw-p", exe, 500, 200) +
				smapsEntry("00700000-00800000", "rw-p", 0, 100, 100), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spans, err := startSpans(strings.NewReader(tc.smaps), exe)
			if err != nil {
				t.Fatal(err)
			}
			if len(spans) != tc.want {
				t.Fatalf("found %d spans to release (%+v); want %d", len(spans), spans, tc.want)
			}
			for _, s := range spans {
				if s.end <= s.start || s.rssKiB <= 0 {
					t.Errorf("span %+v: want a non-empty range with pages resident", s)
				}
			}
		})
	}
}

// rssFileKiB reads this process's resident pages of files, in KiB.
func rssFileKiB(t *testing.T) int64 {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "RssFile:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no RssFile in /proc/self/status on this kernel")
	return 0
}

// TestReleasingTheStartsPagesShrinksTheResidentSetAndTheProcessRunsOn releases the
// test binary's own pages, as outboxd run does after its start, and sees its resident
// pages of files fall; the test running on to its end is the code faulting back in.
func TestReleasingTheStartsPagesShrinksTheResidentSetAndTheProcessRunsOn(t *testing.T) {
	before := rssFileKiB(t)
	released, err := releaseStartPages()
	if err != nil {
		t.Fatal(err)
	}
	after := rssFileKiB(t)
	t.Logf("resident pages of files: %d KiB before, %d after; %d KiB of the executable released", before, after, released)
	if released < 1024 {
		t.Fatalf("released %d KiB of the executable; a Go test binary has megabytes of it resident", released)
	}
	if after > before-released/2 {
		t.Fatalf("resident pages of files went from %d to %d KiB; want at least half of the %d released gone", before, after, released)
	}
}
