package app

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
)

// startSpan is one mapping of the executable that releaseStartPages may release.
type startSpan struct {
	start, end uintptr
	rssKiB     int64
	anonKiB    int64 // -1 until its Anonymous line is read
}

// releaseStartPages drops this process's mappings of the read-only pages of its own
// executable (madvise MADV_DONTNEED) and returns how many KiB were resident. A mapping
// that is writable, or holds a page of its own (a copy on write, as a relocated
// read-only segment of a dynamically linked binary would), is left as it is: there
// MADV_DONTNEED would discard what the process wrote.
func releaseStartPages() (int64, error) {
	exe, err := os.Stat("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	st, ok := exe.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("no inode for /proc/self/exe")
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	spans, err := startSpans(f, st.Ino)
	f.Close()
	if err != nil {
		return 0, err
	}
	var released int64
	for _, s := range spans {
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, s.start, s.end-s.start, syscall.MADV_DONTNEED); errno != 0 {
			return released, fmt.Errorf("madvise %#x-%#x: %w", s.start, s.end, errno)
		}
		released += s.rssKiB
	}
	return released, nil
}

// startSpans reads smaps (the format of /proc/<pid>/smaps) for the mappings of the file
// with inode ino that are readable, not writable, hold no page of their own (an
// Anonymous line reading 0) and have something resident.
func startSpans(smaps io.Reader, ino uint64) ([]startSpan, error) {
	var (
		out []startSpan
		cur startSpan // the mapping read now if it is a candidate so far; zero if not
	)
	flush := func() {
		if cur.end > 0 && cur.anonKiB == 0 && cur.rssKiB > 0 {
			out = append(out, cur)
		}
		cur = startSpan{}
	}
	sc := bufio.NewScanner(smaps)
	for sc.Scan() {
		line := sc.Bytes()
		fields := bytes.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if bytes.HasSuffix(fields[0], []byte(":")) { // a "Key: value kB" line
			if cur.end == 0 || len(fields) < 2 {
				continue
			}
			n, err := strconv.ParseInt(string(fields[1]), 10, 64)
			if err != nil {
				continue // VmFlags and the like
			}
			switch string(fields[0]) {
			case "Rss:":
				cur.rssKiB = n
			case "Anonymous:":
				cur.anonKiB = n
			}
			continue
		}
		// A mapping's header: start-end perms offset dev inode [path].
		flush()
		if len(fields) < 5 {
			continue
		}
		lo, hi, ok := bytes.Cut(fields[0], []byte("-"))
		perms := fields[1]
		inode, err := strconv.ParseUint(string(fields[4]), 10, 64)
		if !ok || err != nil || inode != ino || len(perms) < 2 || perms[0] != 'r' || perms[1] != '-' {
			continue
		}
		start, err1 := strconv.ParseUint(string(lo), 16, 64)
		end, err2 := strconv.ParseUint(string(hi), 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		cur = startSpan{start: uintptr(start), end: uintptr(end), anonKiB: -1}
	}
	flush()
	return out, sc.Err()
}
