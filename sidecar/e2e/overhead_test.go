package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
)

// `make overhead`: what Claim + Complete add to one execution of a webhook
// workflow in a real n8n, next to what the sidecar itself spends on the two
// calls. Four workflows in one n8n (regular mode, n8n's database on
// PostgreSQL as in docker-compose.yml), same shape otherwise:
//
//	A  Webhook → Set → Respond                                 (the plain workflow)
//	B  Webhook → Idempotent Claim → Set → Complete Claim → Respond
//	C  Webhook → No Op → Set → No Op → Respond                 (any two extra nodes)
//	D  Webhook → HTTP Request → Set → HTTP Request → Respond   (the same two sidecar
//	   calls made with n8n's own HTTP Request node and a Header Auth credential)
//
// B and D each call their own claimd (one database each, same PostgreSQL
// server), so the sidecar's time is known per workflow. Requests are sent
// one at a time, each after an idle gap (n8n answers at the Respond node and
// stores the execution afterwards; without the gap the next request waits
// behind that write), the workflows interleaved so that drift hits all of
// them alike, every B and D request with a new event id. The sidecar's own
// time per call comes from its request log (per request) and its /metrics
// histogram (claimd_http_request_duration_seconds, the cross-check); n8n's
// own time per node from the stored executions (runData executionTime).
//
// Figures only: the test fails on functional errors (a non-2xx answer, a
// claim not won, a Complete not recorded), never on a figure.

// Overhead workflow templates (testdata/) and the sidecar routes they call.
const (
	overheadPlainWF   = "testdata/overhead-a-plain.json"
	overheadClaimWF   = "testdata/overhead-b-claim.json"
	overheadTwoNodeWF = "testdata/overhead-c-two-nodes.json"
	overheadHTTPWF    = "testdata/overhead-d-http-request.json"

	overheadClaimRoute    = "/v1/claims/batch"
	overheadCompleteRoute = "/v1/claims/complete/batch"

	// overheadHeaderCredID is D's Header Auth credential.
	overheadHeaderCredID = "icOvhHeaderCred1"
)

// overheadSettings are the run's knobs, from the environment.
type overheadSettings struct {
	n, warmup, round int
	gap              time.Duration
}

func overheadEnvInt(t *testing.T, name string, def, min int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min {
		t.Fatalf("%s=%q: want a whole number ≥ %d", name, v, min)
	}
	return n
}

// overheadWorkflow is one of A–D with its samples.
type overheadWorkflow struct {
	label, shape, path, id string
	// claimd is the sidecar the workflow calls (nil: none); claimNode and
	// completeNode name the nodes that make the two calls.
	claimd                  *Claimd
	claimNode, completeNode string
	// lat are the client-side latencies of the measured requests, in ms.
	lat []float64
	// nodes are n8n's per-node execution times of the measured executions
	// (node name → ms, one entry per execution), and exec their run time
	// (stoppedAt − startedAt), from n8n's database.
	nodes map[string][]float64
	exec  []float64
	// before is the sidecar's /metrics before the measured run, logOffset
	// the size of its log then; routes its own time per route.
	before    claimdScrape
	logOffset int64
	routes    map[string]*routeTime
}

