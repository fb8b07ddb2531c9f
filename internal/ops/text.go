package ops

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxd/outboxd/store"
)

// WriteText writes each outbox's stats under a line naming it, or why it could not be
// read.
func (a AllStats) WriteText(w io.Writer) error {
	for i, o := range a.Outboxes {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "outbox %s (%s)\n", o.Outbox, o.Table)
		if o.Error != "" {
			if _, err := fmt.Fprintf(w, "  cannot read it: %s\n", o.Error); err != nil {
				return err
			}
			continue
		}
		if err := o.WriteText(w); err != nil {
			return err
		}
	}
	return nil
}

// WriteText writes s as a table for a person, one row per stream; the blocked-key
// columns appear only when a stream is ordered, and unserved streams are called out
// below the table.
func (s Stats) WriteText(w io.Writer) error {
	if len(s.Streams) == 0 {
		_, err := fmt.Fprintf(w, "%s: no stream is configured and none has pending, leased or failed messages\n", s.Table)
		return err
	}
	ordered := false
	for _, st := range s.Streams {
		ordered = ordered || st.Ordered
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := "STREAM\tDRIVER\tPENDING\tLEASED\tFAILED\tEXPIRED\tDEFERRED\tOLDEST PENDING"
	if ordered {
		header += "\tBLOCKED KEYS\tWAITING BEHIND"
	}
	fmt.Fprintln(tw, header)
	unserved, estimated := 0, false
	for _, st := range s.Streams {
		age := "-"
		if d := time.Duration(st.OldestPendingAgeSeconds * float64(time.Second)); d >= time.Second {
			age = d.Round(time.Second).String()
		} else if d > 0 {
			age = d.Round(time.Millisecond).String()
		}
		driver := orDash(st.Driver)
		if st.Unserved {
			driver, unserved = "UNSERVED", unserved+1
		}
		p, f, e, d := st.Approximate()
		estimated = estimated || p || f || e
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s", st.Stream, driver, count(st.Pending, p), st.Leased,
			count(st.Failed, f), count(st.Expired, e), count(st.Deferred, d), age)
		switch {
		case st.BlockedKeys != nil:
			fmt.Fprintf(tw, "\t%d\t%d", *st.BlockedKeys, *st.BlockedMessages)
		case ordered:
			fmt.Fprint(tw, "\t-\t-") // not ordered: no key is ever blocked
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if estimated {
		if _, err := fmt.Fprintf(w, "\n~ estimated from a sample of the table: counts past %d are not counted row by row.\n",
			store.ExactCountLimit); err != nil {
			return err
		}
	}
	if unserved > 0 {
		_, err := fmt.Fprintf(w, "\n%d UNSERVED stream(s): pending rows under a stream no configured stream names; "+
			"nobody delivers them (a producer's typo, or a stream not configured yet). See OutboxdUnservedMessages in docs/operations.md.\n", unserved)
		return err
	}
	return nil
}

// WriteText writes p's messages as a table for a person, times in the local zone and
// each last error on one line of at most 80 characters.
func (p MessagePage) WriteText(w io.Writer) error {
	if len(p.Messages) == 0 && p.NextCursor != "" {
		_, err := fmt.Fprintf(w, "no messages match in the %d rows scanned; more may match after them (narrow the filter, or go on with the cursor)\n", p.Scanned)
		return err
	}
	if len(p.Messages) == 0 {
		_, err := fmt.Fprintln(w, "no messages match")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTREAM\tTOPIC\tSTATUS\tATTEMPTS\tCREATED\tLAST ERROR")
	for _, m := range p.Messages {
		status := m.Status
		switch {
		case m.DeferredSince != nil:
			status += " (deferred since " + m.DeferredSince.Local().Format(time.DateTime) + ")"
		case m.LeaseUntil != nil:
			status += " (by " + m.Owner + " until " + m.LeaseUntil.Local().Format(time.TimeOnly) + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\n", m.ID, m.Stream, m.Topic, status, m.Attempts,
			m.CreatedAt.Local().Format(time.DateTime), orDash(oneLine(m.LastError, 80)))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine flattens s to one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// count writes n, marked "~" when it is an estimate.
func count(n int64, estimated bool) string {
	if estimated {
		return "~" + strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(n, 10)
}
