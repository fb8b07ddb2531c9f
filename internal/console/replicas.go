package console

import (
	"context"
	"net/http"
	"time"

	"github.com/outboxd/outboxd/internal/ops"
)

// replicasData is the replicas page: the replica serving it, and per outbox the
// database sessions holding its janitor or flow locks.
type replicasData struct {
	Version  string
	Uptime   string
	Outboxes []outboxHolders
}

type outboxHolders struct {
	Name    string
	Holders []holderRow
	Error   string
}

type holderRow struct {
	ops.Holder
	Connected string
}

func (c *console) replicas(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	d := replicasData{Version: c.opt.Version}
	now := c.now()
	if !c.opt.Started.IsZero() {
		d.Uptime = now.Sub(c.opt.Started).Round(time.Second).String()
	}
	for _, o := range c.opt.Outboxes() {
		oh := outboxHolders{Name: o.Name}
		if o.Store == nil {
			oh.Error = errWaiting(o.Name).Error()
			d.Outboxes = append(d.Outboxes, oh)
			continue
		}
		hs, err := ops.New(o.Store, c.now).Holders(ctx, o.Streams)
		if err != nil {
			c.log.Warn("console lock holders failed", "outbox", o.Name, "err", err)
			oh.Error = err.Error()
		}
		for _, h := range hs {
			row := holderRow{Holder: h, Connected: "—"}
			if !h.Since.IsZero() {
				row.Connected = now.Sub(h.Since).Round(time.Second).String()
			}
			oh.Holders = append(oh.Holders, row)
		}
		d.Outboxes = append(d.Outboxes, oh)
	}
	c.render(w, http.StatusOK, sessionOf(r), "replicas", d)
}
