package console

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The source page's shadow line and "what this saved you" say one of a
// thing in the singular and other counts (0, 2) in the plural.
func TestSourcePageCountsSingularAndPlural(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	render := func(n int64) string {
		v := sourceView{Source: "s", Saved: savedView{Words: "the last 24 hours", DuplicatesStopped: n, Conflicts: n, Backfilled: n},
			Shadow: &shadowView{Would: n, WouldConflicts: n, Observed: n, Enforced: n, Stopped: n, Held: n, Words: "the last 24 hours"}}
		var b strings.Builder
		require.NoError(t, c.pages["source"].ExecuteTemplate(&b, "layout.html", page{Title: "Source s", Data: v}))
		return regexp.MustCompile(`<[^>]*>`).ReplaceAllString(b.String(), "")
	}
	one := render(1)
	for _, want := range []string{"1 delivery observed", "1 would-be duplicate and", "1 would-be conflict (same key",
		"The other delivery of this range was enforced: 1 duplicate stopped, 1 conflict held.",
		"1 effect not repeated (duplicate stopped)", "1 conflict held (same key", "1 missed event recovered"} {
		require.Contains(t, one, want)
	}
	require.NotContains(t, one, "1 would-be conflicts")
	for _, n := range []int64{0, 2} {
		many := render(n)
		d := string(rune('0' + n))
		for _, want := range []string{d + " deliveries observed", d + " would-be duplicates and", d + " would-be conflicts (same key"} {
			require.Contains(t, many, want, "n=%d", n)
		}
	}
	for _, want := range []string{"2 effects not repeated (duplicates stopped)", "2 conflicts held (same key", "2 missed events recovered"} {
		require.Contains(t, render(2), want) // at 0 the summary says none was
	}
	require.Contains(t, render(2), "The other 2 deliveries of this range were enforced: 2 duplicates stopped, 2 conflicts held.")
}
