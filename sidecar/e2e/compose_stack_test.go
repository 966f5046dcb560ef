package e2e

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// The compose stack test (make compose-test, sidecar/scripts/compose-test.sh)
// brings up the repository's own docker-compose.yml with a real container
// engine. It reads:
//
//	IC_COMPOSE_TEST=1          run it (else it skips: make test does not run it)
//	IC_COMPOSE                 the compose command ("docker compose", or a
//	                           docker-compose v2 binary)
//	COMPOSE_FILE               the compose files, ':'-separated:
//	                           docker-compose.yml, plus
//	                           sidecar/deploy/local-images/docker-compose.local.yml
//	                           without a registry
//	IC_COMPOSE_PREVIOUS_IMAGE  claimd built from the previous release, for the
//	                           upgrade
//	DOCKER_HOST                the engine's API (unix socket), as for docker
//	IC_COMPOSE_PROJECT_PREFIX  the projects' name prefix (compose-test.sh takes
//	                           down what an interrupted run leaves)
const (
	// composeStormEvents × composeStormCopies deliveries per storm,
	// composeStormParallel at once.
	composeStormEvents   = 30
	composeStormCopies   = 7
	composeStormParallel = 70
	// composeTenant is the tenant of the compose file's keys and sources.
	composeTenant = "demo"
	// composeUpTimeout bounds one `up --wait` (images built or cached).
	composeUpTimeout = 20 * time.Minute
	// providerPatience is how long an emulated provider keeps redelivering
	// one refused copy; effectDeadline how long the test waits for an
	// accepted event's effect (an ingested event is dispatched after the
	// answer, with the source's backoff after failures).
	providerPatience = 8 * time.Minute
	effectDeadline   = 10 * time.Minute
)

// composeStack is one project of the shipped compose file, with its own
// name, secrets (.env in a temp dir), published ports and volumes.
type composeStack struct {
	cmd      []string
	project  string
	files    []string
	envFile  string
	secrets  map[string]string
	profiles []string
	env      []string
	dir      string

	claimdURL, n8nURL string
	counter           *Counter
	workflows         []string
	owner             *http.Client
}

// composeWorkflows are the example workflows the stack imports, with the
// webhook paths the storms use.
const (
	composeInlinePath  = "idempotent-claim-inline"
	composeTriggerPath = "idempotent-claim-trigger"
	composeTrigger     = "trigger.json"
)

