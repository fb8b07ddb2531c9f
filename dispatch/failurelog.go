package dispatch

import (
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/outboxd/outboxd/events"
)

// Defaults of the failure log: per stream, the first DefaultFailureLogBurst failures
// of every DefaultFailureLogInterval are logged in full, the rest counted.
const (
	DefaultFailureLogBurst    = 10
	DefaultFailureLogInterval = time.Minute
)

// reasonExpired is the reason a log line and a dead letter give an expired message,
// beside MessageFailed's permanent, attempts_exhausted and max_defer.
const reasonExpired = "expired"

// failureLogKeyBytes bounds the key a line shows: keys are producers' bytes, of any
// length.
const failureLogKeyBytes = 128

// FailureLog writes one WARN line per message that failed for good (events.MessageFailed)
// or expired before delivery (events.MessageExpired, reason "expired") so that an operator sees which message, of which key, failed and why, without a query.
// Lines are limited per stream: a poisoned stream failing thousands of messages a second
// logs its first burst of every interval in full and then one line counting the rest,
// and never crowds out another stream's failures, which have their own allowance.
//
// It subscribes synchronously to the bus (Handle): it must count every failure to say
// how many were left out, and past the burst a failure costs one counter increment
// under a lock. The summary of a window is written when the window ends (a timer), when
// the stream's next failure opens a new one, or at Close.
type FailureLog struct {
	cfg FailureLogConfig
	log *slog.Logger

	mu      sync.Mutex
	streams map[string]*failureWindow
}

// failureWindow is one stream's current interval.
type failureWindow struct {
	start      time.Time
	open       bool // a window is running: start is valid
	logged     int
	suppressed int
	gen        uint64      // bumped per window, so a late timer of a past window does nothing
	timer      *time.Timer // ends a window in which lines were suppressed
}

// FailureLogConfig tunes a FailureLog; zero or negative values take the defaults.
type FailureLogConfig struct {
	Burst    int           // lines logged in full per stream and interval (DefaultFailureLogBurst)
	Interval time.Duration // the window Burst applies to (DefaultFailureLogInterval)
}

// NewFailureLog builds a failure log; logger may be nil.
func NewFailureLog(cfg FailureLogConfig, logger *slog.Logger) *FailureLog {
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultFailureLogBurst
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultFailureLogInterval
	}
	_, logger = orDiscard(nil, logger)
	return &FailureLog{cfg: cfg, log: logger, streams: map[string]*failureWindow{}}
}

// IsMessageFailed selects the events the failure log handles (events.Filter): messages
// failed for good and messages expired before delivery.
func IsMessageFailed(e events.Event) bool {
	switch e.(type) {
	case events.MessageFailed, events.MessageExpired:
		return true
	}
	return false
}

// Handle logs or counts one event; events other than MessageFailed and MessageExpired
// are ignored. An expiry shares its stream's allowance with the failures: both are
// messages that will not reach the broker. Safe for concurrent use.
func (l *FailureLog) Handle(e events.Event) {
	var f events.MessageFailed
	switch e := e.(type) {
	case events.MessageFailed:
		f = e
	case events.MessageExpired:
		f = events.MessageFailed{Stream: e.Stream, ID: e.ID, Topic: e.Topic, Key: e.Key,
			Attempts: e.Attempts, Reason: reasonExpired, Err: e.Err}
	default:
		return
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.streams[f.Stream]
	if w == nil {
		w = &failureWindow{}
		l.streams[f.Stream] = w
	}
	if !w.open || now.Sub(w.start) >= l.cfg.Interval {
		l.summarize(f.Stream, w)
		w.start, w.open, w.logged = now, true, 0
		w.gen++
	}
	if w.logged < l.cfg.Burst {
		w.logged++
		msg := "message failed for good; its row stays failed in the outbox table"
		if f.Reason == reasonExpired {
			msg = "message expired before delivery and was not published; its row is marked expired in the outbox table"
		}
		l.log.Warn(msg, "stream", f.Stream, "id", f.ID, "key", showKey(f.Key), "topic", f.Topic,
			"attempts", f.Attempts, "reason", f.Reason, "err", f.Err)
		return
	}
	w.suppressed++
	if w.timer == nil {
		stream, gen := f.Stream, w.gen
		w.timer = time.AfterFunc(w.start.Add(l.cfg.Interval).Sub(now), func() { l.windowEnded(stream, gen) })
	}
}

// windowEnded writes the summary of a window in which lines were suppressed, unless a
// newer window replaced it meanwhile.
func (l *FailureLog) windowEnded(stream string, gen uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.streams[stream]
	if w == nil || w.gen != gen {
		return
	}
	w.timer = nil
	l.summarize(stream, w)
	w.open = false
}

// summarize writes the line counting a window's suppressed failures, if any. l.mu held.
func (l *FailureLog) summarize(stream string, w *failureWindow) {
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	if w.suppressed == 0 {
		return
	}
	l.log.Warn(fmt.Sprintf("%d more messages of stream %s failed for good or expired; not logged, to keep the log readable (limit: %d a stream every %s)",
		w.suppressed, stream, l.cfg.Burst, l.cfg.Interval),
		"stream", stream, "suppressed", w.suppressed, "interval", l.cfg.Interval)
	w.suppressed = 0
}

// Close writes the summaries of the windows still open, so that no failure goes
// uncounted at shutdown. Call it after the loops stopped emitting.
func (l *FailureLog) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for stream, w := range l.streams {
		l.summarize(stream, w)
		w.open = false
		w.gen++
	}
}

// showKey renders a message key for a log line: as text when it is UTF-8, in hex when
// it is not, cut to failureLogKeyBytes of the key.
func showKey(key []byte) string {
	cut := key[:min(len(key), failureLogKeyBytes)]
	var s string
	if utf8.Valid(key) {
		for len(cut) < len(key) && len(cut) > 0 && !utf8.RuneStart(key[len(cut)]) {
			cut = cut[:len(cut)-1] // never split a character
		}
		s = string(cut)
	} else {
		s = "0x" + hex.EncodeToString(cut)
	}
	if len(cut) < len(key) {
		s += fmt.Sprintf("… (%d bytes)", len(key))
	}
	return s
}
