# shellcheck shell=bash
# Progress lines for long steps of the developer scripts (run.sh, try.sh):
# sourced, not run.
#
#   progress_step TAG WHAT HINT COMMAND [ARG...]
#
# prints "TAG: WHAT (HINT)…", runs COMMAND in the foreground (so Ctrl-C
# reaches it as usual), prints "TAG:   still WHAT (42 s)…" every
# IC_PROGRESS_SECONDS (default 15) while it runs, and "TAG: WHAT: done
# (52 s)" (or "failed (exit N)") when it ends; returns COMMAND's status. All
# on stderr, one plain line each: no spinner, no terminal control, so a log
# file or CI shows the same as a terminal. HINT may be "".
#
# The ticker is a background subshell, stopped by its PID when the step ends;
# a script that can be interrupted mid-step calls progress_stop from its
# EXIT trap.

progress_ticker=""

# progress_took SECONDS: "45 s", "2 min 30 s".
progress_took() {
	if [ "$1" -ge 60 ]; then
		printf '%d min %d s' $(($1 / 60)) $(($1 % 60))
	else
		printf '%d s' "$1"
	fi
}

# progress_stop ends the ticker of the running step, if any.
progress_stop() {
	if [ -n "$progress_ticker" ]; then
		kill "$progress_ticker" 2>/dev/null || true
		wait "$progress_ticker" 2>/dev/null || true
		progress_ticker=""
	fi
}

progress_step() {
	local tag=$1 what=$2 hint=$3 every=${IC_PROGRESS_SECONDS:-15} start rc=0
	shift 3
	[[ $every =~ ^[1-9][0-9]*$ ]] || every=15
	start=$(date +%s)
	printf '%s: %s%s…\n' "$tag" "$what" "${hint:+ ($hint)}" >&2
	(
		# The sleep is a child: end it too, or it outlives the ticker.
		trap 'kill $! 2>/dev/null; exit 0' TERM
		while :; do
			sleep "$every" &
			wait $!
			printf '%s:   still %s (%s)…\n' "$tag" "$what" "$(progress_took $(($(date +%s) - start)))" >&2
		done
	) </dev/null &
	progress_ticker=$!
	"$@" || rc=$?
	progress_stop
	if [ "$rc" = 0 ]; then
		printf '%s: %s: done (%s)\n' "$tag" "$what" "$(progress_took $(($(date +%s) - start)))" >&2
	else
		printf '%s: %s: failed (exit %d, after %s)\n' "$tag" "$what" "$rc" "$(progress_took $(($(date +%s) - start)))" >&2
	fi
	return "$rc"
}
