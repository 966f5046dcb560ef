package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// TestIngestStarvationAttack measures the ingest body budget under the
// slow-sender attacks, full size, against a claimd binary (make build-go;
// IC_ATTACK_CLAIMD=bin/claimd, its path): anonymous senders that declare
// 1 MiB, send 16 KiB and then one byte a second, while correctly signed
// Stripe deliveries arrive from another address. It prints how many
// deliveries were stored and their latencies; it fails only when one is
// not stored (a functional failure), never on a time. Runs about two
// minutes; the figures of
// sidecar/docs/security.md#ingest-bodies-what-an-anonymous-sender-holds
// come from it.
func TestIngestStarvationAttack(t *testing.T) {
	bin := os.Getenv("IC_ATTACK_CLAIMD")
	if bin == "" {
		t.Skip("set IC_ATTACK_CLAIMD to a claimd binary (make build-go: bin/claimd) to measure the ingest attacks")
	}
	bin, err := filepath.Abs(bin)
	require.NoError(t, err)
	dbURL := pgtest.NewDatabase(t)
	dir := t.TempDir()
	sources := filepath.Join(dir, "sources.yaml")
	require.NoError(t, os.WriteFile(sources, []byte(`sources:
  stripe: {tenant: acme, provider: stripe, secrets: ["`+attackStripeSecret+`"], forward: {url: "http://127.0.0.1:9/unused"}}
`), 0o600))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "CLAIMD_ADDR="+addr, "CLAIMD_SOURCES_FILE="+sources,
		"CLAIMD_DISPATCH=false", "CLAIMD_LOG_LEVEL=error", "CLAIMD_API_KEYS=acme:attack-key-0123456789abcdef")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	base := "http://" + addr
	require.Eventually(t, func() bool {
		res, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}, 60*time.Second, 50*time.Millisecond, "claimd did not become ready")
	db, err := pgx.Connect(context.Background(), dbURL)
	require.NoError(t, err)
	defer db.Close(context.Background())

	for _, sc := range []struct {
		name string
		// senders at once, from how many addresses; reconnect: a cut
		// sender starts again; deliveries spread over the window.
		senders, addresses int
		reconnect          bool
		window             time.Duration
		deliveries         int
	}{
		{"40 senders, one address, 1 MiB declared, 16 KiB then 1 B/s", 40, 1, false, 30 * time.Second, 9},
		{"40 senders from 40 addresses", 40, 40, false, 30 * time.Second, 9},
		{"240 reconnecting senders for 90 s, one address", 240, 1, true, 90 * time.Second, 9},
	} {
		t.Run(sc.name, func(t *testing.T) {
			ctx, stop := context.WithTimeout(context.Background(), sc.window+5*time.Second)
			defer stop()
			var wg sync.WaitGroup
			var started, cut atomic.Int64
			for i := range sc.senders {
				local := fmt.Sprintf("127.0.1.%d", 1+i%sc.addresses)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						started.Add(1)
						slowSend(ctx, local, addr)
						if ctx.Err() != nil || !sc.reconnect {
							return
						}
						cut.Add(1)
					}
				}()
			}
			// The attack is in place once three quarters of the senders'
			// first 16 KiB are held (claimd cuts a sender after its grace
			// plus 16 KiB at the minimum rate, 4 s by default), or, for a
			// claimd that reserves declared lengths, 3/4 of its budget.
			require.Eventually(t, func() bool {
				return ingestBytesHeld(base) >= int64(sc.senders)*16<<10*3/4 || ingestBytes(base, "reserved") >= 24<<20
			},
				30*time.Second, 20*time.Millisecond, "the senders' first 16 KiB never arrived")
			heldAtStart := ingestBytesHeld(base)
			var lat []time.Duration
			stored := 0
			interval := sc.window / time.Duration(sc.deliveries)
			client := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
				LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.2.1")}}).DialContext}}
			for i := range sc.deliveries {
				if i > 0 {
					time.Sleep(interval) // pacing of the measurement, not a synchronisation
				}
				id := fmt.Sprintf("evt_attack_%d_%d", time.Now().UnixNano(), i)
				body := []byte(`{"id":"` + id + `","type":"charge.succeeded","data":{"object":{"amount":100}}}`)
				req, err := http.NewRequest(http.MethodPost, base+"/ingest/stripe", strings.NewReader(string(body)))
				require.NoError(t, err)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Stripe-Signature", verifytest.StripeHeader(time.Now().Unix(), body, attackStripeSecret))
				t0 := time.Now()
				res, err := client.Do(req)
				d := time.Since(t0)
				status := 0
				if err == nil {
					status = res.StatusCode
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
				var n int
				require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM inbox_events e JOIN claims c ON c.id = e.claim_id WHERE c.source = 'stripe' AND c.event_id = $1`, id).Scan(&n))
				if status/100 == 2 && n == 1 {
					stored++
					lat = append(lat, d)
				}
				t.Logf("delivery %d: status %d, stored %v, %s (bytes held by the attack now %d)", i, status, n == 1, d.Round(time.Millisecond), ingestBytesHeld(base))
			}
			stop()
			wg.Wait()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			fig := fmt.Sprintf("%s: stored %d/%d; held by the attack at its start %d bytes; sender connections %d (cut and reconnected %d)",
				sc.name, stored, sc.deliveries, heldAtStart, started.Load(), cut.Load())
			if len(lat) > 0 {
				fig += fmt.Sprintf("; latency min %s median %s max %s", lat[0].Round(time.Millisecond),
					lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
			}
			fmt.Println("ATTACK", fig)
			require.Equal(t, sc.deliveries, stored, "every authentic delivery is stored")
		})
	}
}

const attackStripeSecret = "whsec_attack_0001"

// slowSend is one attacking connection from local: it declares 1 MiB,
// sends 16 KiB, then one byte a second until claimd answers or closes, or
// ctx ends.
func slowSend(ctx context.Context, local, addr string) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return
	}
	defer c.Close()
	go func() {
		<-ctx.Done()
		c.Close()
	}()
	head := "POST /ingest/stripe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nStripe-Signature: t=1,v1=00\r\nContent-Length: " +
		strconv.Itoa(1<<20) + "\r\n\r\n"
	if _, err := io.WriteString(c, head+strings.Repeat("a", 16<<10)); err != nil {
		return
	}
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		_, _ = bufio.NewReader(c).ReadByte()
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-answered:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
			if _, err := c.Write([]byte("a")); err != nil {
				return
			}
		}
	}
}

// ingestBytesHeld is claimd_http_body_bytes{class="ingest",kind="received"}
// (-1 when it cannot be read).
func ingestBytesHeld(base string) int64 { return ingestBytes(base, "received") }

// ingestBytes is claimd_http_body_bytes{class="ingest",kind} (-1 when it
// cannot be read).
func ingestBytes(base, kind string) int64 {
	res, err := http.Get(base + "/metrics")
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, `claimd_http_body_bytes{class="ingest",kind="`+kind+`"} `); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return -1
			}
			return int64(f)
		}
	}
	return -1
}
