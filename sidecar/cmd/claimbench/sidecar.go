package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/config"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/migrate"
)

const claimdPackage = "github.com/idempotent-claim/idempotent-claim/sidecar/cmd/claimd"

// benchTenant is the tenant of every benchmark claim (the static key's).
const benchTenant = "bench"

// sidecar is the claimd process under measurement.
type sidecar struct {
	cmd *exec.Cmd
	// bin is the claimd binary, for starting another instance.
	bin  string
	url  string
	key  string
	done chan struct{}
	// tail keeps the last log lines for error messages.
	tail *tailBuffer
}

// startClaimd builds claimd (unless bin is given), starts it on a
// kernel-chosen port with default settings plus extraEnv ("NAME=value",
// winning over the inherited environment) and waits until it listens.
func startClaimd(ctx context.Context, bin, dir, dbURL string, extraEnv ...string) (*sidecar, error) {
	if bin == "" {
		bin = filepath.Join(dir, "claimd")
		out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, claimdPackage).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("go build %s: %w\n%s", claimdPackage, err, out)
		}
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	s := &sidecar{bin: bin, key: "bench-" + hex.EncodeToString(b), done: make(chan struct{}), tail: &tailBuffer{max: 40}}
	s.cmd = exec.Command(bin)
	s.cmd.Env = append(os.Environ(), // later entries win
		"DATABASE_URL="+dbURL,
		"CLAIMD_ADDR=127.0.0.1:0",
		"CLAIMD_API_KEYS="+benchTenant+":"+s.key,
		"CLAIMD_LOG_FORMAT=json",
	)
	s.cmd.Env = append(s.cmd.Env, extraEnv...)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	addr := make(chan string, 1)
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.tail.add(line)
			var l struct{ Message, Addr string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Message == "claimd listening" {
				addr <- l.Addr
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = s.cmd.Wait()
	}()
	select {
	case a := <-addr:
		s.url = "http://" + a
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("claimd exited before listening:\n%s", s.tail)
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	case <-time.After(2 * time.Minute):
		s.stop()
		return nil, fmt.Errorf("claimd did not listen within 2 minutes:\n%s", s.tail)
	}
}

// stop sends SIGTERM to the process (by its PID) and waits for it.
func (s *sidecar) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// tailBuffer keeps the last max lines.
type tailBuffer struct {
	max   int
	lines []string
}

func (t *tailBuffer) add(l string) {
	t.lines = append(t.lines, l)
	if len(t.lines) > t.max {
		t.lines = t.lines[1:]
	}
}

func (t *tailBuffer) String() string { return strings.Join(t.lines, "\n") }

// statement is the ledger's claim statement with the arguments it sends
// for one claim, captured from the pgx pool.
type statement struct {
	sql  string
	args []any
	// Positions (0-based) of the arguments the workloads vary.
	sourceArg, eventArg, tokenArg int
}

// Marker values of the probe claim, to find the argument positions.
const (
	probeSource  = "bench-probe"
	probeEventID = "4242424242"
)

// benchPayloadHash is the payload hash every benchmark claim carries.
const benchPayloadHash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

type captureTracer struct{ got *statement }

func (c *captureTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if c.got == nil && strings.Contains(d.SQL, "INSERT INTO claims") && strings.Contains(d.SQL, "ON CONFLICT") {
		c.got = &statement{sql: d.SQL, args: append([]any(nil), d.Args...)}
	}
	return ctx
}

func (c *captureTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// captureClaimStatement runs one claim through a ledger configured like
// the sidecar (default settings) and returns the statement it sent.
func captureClaimStatement(ctx context.Context, dbURL string) (*statement, error) {
	cfg, err := config.Load(nil, func(k string) string {
		if k == "DATABASE_URL" {
			return dbURL
		}
		return ""
	})
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	db.ConfigurePool(pc) // the isolation the claim statement is written for, as claimd sets it
	tr := &captureTracer{}
	pc.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	// The sidecar has not migrated yet; claimd does on start, but the
	// probe needs the table first, so migrate here the same way.
	if _, err := migrate.Up(ctx, pool); err != nil {
		return nil, err
	}
	l, err := claim.New(pool, claim.Config{Policies: cfg.Policies})
	if err != nil {
		return nil, err
	}
	res, err := l.Claim(ctx, claim.Request{Tenant: benchTenant, Key: claim.Key{Source: probeSource, EventID: probeEventID},
		PayloadHash: benchPayloadHash})
	if err != nil {
		return nil, err
	}
	if tr.got == nil {
		return nil, errors.New("no INSERT … ON CONFLICT statement seen during a claim")
	}
	st := tr.got
	st.sourceArg, st.eventArg, st.tokenArg = -1, -1, -1
	for i, a := range st.args {
		switch v := deref(a).(type) {
		case string:
			switch v {
			case probeSource:
				st.sourceArg = i
			case probeEventID:
				st.eventArg = i
			case res.Token:
				st.tokenArg = i
			}
		}
	}
	if st.sourceArg < 0 || st.eventArg < 0 || st.tokenArg < 0 {
		return nil, fmt.Errorf("cannot find source, event id and token among the claim arguments %v", st.args)
	}
	return st, nil
}
