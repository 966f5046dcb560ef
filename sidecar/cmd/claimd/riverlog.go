package main

import (
	"log/slog"
	"slices"

	"github.com/rs/zerolog"
	slogcommon "github.com/samber/slog-common"
	slogzerolog "github.com/samber/slog-zerolog/v2"
)

// riverLogger is the dispatcher's (River's) logger: its slog records go to
// claimd's zerolog log, one JSON line each, with component=river. River
// logs its own trouble there (a lost database connection, a failed
// leadership election, a job that panicked) at warn and error; its info
// and debug chatter is left out unless claimd logs at debug.
//
// Never a payload: River's records carry job kinds, ids, queue names and
// errors, and the dispatch job's arguments are a claim id and a source;
// attributes that could carry data anyway (a notification's payload, job
// arguments or metadata) are dropped by name.
func riverLogger(log zerolog.Logger) *slog.Logger {
	l := log.With().Str("component", "river").Logger()
	level := slog.LevelWarn
	if log.GetLevel() <= zerolog.DebugLevel {
		level = slog.LevelDebug
	}
	return slog.New(slogzerolog.Option{
		Level:       level,
		Logger:      &l,
		NoTimestamp: true, // claimd's logger adds its own
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if slices.Contains(riverDroppedAttrs, a.Key) {
				return slog.Attr{}
			}
			if err, ok := a.Value.Any().(error); ok {
				return slog.String(a.Key, err.Error()) // as claimd logs errors: the message
			}
			return a
		},
		Converter: riverFields,
	}.NewZerologHandler())
}

// riverFields is slogzerolog.DefaultConverter without its error
// formatting (an object with the error's Go type and stack): the record's
// attributes, through replace, as zerolog fields.
func riverFields(_ bool, replace func([]string, slog.Attr) slog.Attr, loggerAttrs []slog.Attr, groups []string,
	record *slog.Record) map[string]any {
	attrs := slogcommon.AppendRecordAttrsToAttrs(loggerAttrs, groups, record)
	attrs = slogcommon.ReplaceAttrs(replace, []string{}, attrs...)
	return slogcommon.AttrsToMap(slogcommon.RemoveEmptyAttrs(attrs)...)
}

// riverDroppedAttrs are the River log attributes that are never logged.
var riverDroppedAttrs = []string{"payload", "args", "encoded_args", "metadata"}