// TestOverhead is `make overhead` (runs only with IC_OVERHEAD=1). Knobs:
// IC_OVERHEAD_N (measured requests per workflow, default 200),
// IC_OVERHEAD_WARMUP (default 20), IC_OVERHEAD_GAP_MS (idle time before
// each request, default 100), IC_OVERHEAD_ROUND (round size for the
// round-to-round spread, default 50), IC_OVERHEAD_N8N_ENV (extra n8n
// settings, "K=V K2=V2", e.g. DB_POSTGRESDB_POOL_SIZE=4 or
// N8N_EXPRESSION_ENGINE=legacy; default none), IC_OVERHEAD_NODE_DIR (another
// build of the node package to measure: a folder with package.json and
// dist/; default n8n-node/).
func TestOverhead(t *testing.T) {
	if os.Getenv("IC_OVERHEAD") != "1" {
		t.Skip("IC_OVERHEAD=1 measures the cost of Claim + Complete per execution (make overhead)")
	}
	set := overheadSettings{
		n:      overheadEnvInt(t, "IC_OVERHEAD_N", 200, 10),
		warmup: overheadEnvInt(t, "IC_OVERHEAD_WARMUP", 20, 0),
		gap:    time.Duration(overheadEnvInt(t, "IC_OVERHEAD_GAP_MS", 100, 0)) * time.Millisecond,
		round:  overheadEnvInt(t, "IC_OVERHEAD_ROUND", 50, 5),
	}

	cB, cD := StartClaimd(t, ClaimdConfig{}), StartClaimd(t, ClaimdConfig{})
	creds := WriteJSON(t, "credentials.json", []credential{
		claimCredential(claimCredID, "Idempotent Claim API (overhead)", cB.URL(), cB.APIKey),
		{ID: overheadHeaderCredID, Name: "Sidecar API key (Header Auth)", Type: "httpHeaderAuth",
			Data: map[string]any{"name": "Authorization", "value": "Bearer " + cD.APIKey}},
	})
	vars := map[string]string{"CREDENTIAL_ID": claimCredID, "HEADER_CREDENTIAL_ID": overheadHeaderCredID, "CLAIMD_URL": cD.URL()}
	wfs := []*overheadWorkflow{
		{label: "A", shape: "Webhook → Set → Respond", path: "ic-overhead-a"},
		{label: "B", shape: "Webhook → Claim → Set → Complete → Respond", path: "ic-overhead-b",
			claimd: cB, claimNode: "Idempotent Claim", completeNode: "Complete Claim"},
		{label: "C", shape: "Webhook → No Op → Set → No Op → Respond", path: "ic-overhead-c"},
		{label: "D", shape: "Webhook → HTTP Req. → Set → HTTP Req. → Respond", path: "ic-overhead-d",
			claimd: cD, claimNode: "Claim via HTTP", completeNode: "Complete via HTTP"},
	}
	var files []string
	for _, f := range []string{overheadPlainWF, overheadClaimWF, overheadTwoNodeWF, overheadHTTPWF} {
		files = append(files, WriteWorkflow(t, f, vars))
	}
	nodeDir := nodePackageDir
	if v := os.Getenv("IC_OVERHEAD_NODE_DIR"); v != "" {
		nodeDir = v
	}
	cfg := N8NConfig{Workflows: files, Credentials: []string{creds}, NodePackage: nodeDir}
	cfg.Env = overheadN8NEnv(t)
	n := StartN8N(t, cfg)
	for i, w := range wfs {
		w.id = n.WorkflowIDs[i]
	}

	// One kept-alive connection: the client's own connection set-up is not
	// part of any workflow's cost.
	client := &http.Client{Timeout: answerDeadline, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer client.CloseIdleConnections()
	send := func(w *overheadWorkflow, tag string, seq int) float64 {
		t.Helper()
		eventID := fmt.Sprintf("ovh_%s_%s_%d_%s", w.label, tag, seq, RandomHex(t, 4))
		body, _ := json.Marshal(map[string]any{"id": eventID, "type": "order.created", "amount": 4200})
		req, err := http.NewRequest(http.MethodPost, n.WebhookURL(w.path), strings.NewReader(string(body)))
		if err != nil {
			t.Fatalf("request: %v", err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Event-Id", eventID)
		began := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("workflow %s, request %s %d: %v", w.label, tag, seq, err)
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		elapsed := time.Since(began)
		if err != nil {
			t.Fatalf("workflow %s, request %s %d: reading the answer: %v", w.label, tag, seq, err)
		}
		// B answers 409 "not won" from every output of Claim but Won, and
		// n8n answers 500 when a node fails (D's Complete call without a
		// claim token is refused): 200 done is an effect claimed and
		// reported. The sidecars' counters are checked after the run.
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"done"`) {
			t.Fatalf("workflow %s, request %s %d (event %s): %s %.300s", w.label, tag, seq, eventID, resp.Status, raw)
		}
		return float64(elapsed.Microseconds()) / 1000
	}
	// Each round of the loop sends one request to every workflow, in an
	// order that rotates and reverses, so that no workflow always follows
	// the same one.
	order := func(i int) []int {
		k := len(wfs)
		out := make([]int, k)
		for j := range out {
			out[j] = (i/2 + j) % k
		}
		if i%2 == 1 {
			slices.Reverse(out)
		}
		return out
	}

	for i := 0; i < set.warmup; i++ {
		for _, k := range order(i) {
			time.Sleep(set.gap)
			send(wfs[k], "warm", i)
		}
	}
	n.WaitExecutionsSettled(t, "", 2*time.Minute)
	firstMeasured := maxExecutionID(t, n) + 1
	for _, w := range wfs {
		if w.claimd != nil {
			w.logOffset = fileSize(t, w.claimd.Procs[0].LogPath)
			w.before = scrapeClaimd(t, w.claimd)
		}
	}

	began := time.Now()
	for i := 0; i < set.n; i++ {
		for _, k := range order(i) {
			time.Sleep(set.gap)
			w := wfs[k]
			w.lat = append(w.lat, send(w, "run", i))
		}
	}
	runTime := time.Since(began)

	// The sidecars: every measured execution of B and D made one claim
	// (won) and one complete call, and the claim was completed.
	for _, w := range wfs {
		if w.claimd == nil {
			continue
		}
		after := scrapeClaimd(t, w.claimd)
		if won := after.won - w.before.won; won != float64(set.n) {
			t.Errorf("workflow %s: claimd decided %v claims won during the run, want %d", w.label, won, set.n)
		}
		if done := after.completed - w.before.completed; done != float64(set.n) {
			t.Errorf("workflow %s: claimd recorded %v completions during the run, want %d", w.label, done, set.n)
		}
		w.routes = map[string]*routeTime{}
		for _, route := range []string{overheadClaimRoute, overheadCompleteRoute} {
			cnt := after.count[route] - w.before.count[route]
			if cnt != float64(set.n) {
				t.Errorf("workflow %s: %v requests to %s during the run, want %d", w.label, cnt, route, set.n)
			}
			w.routes[route] = &routeTime{metricsMean: 1000 * (after.sum[route] - w.before.sum[route]) / math.Max(cnt, 1)}
		}
		for route, ms := range claimdLogLatencies(t, w.claimd.Procs[0].LogPath, w.logOffset) {
			if rt := w.routes[route]; rt != nil {
				rt.log = ms
			}
		}
	}

	// n8n's own view: per-node execution times of the measured executions.
	n.WaitExecutionsSettled(t, "", 2*time.Minute)
	readExecutionTimes(t, n, firstMeasured, wfs)
	for _, w := range wfs {
		if len(w.exec) != set.n {
			t.Errorf("workflow %s: %d stored executions of the measured run, want %d", w.label, len(w.exec), set.n)
		}
	}

	fmt.Print(overheadReport(t, n, set, runTime, wfs))
}

// routeTime is the sidecar's own time for one route during the run: per
// request from its log (ms) and the mean from /metrics.
type routeTime struct {
	log         []float64
	metricsMean float64
}

// median is the per-request median from the log, or the /metrics mean when
// the log gave nothing.
func (r *routeTime) median() float64 {
	if len(r.log) == 0 {
		return r.metricsMean
	}
	return quantile(r.log, 0.5)
}

func (r *routeTime) mean() float64 {
	if len(r.log) == 0 {
		return r.metricsMean
	}
	return mean(r.log)
}

// claimdScrape is what the test reads from claimd's /metrics.
type claimdScrape struct {
	// count and sum of claimd_http_request_duration_seconds per route (2xx).
	count, sum map[string]float64
	// won is claimd_claims_total{outcome="won"}; completed the count of
	// claimd_claim_to_complete_seconds (one per completed claim).
	won, completed float64
}

func scrapeClaimd(t *testing.T, c *Claimd) claimdScrape {
	t.Helper()
	status, body := c.Do(t, 0, http.MethodGet, "/metrics", nil)
	if status != http.StatusOK {
		t.Fatalf("claimd GET /metrics: status %d", status)
	}
	s := claimdScrape{count: map[string]float64{}, sum: map[string]float64{}}
	for _, line := range strings.Split(string(body), "\n") {
		name, labels, value, ok := parseMetricLine(line)
		if !ok {
			continue
		}
		switch name {
		case "claimd_http_request_duration_seconds_count":
			if labels["code"] == "2xx" {
				s.count[labels["route"]] += value
			}
		case "claimd_http_request_duration_seconds_sum":
			if labels["code"] == "2xx" {
				s.sum[labels["route"]] += value
			}
		case "claimd_claims_total":
			if labels["outcome"] == "won" {
				s.won += value
			}
		case "claimd_claim_to_complete_seconds_count":
			s.completed += value
		}
	}
	return s
}

// parseMetricLine splits one Prometheus text-format sample line
// (name{k="v",...} value); comments and blank lines give ok false.
func parseMetricLine(line string) (name string, labels map[string]string, value float64, ok bool) {
	line = strings.TrimSpace(line)
	if line == "" || strings.HasPrefix(line, "#") {
		return "", nil, 0, false
	}
	labels = map[string]string{}
	rest := line
	if i := strings.IndexByte(line, '{'); i >= 0 {
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return "", nil, 0, false
		}
		name, rest = line[:i], line[j+1:]
		for _, kv := range strings.Split(line[i+1:j], ",") {
			k, v, found := strings.Cut(kv, "=")
			if found {
				labels[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"`)
			}
		}
	} else {
		f := strings.Fields(line)
		if len(f) < 2 {
			return "", nil, 0, false
		}
		name, rest = f[0], strings.Join(f[1:], " ")
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "", nil, 0, false
	}
	return name, labels, v, true
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Size()
}

