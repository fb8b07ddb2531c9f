package console

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/outboxd/outboxd/internal/ops"
)

// action is a requested change as the console's forms carry it: requeue, skip or
// replay, of one message (ID) or of a stream's messages (Stream, with Key for the head
// of a key, Since and Until for a window).
// A filter's whole result also carries the listing's other filters: Topic, Error
// (text of the last error) and the id range FromID..ToID.
type action struct {
	Kind, Outbox, Stream, Key, Since, Until string
	Topic, Error                            string
	ID, FromID, ToID                        int64
	HasKey                                  bool
}

func actionOf(r *http.Request) (action, error) {
	a := action{Kind: r.PostFormValue("action"), Outbox: r.PostFormValue("outbox"), Stream: r.PostFormValue("stream"),
		Since: r.PostFormValue("since"), Until: r.PostFormValue("until"), Topic: r.PostFormValue("topic"),
		Error: r.PostFormValue("error")}
	a.Key, a.HasKey = r.PostFormValue("key"), r.PostForm.Has("key")
	for _, f := range []struct {
		name string
		to   *int64
	}{{"id", &a.ID}, {"from_id", &a.FromID}, {"to_id", &a.ToID}} {
		if v := r.PostFormValue(f.name); v != "" {
			id, err := strconv.ParseInt(v, 10, 64)
			if err != nil || id < 1 {
				return a, fmt.Errorf("%s: want a message id, a whole number from 1, got %q", f.name, v)
			}
			*f.to = id
		}
	}
	switch a.Kind {
	case "requeue", "skip", "replay":
	default:
		return a, fmt.Errorf("action: want requeue, skip or replay, got %q", a.Kind)
	}
	if a.Kind == "replay" && (a.Error != "" || a.FromID > 0 || a.ToID > 0) {
		return a, fmt.Errorf("a replay takes a stream, a time window, a key and a topic: drop the error text and the id range from the filter")
	}
	return a, nil
}

func (a action) requeue() ops.RequeueRequest {
	if a.ID > 0 {
		return ops.RequeueRequest{Outbox: a.Outbox, IDs: []int64{a.ID}}
	}
	return ops.RequeueRequest{Outbox: a.Outbox, Stream: a.Stream, Since: a.Since, Until: a.Until, All: true,
		FromID: a.FromID, ToID: a.ToID, Key: a.Key, Topic: a.Topic, ErrorContains: a.Error}
}

func (a action) skip() ops.SkipRequest {
	if a.ID > 0 {
		return ops.SkipRequest{Outbox: a.Outbox, IDs: []int64{a.ID}}
	}
	key := a.Key
	return ops.SkipRequest{Outbox: a.Outbox, Stream: a.Stream, Key: &key}
}

func (a action) replay() ops.ReplayRequest {
	req := ops.ReplayRequest{Outbox: a.Outbox, Stream: a.Stream, Since: a.Since, Until: a.Until, Topic: a.Topic}
	if a.HasKey && a.Key != "" {
		key := a.Key
		req.Key = &key
	}
	return req
}

// What says, for a person, what the action names.
func (a action) What() string {
	switch {
	case a.Kind == "requeue" && a.ID > 0:
		return fmt.Sprintf("requeue message %d", a.ID)
	case a.Kind == "requeue":
		return "requeue every failed message of stream " + a.Stream + narrowed(a) + window(a)
	case a.Kind == "skip" && a.ID > 0:
		return fmt.Sprintf("skip message %d", a.ID)
	case a.Kind == "skip":
		return fmt.Sprintf("skip the head of key %q of stream %s", a.Key, a.Stream)
	}
	return "replay the delivered messages of stream " + a.Stream + narrowed(a) + window(a)
}

