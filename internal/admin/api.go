package admin

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/outboxd/outboxd/internal/ops"
)

func (s *server) stats(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var allowed []string
	if s.multi {
		allowed = []string{"outbox"}
	}
	if err := checkParams(q, allowed); err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	if s.multi && !q.Has("outbox") {
		writeJSON(w, http.StatusOK, s.allStats(ctx))
		return
	}
	o, err := s.pick(q.Get("outbox"), "")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	st, err := s.statsOf(ctx, o)
	s.answer(w, r, st, err)
}

// messageParams are the query parameters GET /api/v1/messages accepts.
var messageParams = []string{"status", "stream", "since", "until", "cursor", "limit", "outbox", "from_id", "to_id", "key", "topic", "error"}

func (s *server) messages(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := checkParams(q, messageParams); err != nil {
		s.fail(w, r, err)
		return
	}
	o, err := s.pick(q.Get("outbox"), q.Get("stream"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	page, err := o.ops.ListMessages(ctx, ops.MessageQuery{
		Status: q.Get("status"), Stream: q.Get("stream"), Since: q.Get("since"), Until: q.Get("until"),
		Cursor: q.Get("cursor"), Limit: q.Get("limit"), FromID: q.Get("from_id"), ToID: q.Get("to_id"),
		Key: q.Get("key"), Topic: q.Get("topic"), Error: q.Get("error"),
	})
	s.answer(w, r, page, err)
}

func (s *server) requeue(w http.ResponseWriter, r *http.Request) {
	var req ops.RequeueRequest
	o, ok := s.writeRequest(w, r, &req, &req.Outbox, &req.Stream)
	if !ok {
		return
	}
	// Each chunk has its own deadline; the whole request stays within the server's
	// write timeout. A requeue cut short keeps what it did, and asking again goes on.
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	res, err := o.ops.Requeue(ctx, req, nil)
	if err == nil || !errors.Is(err, ops.ErrInvalid) {
		limit := 0
		if req.Limit != nil {
			limit = *req.Limit
		}
		log := s.log.With("requeued", res.Requeued, "by_ids", req.IDs != nil, "ids", len(req.IDs), "stream", req.Stream,
			"since", req.Since, "until", req.Until, "limit", limit, "all", req.All, "outbox", o.Name, "remote", r.RemoteAddr)
		if err != nil {
			log.Warn("requeue stopped", "err", err)
		} else {
			log.Info("requeued failed messages")
		}
	}
	s.answer(w, r, res, err)
}

func (s *server) skip(w http.ResponseWriter, r *http.Request) {
	var req ops.SkipRequest
	o, ok := s.writeRequest(w, r, &req, &req.Outbox, &req.Stream)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	res, err := o.ops.Skip(ctx, req)
	if err == nil {
		key := ""
		if req.Key != nil {
			key = *req.Key
		}
		s.log.Info("skipped messages", "skipped", res.Skipped, "ids", len(req.IDs), "stream", req.Stream, "key", key,
			"head", res.ID, "outbox", o.Name, "remote", r.RemoteAddr)
	}
	s.answer(w, r, res, err)
}

// replayBudget is how long one replay request copies before it answers: a replay still
// running then answers with state "running" and its id, and the client asks again with
// {"resume": id}. Half the request timeout leaves room for the chunk under way.
const replayBudget = requestTimeout / 2

func (s *server) replay(w http.ResponseWriter, r *http.Request) {
	var req ops.ReplayRequest
	o, ok := s.writeRequest(w, r, &req, &req.Outbox, &req.Stream)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	res, err := o.ops.Replay(ctx, req, ops.ReplayOptions{By: "admin API " + r.RemoteAddr, Stop: time.Now().Add(replayBudget)})
	if err == nil || !errors.Is(err, ops.ErrInvalid) {
		log := s.log.With("replay", res.ID, "stream", res.Stream, "state", res.State, "copied", res.Copied, "total", res.Total,
			"dry_run", req.DryRun, "resume", req.Resume, "cancel", req.Cancel, "outbox", o.Name, "remote", r.RemoteAddr)
		if err != nil {
			log.Warn("replay stopped", "err", err)
		} else {
			log.Info("replayed delivered messages")
		}
	}
	s.answer(w, r, res, err)
}

// answer writes an operation's result with 200, or its error through fail.
func (s *server) answer(w http.ResponseWriter, r *http.Request, result any, err error) {
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, result)
}

// noParams refuses query parameters on an endpoint that takes none, so that a typo
// is not silently ignored.
func (s *server) noParams(w http.ResponseWriter, r *http.Request) bool {
	if err := checkParams(r.URL.Query(), nil); err != nil {
		s.fail(w, r, err)
		return false
	}
	return true
}

func checkParams(q url.Values, allowed []string) error {
	var unknown []string
	for k, v := range q {
		known := false
		for _, a := range allowed {
			known = known || a == k
		}
		switch {
		case !known:
			unknown = append(unknown, paramName(k))
		case len(v) > 1:
			return badRequest("query parameter %s is given %d times; give it once", k, len(v))
		case v[0] == "":
			// An empty value would read as no filter, listing what the client meant to exclude.
			return badRequest("query parameter %s has no value; leave it out for no filter", k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	if len(allowed) == 0 {
		return badRequest("this endpoint takes no query parameters, got %s", strings.Join(unknown, ", "))
	}
	return badRequest("unknown query parameter %s; this endpoint takes %s", strings.Join(unknown, ", "), strings.Join(allowed, ", "))
}

// paramName quotes a parameter name that is empty or holds anything but letters, digits
// and _.-, so the error shows it unambiguously.
func paramName(k string) string {
	if k == "" || strings.ContainsFunc(k, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && !strings.ContainsRune("_.-", r)
	}) {
		return strconv.Quote(k)
	}
	return k
}

// fail answers err, the one place an error becomes a status: a request this edge could
// not read with its own status, an operation's refusal with 400 (ops.ErrInvalid) or 409
// (ops.ErrConflict), anything else (the database) with 500, or 503 past its deadline, and
// the error's text, which names the operation and the table and never a credential.
// Server-side failures are logged: the operator reads logs, not responses.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var re *requestError
	switch {
	case errors.As(err, &re):
		writeError(w, re.status, re.msg)
		return
	case errors.Is(err, ops.ErrInvalid):
		writeError(w, http.StatusBadRequest, err.Error())
		return
	case errors.Is(err, ops.ErrConflict):
		writeError(w, http.StatusConflict, err.Error())
		return
	}
	status := http.StatusInternalServerError
	if errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusServiceUnavailable
	}
	s.log.Error("admin request failed", "path", r.URL.Path, "err", err)
	writeError(w, status, err.Error())
}

// writeRequest reads a write's JSON body into req, refusing query parameters, and picks
// the outbox that *outbox and *stream (fields of req, read once it is decoded) name. On
// false it has answered the request.
func (s *server) writeRequest(w http.ResponseWriter, r *http.Request, req any, outbox, stream *string) (served, bool) {
	if !s.noParams(w, r) {
		return served{}, false
	}
	if err := decodeBody(w, r, req); err != nil {
		s.fail(w, r, err)
		return served{}, false
	}
	o, err := s.pick(*outbox, *stream)
	if err != nil {
		s.fail(w, r, err)
		return served{}, false
	}
	return o, true
}
