//go:build race

package main

// raceEnabled builds the claimd binary under test with -race as well.
const raceEnabled = true