// claimdLogLatencies reads claimd's request log lines (JSON, one per
// request: route and latency in ms) written after offset, per route. A log
// in another format gives an empty map (the report then uses /metrics).
func claimdLogLatencies(t *testing.T, path string, offset int64) map[string][]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("opening claimd's log: %v", err)
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		t.Fatalf("claimd's log: %v", err)
	}
	out := map[string][]float64{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		var line struct {
			Route   string   `json:"route"`
			Status  int      `json:"status"`
			Latency *float64 `json:"latency_ms"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Latency == nil || line.Status/100 != 2 {
			continue
		}
		out[line.Route] = append(out[line.Route], *line.Latency)
	}
	return out
}

func maxExecutionID(t *testing.T, n *N8N) int64 {
	t.Helper()
	ctx, conn, done := n.openDB(t)
	defer done()
	var id int64
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM execution_entity`).Scan(&id); err != nil {
		t.Fatalf("reading n8n executions: %v", err)
	}
	return id
}

// readExecutionTimes reads the stored executions from id first on (the
// measured run) of each workflow, and records their run time and every
// node's executionTime. Executions of the GET probe webhooks are skipped.
func readExecutionTimes(t *testing.T, n *N8N, first int64, wfs []*overheadWorkflow) {
	t.Helper()
	byID := map[string]*overheadWorkflow{}
	for _, w := range wfs {
		byID[w.id] = w
		w.nodes = map[string][]float64{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, n.DatabaseURL)
	if err != nil {
		t.Fatalf("connecting to n8n's database: %v", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT e."workflowId", e.status, e."startedAt", e."stoppedAt", d.data
		FROM execution_entity e JOIN execution_data d ON d."executionId" = e.id
		WHERE e.id >= $1 ORDER BY e.id`, first)
	if err != nil {
		t.Fatalf("reading n8n executions: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var wfID, status, data string
		var started, stopped *time.Time
		if err := rows.Scan(&wfID, &status, &started, &stopped, &data); err != nil {
			t.Fatalf("reading n8n executions: %v", err)
		}
		w := byID[wfID]
		if w == nil {
			continue
		}
		times, err := nodeExecutionTimes(data)
		if err != nil {
			t.Fatalf("workflow %s: execution data: %v", w.label, err)
		}
		if _, ok := times["Webhook"]; !ok {
			continue // a probe
		}
		if status != "success" {
			t.Errorf("workflow %s: an execution ended %q", w.label, status)
		}
		for name, ms := range times {
			w.nodes[name] = append(w.nodes[name], ms)
		}
		if started != nil && stopped != nil {
			w.exec = append(w.exec, float64(stopped.Sub(*started).Microseconds())/1000)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("reading n8n executions: %v", err)
	}
}

// nodeExecutionTimes decodes n8n's stored execution data (the "flatted"
// format: a JSON array whose first element is the root object, every
// string inside an object or array being the index of its value in the
// array) and returns the summed executionTime (ms) of each node's runs.
func nodeExecutionTimes(data string) (map[string]float64, error) {
	var arr []any
	if err := json.Unmarshal([]byte(data), &arr); err != nil {
		return nil, err
	}
	deref := func(v any) any {
		s, ok := v.(string)
		if !ok {
			return v
		}
		i, err := strconv.Atoi(s)
		if err != nil || i < 0 || i >= len(arr) {
			return nil
		}
		return arr[i]
	}
	if len(arr) == 0 {
		return nil, fmt.Errorf("empty execution data")
	}
	root, _ := arr[0].(map[string]any)
	result, _ := deref(root["resultData"]).(map[string]any)
	runData, _ := deref(result["runData"]).(map[string]any)
	if runData == nil {
		return nil, fmt.Errorf("no resultData.runData")
	}
	out := map[string]float64{}
	for name, ref := range runData {
		tasks, _ := deref(ref).([]any)
		for _, tr := range tasks {
			task, _ := deref(tr).(map[string]any)
			if ms, ok := task["executionTime"].(float64); ok {
				out[name] += ms
			}
		}
	}
	return out, nil
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// roundDiffs is the median of b minus the median of a over consecutive
// rounds of size samples.
func roundDiffs(a, b []float64, size int) []float64 {
	var out []float64
	for i := 0; i+size <= len(a) && i+size <= len(b); i += size {
		out = append(out, quantile(b[i:i+size], 0.5)-quantile(a[i:i+size], 0.5))
	}
	return out
}

func overheadReport(t *testing.T, n *N8N, set overheadSettings, runTime time.Duration, wfs []*overheadWorkflow) string {
	t.Helper()
	a, b, c, d := wfs[0], wfs[1], wfs[2], wfs[3]
	ms := func(v float64) string { return fmt.Sprintf("%.1f ms", v) }
	signed := func(v float64) string { return fmt.Sprintf("%+.1f ms", v) }
	p50 := func(xs []float64) float64 { return quantile(xs, .5) }
	// sidecar is w's claimd time per execution (claim + complete), p50 and mean.
	sidecar := func(w *overheadWorkflow) (float64, float64) {
		cl, co := w.routes[overheadClaimRoute], w.routes[overheadCompleteRoute]
		return cl.median() + co.median(), cl.mean() + co.mean()
	}

	var sb strings.Builder
	fmt.Fprintf(&sb, "\nCost per execution of Claim + Complete (make overhead)\n\n")
	fmt.Fprintf(&sb, "n8n %s, regular mode, Node.js %s; n8n's database PostgreSQL %s, pool size %s;\n",
		installedN8NVersion(t), nodeVersionOf(t), postgresVersion(t, n), n8nSetting(t, "DB_POSTGRESDB_POOL_SIZE", "2"))
	fmt.Fprintf(&sb, "expression engine %s", n8nSetting(t, "N8N_EXPRESSION_ENGINE", "vm"))
	if extra := os.Getenv("IC_OVERHEAD_N8N_ENV"); extra != "" {
		fmt.Fprintf(&sb, "; IC_OVERHEAD_N8N_ENV=%q", extra)
	}
	sb.WriteString(";\n")
	fmt.Fprintf(&sb, "node package %s %s; claimd on the same PostgreSQL server; %s\n",
		NodePackageName, nodePackageVersion(), machineInfo())
	fmt.Fprintf(&sb, "N = %d requests per workflow (after %d warm-up each), one at a time, %s idle before each,\n",
		set.n, set.warmup, set.gap)
	fmt.Fprintf(&sb, "workflows interleaved; every B and D request a new event id (claim won, then completed); run %s\n\n",
		runTime.Round(time.Second))

	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "end-to-end latency (client)\tp50\tp95\tmean\t")
	for _, w := range wfs {
		fmt.Fprintf(tw, "%s  %s\t%s\t%s\t%s\t\n", w.label, w.shape, ms(p50(w.lat)), ms(quantile(w.lat, .95)), ms(mean(w.lat)))
	}
	tw.Flush()
	sb.WriteString("\n")

	bSideP50, bSideMean := sidecar(b)
	dSideP50, dSideMean := sidecar(d)
	bP50, bMean := p50(b.lat)-p50(a.lat), mean(b.lat)-mean(a.lat)
	cP50, cMean := p50(c.lat)-p50(a.lat), mean(c.lat)-mean(a.lat)
	dP50, dMean := p50(d.lat)-p50(a.lat), mean(d.lat)-mean(a.lat)
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "added latency per execution\tp50\tmean\t")
	fmt.Fprintf(tw, "B − A  Claim + Complete (this node)\t%s\t%s\t\n", signed(bP50), signed(bMean))
	fmt.Fprintf(tw, "claimd's own time for B's two calls\t%s\t%s\t\n", ms(bSideP50), ms(bSideMean))
	fmt.Fprintf(tw, "B − A − claimd  node + n8n (goal < 5 ms)\t%s\t%s\t\n", signed(bP50-bSideP50), signed(bMean-bSideMean))
	fmt.Fprintf(tw, "D − A  same two calls, n8n's HTTP Request node\t%s\t%s\t\n", signed(dP50), signed(dMean))
	fmt.Fprintf(tw, "D − A − claimd  HTTP Request + n8n\t%s\t%s\t\n", signed(dP50-dSideP50), signed(dMean-dSideMean))
	fmt.Fprintf(tw, "C − A  any two nodes (two No Op)\t%s\t%s\t\n", signed(cP50), signed(cMean))
	tw.Flush()
	if rd := roundDiffs(a.lat, b.lat, set.round); len(rd) > 1 {
		fmt.Fprintf(&sb, "B − A p50 per round of %d: %s … %s (median of rounds %s)\n",
			set.round, signed(slices.Min(rd)), signed(slices.Max(rd)), signed(quantile(rd, .5)))
	}
	sb.WriteString("\n")

	// Inside n8n: each node's time as n8n measures it around execute().
	nodeP50 := func(w *overheadWorkflow, name string) float64 { return p50(w.nodes[name]) }
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "inside n8n (stored executions, p50)\tnode time\tclaimd\toutside claimd\t")
	for _, w := range []*overheadWorkflow{b, d} {
		for _, x := range []struct{ node, route string }{{w.claimNode, overheadClaimRoute}, {w.completeNode, overheadCompleteRoute}} {
			side := w.routes[x.route].median()
			fmt.Fprintf(tw, "%s  %s\t%s\t%s\t%s\t\n", w.label, x.node, ms(nodeP50(w, x.node)), ms(side), signed(nodeP50(w, x.node)-side))
		}
	}
	fmt.Fprintf(tw, "C  No Op + No Op\t%s\t\t\t\n", ms(nodeP50(c, "Before")+nodeP50(c, "After")))
	for _, w := range wfs {
		fmt.Fprintf(tw, "%s  Set, Respond\t%s, %s\t\t\t\n", w.label, ms(nodeP50(w, "Protected Step")), ms(nodeP50(w, "Respond")))
	}
	for _, w := range wfs {
		fmt.Fprintf(tw, "%s  execution, start to stop\t%s\t\t\t\n", w.label, ms(p50(w.exec)))
	}
	tw.Flush()
	fmt.Fprintf(&sb, "\nclaimd: route latency inside claimd from its request log, per request (its /metrics histogram\n"+
		"claimd_http_request_duration_seconds, mean per call: B claim %s, complete %s; D claim %s, complete %s).\n"+
		"node time: n8n's runData executionTime (whole ms); outside claimd: node time minus claimd's time\n"+
		"(expressions, credential read, n8n's HTTP helper, the connection to claimd).\n",
		ms(b.routes[overheadClaimRoute].metricsMean), ms(b.routes[overheadCompleteRoute].metricsMean),
		ms(d.routes[overheadClaimRoute].metricsMean), ms(d.routes[overheadCompleteRoute].metricsMean))
	return sb.String()
}

// installedN8NVersion is the version in the installed n8n's package.json.
func installedN8NVersion(t *testing.T) string {
	in := FindN8N(t)
	var pj struct {
		Version string `json:"version"`
	}
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(in.N8NBin)), "package.json"))
	if err != nil || json.Unmarshal(raw, &pj) != nil || pj.Version == "" {
		return n8nVersion
	}
	return pj.Version
}

func nodeVersionOf(t *testing.T) string {
	out, err := exec.Command(FindN8N(t).NodeBin, "--version").Output()
	if err != nil {
		return nodeVersion
	}
	return strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
}

func nodePackageVersion() string {
	var pj struct {
		Version string `json:"version"`
	}
	dir := nodePackageDir
	if v := os.Getenv("IC_OVERHEAD_NODE_DIR"); v != "" {
		dir = v
	}
	raw, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil || json.Unmarshal(raw, &pj) != nil {
		return "?"
	}
	return pj.Version
}

// overheadN8NEnv parses IC_OVERHEAD_N8N_ENV ("K=V K2=V2") into settings
// for every n8n process.
func overheadN8NEnv(t *testing.T) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, kv := range strings.Fields(os.Getenv("IC_OVERHEAD_N8N_ENV")) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			t.Fatalf("IC_OVERHEAD_N8N_ENV: %q is not K=V", kv)
		}
		env[k] = v
	}
	return env
}

// n8nSetting is an n8n setting as the run uses it: its IC_OVERHEAD_N8N_ENV
// value, else n8n's default (def) for this version.
func n8nSetting(t *testing.T, name, def string) string {
	if v, ok := overheadN8NEnv(t)[name]; ok {
		return v + " (" + name + ")"
	}
	return def + " (n8n's default)"
}

func postgresVersion(t *testing.T, n *N8N) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, n.DatabaseURL)
	if err != nil {
		return "?"
	}
	defer conn.Close(context.Background())
	var v string
	if conn.QueryRow(ctx, "SHOW server_version").Scan(&v) != nil {
		return "?"
	}
	if f := strings.Fields(v); len(f) > 0 {
		return f[0]
	}
	return v
}

// machineInfo names the CPU model and core count (Linux: /proc/cpuinfo).
func machineInfo() string {
	model := ""
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	s := fmt.Sprintf("%d cores", runtime.NumCPU())
	if model != "" {
		s += " (" + model + ")"
	}
	return s + ", " + runtime.GOOS + "/" + runtime.GOARCH
}
