package admin

import (
	"maps"
	"sync"

	"github.com/outboxd/outboxd/events"
)

// BreakerBoard keeps each stream's latest circuit-breaker state from the event bus, for
// Options.Breakers. Subscribe Observe synchronously: it only stores a string.
type BreakerBoard struct {
	mu     sync.Mutex
	states map[string]string
}

// NewBreakerBoard starts every stream closed, as a pipeline starts.
func NewBreakerBoard(streams []string) *BreakerBoard {
	b := &BreakerBoard{states: make(map[string]string, len(streams))}
	for _, s := range streams {
		b.states[s] = string(events.BreakerClosed)
	}
	return b
}

// Observe records a BreakerChanged event and ignores every other event.
func (b *BreakerBoard) Observe(e events.Event) {
	c, ok := e.(events.BreakerChanged)
	if !ok {
		return
	}
	b.mu.Lock()
	b.states[c.Stream] = string(c.To)
	b.mu.Unlock()
}

// IsBreakerChange is a bus filter passing only BreakerChanged events.
func IsBreakerChange(e events.Event) bool {
	_, ok := e.(events.BreakerChanged)
	return ok
}

// States returns a copy of every stream's state.
func (b *BreakerBoard) States() map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.states)
}
