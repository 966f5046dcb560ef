package backfill

import "strconv"

// ParseScanID reads a scan id as the API writes it: canonical decimal, 1
// to 2^63-1, without sign or leading zero. "+1" and "01" are not read as
// scan 1: an id is a name, written one way. ok is false for anything else.
func ParseScanID(s string) (id int64, ok bool) {
	if s == "" || s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}
