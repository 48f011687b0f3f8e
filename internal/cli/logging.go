package cli

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
)

// Logging is how a command writes its structured logs.
type Logging struct {
	Format string
	Level  string
}

// Register defines the logging flags on fs.
func (l *Logging) Register(fs *flag.FlagSet) {
	fs.StringVar(&l.Format, "log-format", "text", "log `format`: text or json")
	fs.StringVar(&l.Level, "log-level", "info", "least severe `level` logged: debug, info, warn or error")
}

// Validate checks the settings.
func (l *Logging) Validate() error {
	if l.Format != "text" && l.Format != "json" {
		return fmt.Errorf("%w: --log-format must be text or json, not %q", ErrUsage, l.Format)
	}
	if _, err := l.level(); err != nil {
		return err
	}
	return nil
}

func (l *Logging) level() (slog.Level, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(l.Level)); err != nil {
		return 0, fmt.Errorf("%w: --log-level must be debug, info, warn or error, not %q", ErrUsage, l.Level)
	}
	return lv, nil
}

// Logger is a logger writing to w as the settings say. Call Validate
// first: settings it refuses log text at info.
func (l *Logging) Logger(w io.Writer) *slog.Logger {
	lv, _ := l.level()
	opts := &slog.HandlerOptions{Level: lv}
	if l.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
