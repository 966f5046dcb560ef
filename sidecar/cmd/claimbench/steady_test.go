package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The steady-state dispatch rate counts only intervals in which the
// dispatcher was saturated (a backlog of at least the forward concurrency
// at both ends), so a dispatcher that keeps up with a slow sender is not
// reported at the sender's rate.
func TestSteadyRatesCountSaturatedIntervalsOnly(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	samples := []dispatchSample{
		{at(0), 10, 8, true},       // backlog 2: keeping up
		{at(100), 40, 38, true},    // 2
		{at(200), 200, 100, true},  // 100: saturated from here
		{at(300), 400, 200, true},  // 200 (100 delivered in 100 ms)
		{at(400), 500, 300, false}, // the cells ended: 200 (100 more)
		{at(500), 500, 450, false}, // 50 (150 delivered by the dispatcher alone)
		{at(600), 500, 495, false}, // 5: below saturation
		{at(700), 500, 500, false}, // 0
	}
	load, after, peak := steadyRates(samples, 16)
	require.InDelta(t, 1000, load.rate, 1e-6, "the two saturated intervals that began during the cells")
	require.Equal(t, int64(200), load.events)
	require.InDelta(t, 1500, after.rate, 1e-6, "the one after them")
	require.Equal(t, int64(150), after.events)
	require.Equal(t, int64(200), peak)

	load, _, _ = steadyRates(samples[:2], 16)
	require.Zero(t, load.secs, "never saturated")
	require.Contains(t, steadyLine(load, steadyRate{}, 2, 16, 0, true, 0, 0), "never saturated")
}
