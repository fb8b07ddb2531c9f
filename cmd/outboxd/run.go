package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/outboxd/outboxd/config"
)

func runCmd(ctx context.Context, e env) error {
	fs := newFlags("run", e.stderr)
	migrate := fs.Bool("migrate", false, "apply pending schema migrations before starting")
	if err := parseFlags(fs, e.args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("run: unexpected argument %q", fs.Arg(0))}
	}
	cfg, err := loadConfig(e, fs)
	if err != nil {
		return err
	}
	logger := newLogger(cfg.Log, e.stderr)
	logger.Info("outboxd starting", "version", version, "config", cfg)
	d, err := newDispatcher(ctx, cfg, logger, dispatcherOptions{migrate: *migrate})
	if err != nil {
		return err
	}
	logger.Info("dispatching", "streams", len(d.pipelines), "table", cfg.Table().String())
	err = d.run(ctx)
	logger.Info("outboxd stopped", "err", err)
	return err
}

// newLogger builds the process logger from the log settings (validated by config).
func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(strings.ToUpper(c.Level)))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
