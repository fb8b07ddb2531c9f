package dispatch

import "log/slog"

// orDiscard is the defaulting every constructor of this package shares: a nil emitter
// becomes one that drops every event, a nil logger one that writes nothing.
func orDiscard(emit Emitter, logger *slog.Logger) (Emitter, *slog.Logger) {
	if emit == nil {
		emit = discardEmitter{}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return emit, logger
}