func newComposeStack(t *testing.T, name string, queue bool) *composeStack {
	t.Helper()
	cmd := strings.Fields(os.Getenv("IC_COMPOSE"))
	if len(cmd) == 0 {
		t.Fatal("IC_COMPOSE names the compose command (make compose-test sets it)")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	s := &composeStack{
		cmd:     cmd,
		project: cmp.Or(os.Getenv("IC_COMPOSE_PROJECT_PREFIX"), "ic-test-"+RandomHex(t, 3)) + "-" + name,
		dir:     LogDir(t, "compose-"+name),
		secrets: map[string]string{},
	}
	for _, f := range filepath.SplitList(os.Getenv("COMPOSE_FILE")) {
		if !filepath.IsAbs(f) {
			f = filepath.Join(root, f)
		}
		s.files = append(s.files, f)
	}
	if len(s.files) == 0 {
		s.files = []string{filepath.Join(root, "docker-compose.yml")}
	}
	// The secrets as make compose-env writes them: random, URL-safe.
	for _, k := range []string{"POSTGRES_PASSWORD", "N8N_DB_PASSWORD", "N8N_ENCRYPTION_KEY", "N8N_RUNNERS_AUTH_TOKEN",
		"IC_HOOK_API_KEY", "GITHUB_WEBHOOK_SECRET", "N8N_HOOK_TOKEN", "GRAFANA_ADMIN_PASSWORD"} {
		s.secrets[k] = RandomHex(t, 16)
	}
	s.secrets["CLAIMD_API_KEYS"] = composeTenant + ":" + RandomHex(t, 16)
	s.secrets["STRIPE_WEBHOOK_SECRET"] = "whsec_" + RandomHex(t, 16)
	var env strings.Builder
	for _, k := range sortedKeys(s.secrets) {
		fmt.Fprintf(&env, "%s=%s\n", k, s.secrets[k])
	}
	s.envFile = filepath.Join(s.dir, "compose.env")
	writeFile(t, s.envFile, env.String(), 0o600)

	// Published ports of this run's own (the compose file's 8080 and 5678
	// may be taken on the machine).
	claimdPort, n8nPort := FreePort(t), FreePort(t)
	s.claimdURL = fmt.Sprintf("http://127.0.0.1:%d", claimdPort)
	s.n8nURL = fmt.Sprintf("http://127.0.0.1:%d", n8nPort)
	override := filepath.Join(s.dir, "ports.yml")
	writeFile(t, override, fmt.Sprintf(`services:
  claimd:
    ports: !override
      - "127.0.0.1:%d:8080"
  n8n:
    ports: !override
      - "127.0.0.1:%d:5678"
`, claimdPort, n8nPort), 0o644)
	s.files = append(s.files, override)
	if queue {
		s.profiles = []string{"queue"}
		s.env = []string{"N8N_EXECUTIONS_MODE=queue"}
	}
	t.Cleanup(func() { s.down(t) })
	return s
}

// args are the compose arguments naming the project, its files and profiles.
func (s *composeStack) args(extraFiles ...string) []string {
	a := append([]string(nil), s.cmd[1:]...)
	a = append(a, "--project-name", s.project, "--env-file", s.envFile)
	for _, f := range append(slices.Clone(s.files), extraFiles...) {
		a = append(a, "--file", f)
	}
	for _, p := range s.profiles {
		a = append(a, "--profile", p)
	}
	return a
}

// compose runs one compose command and returns its combined output; a
// failure or timeout fails the test with the output's tail.
func (s *composeStack) compose(t testing.TB, timeout time.Duration, args ...string) string {
	t.Helper()
	out, err := s.composeErr(timeout, nil, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", strings.Join(s.cmd, " "), strings.Join(args, " "), err, tail(out, 60))
	}
	return out
}

func (s *composeStack) composeErr(timeout time.Duration, extraFiles []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c := exec.CommandContext(ctx, s.cmd[0], append(s.args(extraFiles...), args...)...)
	c.Env = append(EnvWithout([]string{"COMPOSE_FILE", "COMPOSE_PROJECT_NAME", "COMPOSE_PROFILES", "N8N_"}), s.env...)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	log, _ := os.OpenFile(filepath.Join(s.dir, "compose.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if log != nil {
		fmt.Fprintf(log, "$ compose %s\n%s\n", strings.Join(args, " "), out.String())
		log.Close()
	}
	return out.String(), err
}

// up starts the named services (all when none) and waits until every one
// is running and, where it has a health check, healthy.
func (s *composeStack) up(t testing.TB, extraFiles []string, services ...string) time.Duration {
	t.Helper()
	began := time.Now()
	args := append([]string{"up", "--detach", "--build", "--wait", "--wait-timeout", strconv.Itoa(int(composeUpTimeout.Seconds()))}, services...)
	if out, err := s.composeErr(composeUpTimeout+time.Minute, extraFiles, args...); err != nil {
		logs, _ := s.composeErr(time.Minute, extraFiles, "logs", "--no-color", "--tail", "40")
		t.Fatalf("compose up %v: %v\n%s\n--- logs ---\n%s", services, err, tail(out, 40), logs)
	}
	return time.Since(began)
}

// down removes the project's containers, networks and volumes; what is
// left is reported.
func (s *composeStack) down(t testing.TB) {
	if t.Failed() {
		if logs, err := s.composeErr(time.Minute, nil, "logs", "--no-color", "--tail", "80"); err == nil {
			writeFile(t, filepath.Join(s.dir, "services.log"), logs, 0o644)
			t.Logf("compose logs (last 80 lines a service) in %s", filepath.Join(s.dir, "services.log"))
		}
	}
	began := time.Now()
	if out, err := s.composeErr(5*time.Minute, nil, "down", "--volumes", "--remove-orphans", "--timeout", "60"); err != nil {
		t.Errorf("compose down --volumes: %v\n%s", err, tail(out, 20))
		return
	}
	left, _ := s.composeErr(time.Minute, nil, "ps", "--all", "--quiet")
	if strings.TrimSpace(left) != "" {
		t.Errorf("after compose down: containers left: %s", left)
	}
	t.Logf("compose down --volumes: %s", time.Since(began).Round(100*time.Millisecond))
}

// ps logs `compose ps` and returns each service's state and health as the
// engine reports them ("running healthy", "running").
func (s *composeStack) ps(t testing.TB) map[string]string {
	t.Helper()
	t.Logf("compose ps:\n%s", s.compose(t, time.Minute, "ps", "--format", "table {{.Service}}\t{{.Image}}\t{{.Status}}"))
	out := s.compose(t, time.Minute, "ps", "--format", "json")
	states := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var c struct{ Service, State, Health string }
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("compose ps --format json: %v: %.200s", err, line)
		}
		states[c.Service] = strings.TrimSpace(c.State + " " + c.Health)
	}
	return states
}

// checkHealthy fails unless exactly want services run, each healthy where
// the compose file gives it a health check.
func (s *composeStack) checkHealthy(t testing.TB, want map[string]string) {
	t.Helper()
	got := s.ps(t)
	for svc, st := range want {
		if got[svc] != st {
			t.Errorf("service %s: %q, want %q", svc, got[svc], st)
		}
	}
	for svc := range got {
		if _, ok := want[svc]; !ok {
			t.Errorf("service %s runs, want only %v", svc, sortedKeys(want))
		}
	}
}

// engineAPI GETs path from the container engine's Docker-compatible API
// (DOCKER_HOST, a unix socket; default /var/run/docker.sock).
func engineAPI(t testing.TB, path string, v any) {
	t.Helper()
	sock := "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		u, err := url.Parse(h)
		if err != nil || u.Scheme != "unix" {
			t.Fatalf("DOCKER_HOST %q: the test speaks to a unix socket only", h)
		}
		sock = u.Path
	}
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	resp, err := c.Get("http://engine" + path)
	if err != nil {
		t.Fatalf("engine API %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("engine API %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("engine API %s: %v", path, err)
	}
}

