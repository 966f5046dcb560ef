package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/config"
)

// databaseURLCases are DATABASE_URL values Load refuses: the message it
// must contain, and the secret (the password, or what pgx would take
// from it) it must not.
var databaseURLCases = []struct {
	name, url, want, secret string
}{
	{"another scheme", "mysql://x:secret@y/z",
		`DATABASE_URL: unsupported scheme (claimd takes postgres:// or postgresql://); want postgres://USER:PASSWORD@HOST:PORT/DATABASE`, "secret"},
	{"http", "http://user:hunter2pass@db.example.com/claimd", `unsupported scheme (claimd takes`, "hunter2pass"},
	{"a scheme is not repeated", "averyveryverylongschemename://u:longpw77@h/db", `unsupported scheme (claimd takes`, "schemename"},
	{"JDBC", "jdbc:postgresql://db.example.com:5432/claimd?user=claimd&password=jdbcpw99", "drop the jdbc: prefix", "jdbcpw99"},
	{"one slash", "postgres:/claimd", "postgres: must be followed by //", ""},
	{"no slash", "postgres:u:nosl4sh@h/db", "postgres: must be followed by //", "nosl4sh"},
	{"upper-case scheme", "POSTGRES://u:upperpw1@h/db", "the scheme is written in lower case (postgres://)", "upperpw1"},
	{"a space in the password", "postgres://u:my secret@h/db", "a space or a control character inside the URL", "my secret"},
	{"keyword/value settings after a URL", "postgres://u:kvmix123@h/db sslmode=disable", "a space or a control character", "kvmix123"},
	{"a trailing line break", "postgres://u:linebrk9@h/db\n", "leading or trailing whitespace", "linebrk9"},
	{"a tab inside", "postgres://u:tabbed77@h/\tdb", "a space or a control character", "tabbed77"},
	{"empty host with port", "postgres://u:emptyhost1@:5432/db", "DATABASE_URL: no host", "emptyhost1"},
	{"empty host", "postgres://u:emptyhost2@/db", "no host", "emptyhost2"},
	{"no authority at all", "postgres:///db", "no host", ""},
	{"empty host in a list", "postgres://u:emptyhost3@h1,:5433/db", "no host", "emptyhost3"},
	{"port not a number", "postgres://u:portpw12@h:54x2/db", "DATABASE_URL: the port is not a number from 1 to 65535", "portpw12"},
	{"a word for the port", "postgres://u:portpw13@host:notaport/db", "DATABASE_URL: the port is not a number from 1 to 65535", "portpw13"},
	{"port 0", "postgres://u:portpw34@h:0/db", "the port is not a number", "portpw34"},
	{"port too large", "postgres://u:portpw56@h:70000/db", "the port is not a number", "portpw56"},
	{"an unencoded / in the password", "postgres://claimd:ab/cd3f9@h/db", "the port is not a number from 1 to 65535 (a / in the password", "cd3f9"},
	{"an unencoded @ in the password", "postgres://claimd:p@ssw0rd!@h/db", "the host holds a character no host name has", "ssw0rd"},
	{"an unencoded # and @ in the password", "postgres://claimd:x#y@z@h:5432/db", "the host holds a character", "x#y"},
	{"a % in the password", "postgres://claimd:100%sure@h/db", "the password holds a % that does not start a %XX escape", "100%sure"},
	{"%00 in the password", "postgres://claimd:nul%00pw@h/db", "the password holds a %", "nul%00pw"},
	{"a % in the database name", "postgres://u:dbpct111@h/50%off", "the database name holds a %", "dbpct111"},
	{"IPv6 without ]", "postgres://u:v6pw0001@[::1:5432/db", "lacks its closing ]", "v6pw0001"},
	{"not IPv6 in brackets", "postgres://u:v6pw0002@[db.example.com]/db", "is not an IPv6 address", "v6pw0002"},
	{"a query parameter without =", "postgres://u:querypw1@h/db?sslmode", "a query parameter is not NAME=VALUE", "querypw1"},
	{"a query parameter with two =", "postgres://u@h/db?password=a=b7q", "a query parameter is not NAME=VALUE", "a=b7q"},
}

