package httpapi

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// Per-address bounds key an IPv4 address by itself and an IPv6 address by
// its /64; an IPv4-mapped IPv6 address is its IPv4 address.
func TestAddressGroup(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"203.0.113.7":              "203.0.113.7",
		"::ffff:203.0.113.7":       "203.0.113.7",
		"2001:db8:1:2:aaaa::1":     "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff:ffff::": "2001:db8:1:2::/64",
		"2001:db8:1:3::1":          "2001:db8:1:3::/64",
		"::1":                      "::/64",
	} {
		require.Equal(t, want, addressGroup(net.ParseIP(in)), in)
	}
	require.Equal(t, "", addressGroup(nil))
}