// gateway is the host's address on the project's default network: where
// containers reach a server of the test.
func (s *composeStack) gateway(t testing.TB) string {
	t.Helper()
	var nw struct {
		IPAM struct{ Config []struct{ Gateway string } }
	}
	engineAPI(t, "/networks/"+s.project+"_default", &nw)
	for _, c := range nw.IPAM.Config {
		if ip := net.ParseIP(c.Gateway); ip != nil && ip.To4() != nil {
			return c.Gateway
		}
	}
	t.Fatalf("network %s_default has no IPv4 gateway: %+v", s.project, nw)
	return ""
}

// psql runs one SQL statement in the postgres service as claimd and returns
// its unaligned output.
func (s *composeStack) psql(t testing.TB, sql string) string {
	t.Helper()
	return strings.TrimSpace(s.compose(t, time.Minute, "exec", "-T", "postgres",
		"psql", "-U", "claimd", "-d", "claimd", "-At", "-c", sql))
}

// schemaVersion is the newest migration applied to claimd's database.
func (s *composeStack) schemaVersion(t testing.TB) int {
	t.Helper()
	v, err := strconv.Atoi(s.psql(t, "SELECT max(version_id) FROM claimd_schema_version"))
	if err != nil {
		t.Fatalf("schema version: %v", err)
	}
	return v
}

// newestMigration is the number of the newest migration file in schema/.
func newestMigration(t testing.TB) int {
	t.Helper()
	files, err := filepath.Glob("../../schema/migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("schema/migrations: %v", err)
	}
	slices.Sort(files)
	n, err := strconv.Atoi(strings.SplitN(filepath.Base(files[len(files)-1]), "_", 2)[0])
	if err != nil {
		t.Fatalf("migration name %s: %v", files[len(files)-1], err)
	}
	return n
}

// importExamples imports the shipped example workflows (inline claim,
// durable dispatch, trigger) with their credentials into n8n's database the
// way the examples README says (n8n import:workflow, then publish:workflow,
// n8n not running), through a one-off n8n container of the stack.
func (s *composeStack) importExamples(t testing.TB, extraFiles []string) {
	t.Helper()
	claimCredID, hookCredID := "icComposeClaim01", "icComposeHook001"
	apiKey := strings.SplitN(s.secrets["CLAIMD_API_KEYS"], ":", 2)[1]
	dir := filepath.Join(s.dir, "import")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	creds, err := json.Marshal([]credential{
		claimCredential(claimCredID, "Idempotent Claim API", "http://claimd:8080", apiKey),
		{ID: hookCredID, Name: "Sidecar dispatch token", Type: "httpHeaderAuth",
			Data: map[string]any{"name": "Authorization", "value": "Bearer " + s.secrets["N8N_HOOK_TOKEN"]}},
	})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "credentials.json"), string(creds), 0o644)
	vars := exampleVars{"EFFECT_URL": s.counter.URL + "/effect", "CREDENTIAL_ID": claimCredID, "HOOK_CREDENTIAL_ID": hookCredID}
	s.workflows = nil
	for _, ex := range []string{inlineExample, durableExample, composeTrigger} {
		src := WriteExample(t, ex, vars, "")
		raw, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, ex), string(raw), 0o644)
		s.workflows = append(s.workflows, src)
	}
	run := func(args ...string) {
		t.Helper()
		full := append([]string{"run", "--rm", "--no-deps", "-T", "--volume", dir + ":/import:ro", "n8n"}, args...)
		if out, err := s.composeErr(5*time.Minute, extraFiles, full...); err != nil {
			t.Fatalf("compose run n8n %s: %v\n%s", strings.Join(args, " "), err, tail(out, 30))
		}
	}
	run("import:credentials", "--input=/import/credentials.json")
	for i, ex := range []string{inlineExample, durableExample, composeTrigger} {
		run("import:workflow", "--input=/import/"+ex)
		run("publish:workflow", "--id="+workflowID(t, s.workflows[i]))
	}
}

// waitWorkflows waits until every imported workflow's GET probe answers.
func (s *composeStack) waitWorkflows(t testing.TB) {
	t.Helper()
	for _, wf := range s.workflows {
		for _, pr := range probes(t, wf) {
			WaitHTTP(t, s.n8nURL+"/webhook/"+pr.path, http.StatusOK, pr.body, n8nReadyTimeout)
		}
	}
}

// checkNodeInstalled checks that n8n loaded the Idempotent Claim node and
// trigger from the image's copy (IC_NODE_INSTALL=auto), as the README's
// compose section tells users.
func (s *composeStack) checkNodeInstalled(t testing.TB) {
	t.Helper()
	n := &N8N{URL: s.n8nURL, owner: s.owner}
	types := n.NodeTypes(t)
	s.owner = n.OwnerClient(t)
	for _, want := range []string{NodePackageName + ".idempotentClaim", triggerNodeType} {
		if !slices.Contains(types, want) {
			t.Errorf("n8n did not load %s", want)
		}
	}
	logs := s.compose(t, time.Minute, "logs", "--no-color", "n8n")
	if !strings.Contains(logs, "idempotent-claim:") {
		t.Errorf("n8n's log has no line of the image's entrypoint (idempotent-claim: …)")
	}
}