func loadDatabaseURL(url string) error {
	_, err := config.Load(nil, func(k string) string {
		if k == "DATABASE_URL" {
			return url
		}
		return ""
	})
	return err
}

func TestDatabaseURLRefusedWithoutEchoingIt(t *testing.T) {
	t.Parallel()
	for _, c := range databaseURLCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := loadDatabaseURL(c.url)
			require.Error(t, err)
			require.Contains(t, err.Error(), c.want)
			require.True(t, strings.HasPrefix(err.Error(), "DATABASE_URL: "), err.Error())
			if c.secret != "" {
				require.NotContains(t, err.Error(), c.secret)
			}
		})
	}
}

// Every form pgx reads stays accepted, keyword/value strings included.
func TestDatabaseURLAccepted(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
		"postgresql://claimd:p%40ss%2Fw%3Ard%20x%25@db.example.com/claimd?pool_max_conns=32",
		"postgres://claimd:a:b?c@db.example.com/claimd", // pgx splits at the first : and the first @
		"postgres://claimd@h1:5432,h2:5433/claimd?target_session_attrs=read-write",
		"postgres://claimd@h1,h2/claimd",
		"postgres://claimd@[::1]:5432/claimd",
		"postgres://[fe80::1%25eth0]/claimd",
		"postgres:///claimd?host=/var/run/postgresql",
		"postgres://%2Fvar%2Frun%2Fpostgresql/claimd",
		"postgres://claimd_db.internal-1",
		"postgres://h/",
		"host=127.0.0.1 port=5432 dbname=claimd user=claimd password='a b:c@d' sslmode=disable",
		"dbname=claimd",
	} {
		require.NoError(t, loadDatabaseURL(u), u)
		_, err := pgconn.ParseConfig(u)
		require.NoError(t, err, "pgx reads %s", u)
	}
}

// Whatever the check lets through as a postgres:// URL, pgx splits
// without a parse error; its refusals never quote the password.
func FuzzDatabaseURL(f *testing.F) {
	for _, c := range databaseURLCases {
		f.Add(c.url)
	}
	f.Add("postgres://u:pw@h:5432/db?sslmode=disable")
	f.Fuzz(func(t *testing.T, u string) {
		err := loadDatabaseURL(u)
		if err == nil {
			if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
				_, perr := pgconn.ParseConfig(u)
				var pce *pgconn.ParseConfigError
				if errors.As(perr, &pce) {
					require.NotContains(t, perr.Error(), "failed to parse as URL", "accepted %q", u)
					require.NotContains(t, perr.Error(), "invalid port", "accepted %q", u)
				}
			}
			return
		}
		if !strings.HasPrefix(err.Error(), "DATABASE_URL") {
			return // another setting
		}
		rest := u[strings.IndexByte(u, ':')+1:]
		if at := strings.LastIndexByte(rest, '@'); at > 0 {
			if _, pw, ok := strings.Cut(strings.TrimPrefix(rest[:at], "//"), ":"); ok && len(pw) >= 8 {
				require.NotContains(t, err.Error(), pw)
			}
		}
	})
}

// The hint about a / in the password comes only when the URL shows it: an
// @ after the host list.
func TestDatabaseURLPortHintOnlyWhenThePasswordWasCut(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"postgres://u:p@host:notaport/db", "postgres://u@h:54x2/db"} {
		err := loadDatabaseURL(u)
		require.EqualError(t, err, "DATABASE_URL: the port is not a number from 1 to 65535", u)
	}
	require.ErrorContains(t, loadDatabaseURL("postgres://claimd:ab/cd@h/db"), "a / in the password ends")
}