// narrowed says which of the listing's filters narrow a bulk action.
func narrowed(a action) string {
	var out string
	if a.Key != "" {
		out += fmt.Sprintf(" with key %q", a.Key)
	}
	if a.Topic != "" {
		out += fmt.Sprintf(" with topic %q", a.Topic)
	}
	if a.Error != "" {
		out += fmt.Sprintf(" whose last error contains %q", a.Error)
	}
	switch {
	case a.FromID > 0 && a.ToID > 0:
		out += fmt.Sprintf(" with ids %d to %d", a.FromID, a.ToID)
	case a.FromID > 0:
		out += fmt.Sprintf(" with ids from %d", a.FromID)
	case a.ToID > 0:
		out += fmt.Sprintf(" with ids up to %d", a.ToID)
	}
	return out
}

func window(a action) string {
	switch {
	case a.Since != "" && a.Until != "":
		return " created from " + a.Since + " until " + a.Until
	case a.Since != "":
		return " created since " + a.Since
	case a.Until != "":
		return " created before " + a.Until
	}
	return ""
}

// confirmData is the confirmation page: the action, as hidden fields of the form that
// carries it out, and how many messages it would change now.
type confirmData struct {
	A     action
	Count int64
	Note  string
}

// confirm counts what an action would change, changing nothing, and asks.
func (c *console) confirm(w http.ResponseWriter, r *http.Request) {
	a, err := actionOf(r)
	if err != nil {
		c.fail(w, r, sessionOf(r), http.StatusBadRequest, err.Error())
		return
	}
	_, o, err := c.pick(a.Outbox, a.Stream)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	d := confirmData{A: a}
	switch a.Kind {
	case "requeue":
		d.Count, err = o.CountRequeue(ctx, a.requeue())
		if a.ID > 0 {
			d.Note = "only if it is still failed when you confirm"
		}
	case "skip":
		err = a.skip().Check()
		d.Count, d.Note = 1, "only if it is still failed or pending (and not leased) when you confirm"
	case "replay":
		var res ops.ReplayResult
		req := a.replay()
		req.DryRun = true
		res, err = o.Replay(ctx, req, ops.ReplayOptions{})
		d.Count, d.Note = res.Total, "each copied as a new pending message"
	}
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	c.render(w, http.StatusOK, sessionOf(r), "confirm", d)
}

// doneData is the page after an action: what it did.
type doneData struct {
	A       action
	Summary string
}

// act carries an action out through ops and logs who did it.
func (c *console) act(w http.ResponseWriter, r *http.Request) {
	s := sessionOf(r)
	a, err := actionOf(r)
	if err != nil {
		c.fail(w, r, s, http.StatusBadRequest, err.Error())
		return
	}
	box, o, err := c.pick(a.Outbox, a.Stream)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	log := c.log.With("action", a.Kind, "by", string(s.role), "outbox", box.Name, "remote", r.RemoteAddr)
	if a.ID > 0 {
		log = log.With("id", a.ID)
	} else {
		log = log.With("stream", a.Stream, "filter", a.What())
	}
	var summary string
	var n int64
	switch a.Kind {
	case "requeue":
		var res ops.RequeueResult
		res, err = o.Requeue(ctx, a.requeue(), nil)
		n, summary = res.Requeued, fmt.Sprintf("requeued %d message(s)", res.Requeued)
	case "skip":
		var res ops.SkipResult
		res, err = o.Skip(ctx, a.skip())
		n, summary = res.Skipped, fmt.Sprintf("skipped %d message(s)", res.Skipped)
		if res.ID > 0 {
			summary = fmt.Sprintf("skipped message %d, the head of key %q", res.ID, a.Key)
		}
	case "replay":
		var res ops.ReplayResult
		res, err = o.Replay(ctx, a.replay(), ops.ReplayOptions{By: "console (" + string(s.role) + " token) " + r.RemoteAddr,
			Stop: time.Now().Add(replayBudget)})
		n, summary = res.Copied, res.Summary()
	}
	if err != nil {
		log.Warn("console action refused or failed", "err", err)
		c.failErr(w, r, err)
		return
	}
	log.Info("console action", "changed", n)
	c.render(w, http.StatusOK, s, "done", doneData{A: a, Summary: summary})
}
