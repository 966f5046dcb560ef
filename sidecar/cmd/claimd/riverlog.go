package main

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/rs/zerolog"
)

// riverLogger is the dispatcher's (River's) logger: its slog records go to
// claimd's zerolog log through zerolog's own slog handler, one JSON line
// each, with component=river. River logs its own trouble there (a lost
// database connection, a failed leadership election, a job that panicked)
// at warn and error; its info and debug chatter is left out unless claimd
// logs at debug. Errors are logged as their message, as claimd logs them.
//
// Never a payload: River's records carry job kinds, ids, queue names and
// errors, and the dispatch job's arguments are a claim id and a source;
// attributes that could carry data anyway (a notification's payload, job
// arguments or metadata) are dropped by name.
func riverLogger(log zerolog.Logger) *slog.Logger {
	floor := zerolog.WarnLevel
	if log.GetLevel() <= zerolog.DebugLevel {
		floor = zerolog.DebugLevel
	}
	l := log.With().Str("component", "river").Logger().Level(max(log.GetLevel(), floor))
	return slog.New(dropAttrs{zerolog.NewSlogHandler(l)})
}

// riverDroppedAttrs are the River log attributes that are never logged.
var riverDroppedAttrs = []string{"payload", "args", "encoded_args", "metadata"}

// dropAttrs is a slog.Handler that leaves out riverDroppedAttrs, at any
// depth of groups, and the record's time (claimd's logger adds its own).
type dropAttrs struct{ slog.Handler }

func (h dropAttrs) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(time.Time{}, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if a, ok := keep(a); ok {
			out.AddAttrs(a)
		}
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h dropAttrs) WithAttrs(attrs []slog.Attr) slog.Handler {
	var kept []slog.Attr
	for _, a := range attrs {
		if a, ok := keep(a); ok {
			kept = append(kept, a)
		}
	}
	return dropAttrs{h.Handler.WithAttrs(kept)}
}

func (h dropAttrs) WithGroup(name string) slog.Handler { return dropAttrs{h.Handler.WithGroup(name)} }

// keep returns a without the dropped attributes, and whether anything of
// it is left.
func keep(a slog.Attr) (slog.Attr, bool) {
	if slices.Contains(riverDroppedAttrs, a.Key) {
		return slog.Attr{}, false
	}
	if a.Value.Kind() != slog.KindGroup {
		return a, true
	}
	var kept []slog.Attr
	for _, g := range a.Value.Group() {
		if g, ok := keep(g); ok {
			kept = append(kept, g)
		}
	}
	return slog.Attr{Key: a.Key, Value: slog.GroupValue(kept...)}, len(kept) > 0
}
