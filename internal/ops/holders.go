package ops

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Holder is one database session holding the table's janitor lock or flow locks: a
// replica at work, seen from the database. A replica that holds no lock at the moment
// (no janitor turn, no stream flowing) has no row.
type Holder struct {
	PID         int32     `json:"pid"`
	Application string    `json:"application_name"`
	ClientAddr  string    `json:"client_addr"`
	Since       time.Time `json:"backend_start"`
	Janitor     bool      `json:"janitor"`
	Flows       []string  `json:"flows"`
}

// Holders lists the sessions holding the janitor lock of the table or a flow lock of
// one of streams, one per session, the janitor's first.
func (o *Ops) Holders(ctx context.Context, streams []Stream) ([]Holder, error) {
	names := make([]string, len(streams))
	for i, s := range streams {
		names[i] = s.Name
	}
	locks, err := o.store.LockHolders(ctx, names)
	if err != nil {
		return nil, err
	}
	var out []Holder
	for _, l := range locks {
		i := slices.IndexFunc(out, func(h Holder) bool { return h.PID == l.PID })
		if i < 0 {
			out = append(out, Holder{PID: l.PID, Application: l.Application, ClientAddr: l.ClientAddr, Since: l.BackendStart})
			i = len(out) - 1
		}
		if l.Lock == "janitor" {
			out[i].Janitor = true
		} else {
			out[i].Flows = append(out[i].Flows, l.Stream)
		}
	}
	return out, nil
}

// Label names the session for a person: its application_name, else its pid and client.
func (h Holder) Label() string {
	if h.Application != "" {
		return h.Application
	}
	if h.ClientAddr != "" {
		return fmt.Sprintf("pid %d (%s)", h.PID, h.ClientAddr)
	}
	return fmt.Sprintf("pid %d", h.PID)
}
