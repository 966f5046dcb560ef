//go:build !unix

package pgtest

// lockFile is a no-op where flock(2) does not exist; devdb.sh, a bash
// script, does not run there either.
func lockFile(string) (unlock func(), err error) { return func() {}, nil }