// composeRoute is one way an event reaches its effect: its effect key and
// how one copy is delivered.
type composeRoute struct {
	name string
	key  func(id string) string
	send func(t testing.TB, id string) answer
	// async: an accepted copy (2xx) is only stored; the effect follows
	// (ingest).
	async bool
	// claimsFirst: the claim is won before n8n creates the execution (the
	// trigger). When n8n then cannot create it (its database restarting),
	// no execution runs and no hook settles the claim: it waits for its
	// lease and then stays unknown for review (or a reconciler).
	claimsFirst bool
	source      string
}

func (s *composeStack) routes() []composeRoute {
	stripe := func(endpoint string) func(testing.TB, string) answer {
		return func(t testing.TB, id string) answer {
			body, _ := json.Marshal(map[string]any{"id": id, "object": "event", "type": "invoice.paid",
				"data": map[string]any{"object": map[string]any{"id": "in_" + id, "amount_due": 4200}}})
			return postQuiet(endpoint, body, map[string]string{
				"Stripe-Signature": verifytest.StripeHeader(time.Now().Unix(), body, s.secrets["STRIPE_WEBHOOK_SECRET"])})
		}
	}
	keyOf := func(source string) func(string) string {
		return func(id string) string {
			return claim.IdempotencyKey(composeTenant, claim.Key{Source: source, EventID: id})
		}
	}
	return []composeRoute{
		{name: "n8n webhook → Claim node", key: keyOf(inlineSource), source: inlineSource, send: func(t testing.TB, id string) answer {
			body, _ := json.Marshal(map[string]any{"id": id, "type": "order.created", "amount": 4200})
			return postQuiet(s.n8nURL+"/webhook/"+composeInlinePath, body, nil)
		}},
		{name: "claimd ingest → dispatch", key: keyOf("stripe"), send: stripe(s.claimdURL + "/ingest/stripe"), async: true, source: "stripe"},
		{name: "Idempotent Claim Trigger", key: keyOf("stripe"), send: stripe(s.n8nURL + "/webhook/" + composeTriggerPath),
			claimsFirst: true, source: "stripe"},
	}
}

// postQuiet is post without test failures: a transport error is answer
// Code 0 (a container restarting refuses connections).
func postQuiet(endpoint string, raw []byte, headers map[string]string) answer {
	req, err := http.NewRequest(http.MethodPost, endpoint, bytes.NewReader(raw))
	if err != nil {
		return answer{}
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := webhookClient.Do(req)
	if err != nil {
		return answer{Raw: []byte(err.Error())}
	}
	defer resp.Body.Close()
	a := answer{Code: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After")}
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	a.Raw = buf.Bytes()
	var parsed struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(a.Raw, &parsed) == nil {
		a.Status = parsed.Status
	}
	return a
}

// describe names an answer for the storm tallies: its code and status
// ("200 duplicate"), an ingest receipt's status ("200 received:accepted"),
// "no answer" for a transport error, else its code.
func describe(a answer) string {
	if a.Code == 0 {
		return "no answer"
	}
	if a.Status != "" {
		return fmt.Sprintf("%d %s", a.Code, a.Status)
	}
	// An ingest receipt names each event's status; the trigger's answer,
	// its outcome.
	var rc struct {
		Received []struct {
			Status  string `json:"status"`
			Outcome string `json:"outcome"`
		} `json:"received"`
	}
	if json.Unmarshal(a.Raw, &rc) == nil && len(rc.Received) == 1 {
		return fmt.Sprintf("%d %s", a.Code, cmp.Or(rc.Received[0].Status, rc.Received[0].Outcome, "received"))
	}
	return strconv.Itoa(a.Code)
}

// accepted is what ends a provider's redelivery of a copy: a 2xx.
func accepted(a answer) bool { return a.Code >= 200 && a.Code < 300 }

// stormStats are the answers of one storm.
type stormStats struct {
	mu       sync.Mutex
	first    map[string]int // first answer of each copy, by description
	refused  int            // attempts not accepted (redelivered)
	refusals []time.Time    // when each refused attempt was answered
	gaveUp   []string
}

func (st *stormStats) add(first bool, a answer) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if first {
		st.first[describe(a)]++
	}
	if !accepted(a) {
		st.refused++
		st.refusals = append(st.refusals, time.Now())
	}
}

// storm delivers copies of each of ids over route with parallel senders,
// in a shuffled order, as a provider would: a copy answered other than 2xx
// (or not answered) is redelivered after its Retry-After (at most 2 s
// here) until accepted or providerPatience is spent. progress is called
// (in its own goroutine) with the number of copies accepted so far after
// each acceptance.
func storm(t testing.TB, r composeRoute, ids []string, copies, parallel int, progress func(done int)) *stormStats {
	t.Helper()
	type job struct{ id string }
	jobs := make([]job, 0, len(ids)*copies)
	for _, id := range ids {
		for range copies {
			jobs = append(jobs, job{id})
		}
	}
	rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	st := &stormStats{first: map[string]int{}}
	var next, done atomic.Int64
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(jobs) {
					return
				}
				id := jobs[i].id
				end := time.Now().Add(providerPatience)
				for attempt := 0; ; attempt++ {
					a := r.send(t, id)
					st.add(attempt == 0, a)
					if accepted(a) {
						break
					}
					if time.Now().After(end) {
						st.mu.Lock()
						st.gaveUp = append(st.gaveUp, fmt.Sprintf("%s: %s", id, a))
						st.mu.Unlock()
						break
					}
					wait := 2 * time.Second
					if n, err := strconv.Atoi(a.RetryAfter); err == nil && n >= 0 && n < 2 {
						wait = time.Duration(n) * time.Second
					}
					time.Sleep(wait + time.Duration(rand.IntN(500))*time.Millisecond)
				}
				if progress != nil {
					progress(int(done.Add(1)))
				}
			}
		}()
	}
	wg.Wait()
	return st
}

// checkOneEffectEach waits for each id's effect over route and fails unless
// every id has exactly one. held (nil: none allowed) is the claim lookup of
// a storm in which n8n's database restarted: an event of a claimsFirst
// route may then have no effect if its claim is unknown (held for review),
// and such events are counted apart.
func checkOneEffectEach(t testing.TB, c *Counter, r composeRoute, ids []string, held func(source, id string) string) {
	t.Helper()
	end := time.Now().Add(effectDeadline)
	missing, review := 0, 0
	for _, id := range ids {
		for c.Count(r.key(id)) < 1 && time.Now().Before(end) {
			if held != nil && r.claimsFirst && held(r.source, id) == "unknown" {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		switch {
		case c.Count(r.key(id)) >= 1:
		case held != nil && r.claimsFirst && held(r.source, id) == "unknown":
			review++
		default:
			missing++
		}
	}
	doubled := 0
	for _, id := range ids {
		if n := c.Count(r.key(id)); n > 1 {
			doubled++
			t.Errorf("%s: event %s had %d effects, want 1", r.name, id, n)
		}
	}
	if missing > 0 {
		t.Errorf("%s: %d of %d events had no effect within %s", r.name, missing, len(ids), effectDeadline)
	}
	total := 0
	for _, id := range ids {
		total += c.Count(r.key(id))
	}
	t.Logf("%s: %d events, %d effects (missing %d, doubled %d, held unknown for review %d)", r.name, len(ids), total, missing, doubled, review)
}

// eventIDs returns n fresh event ids named after what they test.
func eventIDs(t testing.TB, prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("evt_%s_%02d_%s", prefix, i, RandomHex(t, 4))
	}
	return ids
}

// runStorms runs one storm of composeStormEvents × composeStormCopies over every route at
// once and checks one effect per event. during, when set, is called in its
// own goroutine with a function that blocks until that fraction (0..1) of
// all copies has been accepted.
func (s *composeStack) runStorms(t *testing.T, what string, during func(t *testing.T, reached func(frac float64))) {
	t.Helper()
	routes := s.routes()
	total := len(routes) * composeStormEvents * composeStormCopies
	var doneAll atomic.Int64
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	reached := func(frac float64) {
		mu.Lock()
		defer mu.Unlock()
		for float64(doneAll.Load()) < frac*float64(total) {
			cond.Wait()
		}
	}
	progress := func(int) {
		doneAll.Add(1)
		mu.Lock()
		cond.Broadcast()
		mu.Unlock()
	}
	var duringDone chan struct{}
	if during != nil {
		duringDone = make(chan struct{})
		go func() {
			defer close(duringDone)
			during(t, reached)
		}()
	}
	began := time.Now()
	ids := make([][]string, len(routes))
	stats := make([]*stormStats, len(routes))
	Parallel(len(routes), func(i int) {
		ids[i] = eventIDs(t, fmt.Sprintf("%s%d", what, i), composeStormEvents)
		stats[i] = storm(t, routes[i], ids[i], composeStormCopies, composeStormParallel, progress)
	})
	if duringDone != nil {
		// Whatever the storm did not reach (all copies answered before a
		// step's mark) still runs before the counts.
		mu.Lock()
		doneAll.Store(int64(total))
		cond.Broadcast()
		mu.Unlock()
		<-duringDone
	}
	for i, r := range routes {
		st := stats[i]
		t.Logf("%s storm over %s: %d × %d copies, %d at once: first answers %v; %d refused attempts redelivered; answered in %s",
			what, r.name, composeStormEvents, composeStormCopies, composeStormParallel, st.first, st.refused, time.Since(began).Round(time.Second))
		if len(st.gaveUp) > 0 {
			t.Errorf("%s: %d copies never accepted within %s: %v", r.name, len(st.gaveUp), providerPatience, st.gaveUp[:min(5, len(st.gaveUp))])
		}
	}
	var held func(string, string) string
	if during != nil {
		held = func(source, id string) string { return s.claimState(t, source, id) }
	}
	for i, r := range routes {
		checkOneEffectEach(t, s.counter, r, ids[i], held)
	}
}

// claimState is the state of the claim of source/eventID ("" when none).
func (s *composeStack) claimState(t testing.TB, source, eventID string) string {
	t.Helper()
	c := &Claimd{URLs: []string{s.claimdURL}, APIKey: strings.SplitN(s.secrets["CLAIMD_API_KEYS"], ":", 2)[1], Tenant: composeTenant}
	status, body := c.Do(t, 0, http.MethodGet, "/v1/claims?source="+url.QueryEscape(source)+"&event_id="+url.QueryEscape(eventID), nil)
	if status == http.StatusNotFound {
		return ""
	}
	var rec claimRecord
	if status != http.StatusOK || json.Unmarshal(body, &rec) != nil {
		t.Fatalf("GET claim %s/%s: %d %.200s", source, eventID, status, body)
	}
	return rec.State
}

// restart restarts one service the way an operator does (SIGTERM, then
// SIGKILL after the compose file's stop_grace_period) and logs how long it
// took until the container runs again. The timeout is passed explicitly:
// podman 4.3's Docker API kills at once (SIGKILL, no SIGTERM) on a restart
// that names none, which `docker compose restart` without --timeout sends.
func (s *composeStack) restart(t testing.TB, service string) {
	t.Helper()
	var cfg struct {
		Services map[string]struct {
			StopGracePeriod string `json:"stop_grace_period"`
		} `json:"services"`
	}
	if err := json.Unmarshal([]byte(s.compose(t, time.Minute, "config", "--format", "json")), &cfg); err != nil {
		t.Fatalf("compose config: %v", err)
	}
	grace := 10 * time.Second // the engine's default
	if g := cfg.Services[service].StopGracePeriod; g != "" {
		d, err := time.ParseDuration(g)
		if err != nil {
			t.Fatalf("%s: stop_grace_period %q: %v", service, g, err)
		}
		grace = d
	}
	began := time.Now()
	s.compose(t, 5*time.Minute, "restart", "--timeout", strconv.Itoa(int(grace.Seconds())), service)
	t.Logf("restarted %s (stop_grace_period %s) in %s", service, grace, time.Since(began).Round(100*time.Millisecond))
}

// TestComposeStack brings up the shipped docker-compose.yml (with
// sidecar/deploy/local-images/docker-compose.local.yml when no registry is
// reachable) and drives it as users would:
//
//  1. regular mode, claimd of the previous release: healthy, the node
//     installed from the image, the examples imported; then claimd is
//     upgraded to the current build while deliveries flow: migrations
//     applied, every event one effect, refusals only while claimd was
//     replaced;
//  2. a storm of 30 events × 7 copies (70 at once) through n8n's webhook,
//     claimd's ingest door and the Idempotent Claim Trigger: 30 effects
//     each;
//  3. the same storm while claimd and PostgreSQL restart: none lost, none
//     doubled;
//  4. queue mode (Redis, worker, task runners): healthy, the storm, and the
//     storm while an n8n worker, claimd and PostgreSQL restart;
//  5. teardown with volumes.
func TestComposeStack(t *testing.T) {
	if os.Getenv("IC_COMPOSE_TEST") != "1" {
		t.Skip("make compose-test runs this test (IC_COMPOSE_TEST=1): it builds images and starts containers")
	}
	began := time.Now()
	defer func() {
		if !t.Failed() {
			recordComposeVerified(t, fmt.Sprintf("passed %s in %s (engine %s)", time.Now().UTC().Format("2006-01-02"),
				time.Since(began).Round(time.Minute), cmp.Or(os.Getenv("IC_CONTAINER_ENGINE"), "docker")))
		}
	}()
	t.Run("regular mode", func(t *testing.T) {
		s := newComposeStack(t, "regular", false)
		var previous []string
		if img := os.Getenv("IC_COMPOSE_PREVIOUS_IMAGE"); img != "" {
			p := filepath.Join(s.dir, "claimd-previous.yml")
			writeFile(t, p, fmt.Sprintf("services:\n  claimd:\n    image: %s\n    pull_policy: never\n    build: !reset null\n", img), 0o644)
			previous = []string{p}
		}
		took := s.up(t, previous, "postgres", "claimd")
		t.Logf("postgres and claimd healthy after %s", took.Round(time.Second))
		s.counter = NewCounterAt(t, s.gateway(t))
		s.importExamples(t, previous)
		took = s.up(t, previous)
		t.Logf("regular mode: every service up (healthy where checked) after %s", took.Round(time.Second))
		s.checkHealthy(t, map[string]string{"postgres": "running healthy", "claimd": "running healthy",
			"n8n": "running healthy", "n8n-runner": "running"})
		s.checkNodeInstalled(t)
		s.waitWorkflows(t)

		if previous != nil {
			t.Run("upgrade claimd while deliveries flow", func(t *testing.T) { s.checkUpgrade(t, previous) })
		}
		t.Run("storm", func(t *testing.T) { s.runStorms(t, "reg", nil) })
		t.Run("storm with claimd and PostgreSQL restarted", func(t *testing.T) {
			s.runStorms(t, "regrst", func(t *testing.T, reached func(float64)) {
				reached(0.2)
				s.restart(t, "claimd")
				reached(0.5)
				s.restart(t, "postgres")
			})
		})
	})
	t.Run("queue mode", func(t *testing.T) {
		s := newComposeStack(t, "queue", true)
		// Redis too: in queue mode n8n's entrypoint refuses to run (the
		// import commands included) while the Redis host does not resolve.
		s.up(t, nil, "postgres", "claimd", "redis")
		s.counter = NewCounterAt(t, s.gateway(t))
		s.importExamples(t, nil)
		took := s.up(t, nil)
		t.Logf("queue mode: every service up (healthy where checked) after %s", took.Round(time.Second))
		s.checkHealthy(t, map[string]string{"postgres": "running healthy", "claimd": "running healthy",
			"n8n": "running healthy", "n8n-runner": "running", "redis": "running healthy",
			"n8n-worker": "running healthy", "n8n-worker-runner": "running"})
		s.checkNodeInstalled(t)
		s.waitWorkflows(t)
		t.Run("storm", func(t *testing.T) { s.runStorms(t, "que", nil) })
		t.Run("storm with a worker, claimd and PostgreSQL restarted", func(t *testing.T) {
			s.runStorms(t, "querst", func(t *testing.T, reached func(float64)) {
				reached(0.15)
				s.restart(t, "n8n-worker")
				reached(0.4)
				s.restart(t, "claimd")
				reached(0.65)
				s.restart(t, "postgres")
			})
		})
	})
}

// checkUpgrade replaces the running claimd (previous release) with the
// current build (`compose up --build` of the claimd service alone) while
// two senders deliver new events without pause, each as a provider would
// (redelivered until accepted). It checks the migrations were applied,
// every event got exactly one effect, and every refused attempt was
// answered while claimd was being replaced.
func (s *composeStack) checkUpgrade(t *testing.T, previous []string) {
	before := s.schemaVersion(t)
	routes := s.routes()[:2] // the Claim node and the ingest door
	stop := make(chan struct{})
	// at is when an attempt was sent: an attempt sent before the new
	// claimd was ready may be answered after (the Claim node retries the
	// sidecar for a few seconds before it gives up with a 503).
	type attempt struct {
		at    time.Time
		ok    bool
		route int
		what  string
	}
	var mu sync.Mutex
	var attempts []attempt
	sent := make([][]string, len(routes))
	var wg sync.WaitGroup
	for i, r := range routes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Paced: a few events a second per route, as steady traffic
			// (unpaced, the ingest door takes thousands a minute and the
			// check waits for n8n to run them all).
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				id := fmt.Sprintf("evt_upg%d_%03d_%s", i, n, RandomHex(t, 4))
				sent[i] = append(sent[i], id)
				end := time.Now().Add(providerPatience)
				for {
					sentAt := time.Now()
					a := r.send(t, id)
					mu.Lock()
					attempts = append(attempts, attempt{sentAt, accepted(a), i, describe(a)})
					mu.Unlock()
					if accepted(a) || time.Now().After(end) {
						break
					}
					time.Sleep(500 * time.Millisecond)
				}
			}
		}()
	}
	// Deliveries flow through the previous claimd first.
	WaitHTTPCount := func(n int) {
		for {
			mu.Lock()
			c := len(attempts)
			mu.Unlock()
			if c >= n {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	WaitHTTPCount(10)
	// claimd's own view: when /readyz on the published port stopped
	// answering 200 (the old claimd stopping) and answered it again (the
	// new one ready).
	var downAt, upAt time.Time
	watchDone := make(chan struct{})
	watchStop := make(chan struct{})
	go func() {
		defer close(watchDone)
		c := &http.Client{Timeout: 2 * time.Second}
		for {
			select {
			case <-watchStop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			resp, err := c.Get(s.claimdURL + "/readyz")
			ok := err == nil && resp.StatusCode == http.StatusOK
			if err == nil {
				resp.Body.Close()
			}
			switch {
			case !ok && downAt.IsZero():
				downAt = time.Now()
			case ok && !downAt.IsZero() && upAt.IsZero():
				upAt = time.Now()
			}
		}
	}()
	began := time.Now()
	s.up(t, nil, "claimd")
	ready := time.Now()
	close(watchStop)
	<-watchDone
	if !downAt.IsZero() && !upAt.IsZero() {
		t.Logf("upgrade: claimd's /readyz not 200 from %s to %s after the upgrade began (%s; the image build before it)",
			downAt.Sub(began).Round(100*time.Millisecond), upAt.Sub(began).Round(100*time.Millisecond), upAt.Sub(downAt).Round(100*time.Millisecond))
	}
	WaitHTTPCount(len(attempts) + 10)
	close(stop)
	wg.Wait()

	// What the new claimd said while it started (migrations, listening).
	for _, line := range strings.Split(s.compose(t, time.Minute, "logs", "--no-color", "--timestamps", "--since", began.UTC().Format(time.RFC3339), "claimd"), "\n") {
		if strings.Contains(line, "migrat") || strings.Contains(line, "listen") || strings.Contains(line, "shut") {
			t.Logf("claimd: %.300s", line)
		}
	}
	after := s.schemaVersion(t)
	want := newestMigration(t)
	t.Logf("upgrade: schema version %d → %d; claimd replaced and healthy in %s", before, after, ready.Sub(began).Round(100*time.Millisecond))
	if after != want {
		t.Errorf("schema version after the upgrade: %d, want %d (the newest migration)", after, want)
	}
	var refused []time.Time
	for i, r := range routes {
		var first, last time.Time
		n, total := 0, 0
		answers := map[string]int{}
		for _, a := range attempts {
			if a.route != i {
				continue
			}
			total++
			if a.ok {
				continue
			}
			if n == 0 {
				first = a.at
			}
			last = a.at
			n++
			answers[a.what]++
			refused = append(refused, a.at)
		}
		if n == 0 {
			t.Logf("upgrade, %s: none of %d attempts refused", r.name, total)
			continue
		}
		t.Logf("upgrade, %s: %d of %d attempts refused (%v), sent from %s to %s after the upgrade began; each redelivered until accepted",
			r.name, n, total, answers, first.Sub(began).Round(100*time.Millisecond), last.Sub(began).Round(100*time.Millisecond))
	}
	for _, at := range refused {
		if at.Before(began) || at.After(ready) {
			t.Errorf("a delivery sent at %s was refused, outside the upgrade (%s → %s)", at.Format(time.RFC3339Nano), began.Format(time.RFC3339Nano), ready.Format(time.RFC3339Nano))
			break
		}
	}
	for i, r := range routes {
		checkOneEffectEach(t, s.counter, r, sent[i], nil)
	}
}

// writeFile writes content to path with mode, failing the test on error.
func writeFile(t testing.TB, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// composeVerifiedFile records the inputs TestComposeStack last passed with;
// TestComposeStackVerified (part of make test) fails when they changed
// since, so a change to the compose file, the deployment files or the
// Dockerfiles lands only with a green make compose-test.
const composeVerifiedFile = "../../sidecar/deploy/local-images/compose-test.verified"

// composeInputs are the files TestComposeStack runs, relative to the
// repository root: what users get from docker-compose.yml. The monitoring
// profile's files are left out (the test does not start it).
func composeInputs(t testing.TB) []string {
	t.Helper()
	files := []string{"docker-compose.yml", "sidecar/Dockerfile", "n8n-node/Dockerfile",
		"sidecar/scripts/compose-test.sh", "sidecar/e2e/compose_stack_test.go"}
	for _, dir := range []string{"sidecar/deploy", "n8n-node/hooks"} {
		err := filepath.WalkDir(filepath.Join("../..", dir), func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel("../..", p)
			switch {
			case d.IsDir() && rel == "sidecar/deploy/monitoring":
				return filepath.SkipDir
			case d.IsDir(), strings.HasSuffix(rel, ".go"), filepath.Join("../..", rel) == composeVerifiedFile:
				return nil
			}
			files = append(files, filepath.ToSlash(rel))
			return nil
		})
		if err != nil {
			t.Fatalf("listing %s: %v", dir, err)
		}
	}
	slices.Sort(files)
	return files
}

// composeInputsHash is the SHA-256 of composeInputs' names and contents.
func composeInputsHash(t testing.TB) string {
	t.Helper()
	h := sha256.New()
	for _, f := range composeInputs(t) {
		raw, err := os.ReadFile(filepath.Join("../..", f))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(raw))
		h.Write(raw)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// recordComposeVerified writes composeVerifiedFile after a green run.
func recordComposeVerified(t testing.TB, summary string) {
	t.Helper()
	writeFile(t, composeVerifiedFile, fmt.Sprintf(`# Written by make compose-test when TestComposeStack passed (sidecar/e2e/
# compose_stack_test.go); TestComposeStackVerified fails once the files it
# ran change. Commit it with the change that made you run the test.
inputs-sha256 %s
%s
`, composeInputsHash(t), summary), 0o644)
}

// TestComposeStackVerified: the compose file, the deployment files and the
// Dockerfiles are the ones make compose-test last passed with (it is too
// slow for make test; see the README's "Without a registry").
func TestComposeStackVerified(t *testing.T) {
	raw, err := os.ReadFile(composeVerifiedFile)
	if err != nil {
		t.Fatalf("%v: run make compose-test", err)
	}
	want := composeInputsHash(t)
	for _, line := range strings.Split(string(raw), "\n") {
		if got, ok := strings.CutPrefix(line, "inputs-sha256 "); ok {
			if got != want {
				t.Fatalf("docker-compose.yml, sidecar/deploy/, n8n-node/hooks/ or a Dockerfile changed since make compose-test last passed "+
					"(inputs %s, recorded %s): run make compose-test, which records the new inputs in %s, and commit that file",
					want[:12], got[:min(12, len(got))], filepath.Base(composeVerifiedFile))
			}
			return
		}
	}
	t.Fatalf("%s has no inputs-sha256 line: run make compose-test", composeVerifiedFile)
}
