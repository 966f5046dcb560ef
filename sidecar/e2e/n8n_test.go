package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// NodePackageName is the npm name of the community node package; n8n exposes
// its nodes as "<NodePackageName>.<node name>".
const NodePackageName = "n8n-nodes-idempotent-claim"

// Deadlines for n8n start-up. A cold first start runs ~140 migrations; under
// load on two cores start-up to working webhooks can exceed 30 s.
const (
	n8nCLITimeout   = 5 * time.Minute
	n8nReadyTimeout = 4 * time.Minute
)

// n8nEnvPrefixes are the inherited variables dropped from n8n's environment.
var n8nEnvPrefixes = []string{"N8N_", "DB_", "EXECUTIONS_", "QUEUE_", "WEBHOOK_URL", "OFFLOAD_"}

// N8NConfig describes an n8n deployment for one test.
type N8NConfig struct {
	// Workflows are workflow JSON files to import and publish before start
	// (see WriteWorkflow for templated files); each needs a top-level "id".
	// Each must contain at least one Webhook node with httpMethod GET and
	// responseMode onReceived: the harness polls every such path until it
	// answers 200 with the node's options.responseData (or n8n's default
	// "Workflow was started"). Neither /healthz/readiness nor a bare 200 is
	// proof: readiness answers before production webhooks are registered, and
	// while n8n checks its migrations it answers every request with 200
	// "n8n is starting up. Please wait".
	Workflows []string
	// Credentials are credential JSON files (an object or an array of
	// objects with id, name, type and data) imported before the workflows
	// with n8n import:credentials. A plain-object data is encrypted with the
	// deployment's key on import, so tests can write secrets in clear.
	Credentials []string
	// NodePackage is the directory of the built community node package
	// (package.json plus dist/); "" loads no community node. Its package.json
	// and dist/ are copied to $N8N_USER_FOLDER/.n8n/nodes/node_modules/
	// n8n-nodes-idempotent-claim of every process, as a community-node
	// install would lay them out.
	NodePackage string
	// Queue selects queue mode: one main process that receives webhooks and
	// Workers worker processes that execute, coordinated through Redis.
	Queue bool
	// Workers is the number of worker processes in queue mode (default 1).
	Workers int
	// WorkerConcurrency is each worker's --concurrency (default 10).
	WorkerConcurrency int
	// WebhookProcesses is the number of `n8n webhook` processes in queue
	// mode (same database, encryption key, Redis and node files, each on
	// its own port) that serve the production webhooks: they run a trigger
	// node's webhook method and enqueue the execution. As n8n's queue-mode
	// documentation lays it out (webhook processors behind a load balancer
	// for /webhook/*, the main process left out of that pool), the main
	// process then gets N8N_DISABLE_PRODUCTION_MAIN_PROCESS=true and answers
	// production webhook URLs 404; WebhookBaseURLs are the processes'
	// URLs, and N8N_WEBHOOK_URL points at the first. 0 (the default): the
	// main process serves the production webhooks.
	WebhookProcesses int
	// HookFiles are external hook files (n8n's EXTERNAL_HOOK_FILES), as
	// paths relative to NodePackage ("hooks/settle.js"). Every process
	// (main, workers, webhook processes, and the import/publish commands)
	// loads them from its own installed copy of the package, as an
	// operator would point EXTERNAL_HOOK_FILES into the installed package.
	// A file outside dist/ is copied with the top-level folder holding it.
	// The hooks' own settings go in Env.
	HookFiles []string
	// Env adds or overrides environment variables of every n8n process
	// (and the import/publish commands); "" removes a variable.
	Env map[string]string
	// Port is the main process's port; 0 picks a free one. Set it (from
	// FreePort) when something started before n8n must know n8n's URL, such
	// as a sidecar whose sources file forwards to an n8n webhook.
	Port int
}

// N8N is a running n8n deployment with its own PostgreSQL database, user
// folders and logs in Dir (the test's temp dir, or under $IC_E2E_LOG_DIR).
// Its processes are stopped with SIGTERM in t.Cleanup; on failure the tail
// of each log is printed.
type N8N struct {
	// URL is the main process's base URL, http://127.0.0.1:PORT.
	URL string
	// DatabaseURL is n8n's own PostgreSQL database.
	DatabaseURL string
	// Main is the main process; Workers are the queue-mode workers and
	// WebhookProcs the queue-mode webhook processes (N8NConfig.WebhookProcesses).
	Main         *Proc
	Workers      []*Proc
	WebhookProcs []*Proc
	// WebhookBaseURLs are where providers post production webhooks
	// (http://127.0.0.1:PORT): the webhook processes' URLs when there are
	// any, else the main process's URL alone.
	WebhookBaseURLs []string
	// WorkflowIDs are the ids of the imported workflows, in Workflows order.
	WorkflowIDs []string
	// Dir is the deployment's folder (user folders and logs).
	Dir string

	install N8NInstall
	cfg     N8NConfig
	common  map[string]string
	mainEnv []string
	client  *http.Client
	owner   *http.Client
}

// StartN8N imports and publishes cfg.Workflows into a fresh database, starts
// n8n (and workers in queue mode), and returns once every worker reports ready
// and every workflow's GET probe webhook answers 200.
func StartN8N(t testing.TB, cfg N8NConfig) *N8N {
	t.Helper()
	in := FindN8N(t)
	began := time.Now()
	if !cfg.Queue && cfg.Workers > 0 {
		t.Fatalf("N8NConfig.Workers needs Queue: true")
	}
	if cfg.Queue && cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	if !cfg.Queue && cfg.WebhookProcesses > 0 {
		t.Fatalf("N8NConfig.WebhookProcesses needs Queue: true (n8n webhook runs in queue mode only)")
	}
	if len(cfg.HookFiles) > 0 && cfg.NodePackage == "" {
		t.Fatalf("N8NConfig.HookFiles are paths inside NodePackage; set NodePackage")
	}
	if cfg.WorkerConcurrency <= 0 {
		cfg.WorkerConcurrency = 10
	}
	n := &N8N{
		DatabaseURL: FreshDatabase(t, "ic_e2e_n8n"),
		Dir:         LogDir(t, "n8n"),
		install:     in,
		client:      &http.Client{Timeout: 2 * time.Minute},
	}
	port := cfg.Port
	if port == 0 {
		port = FreePort(t)
	}
	n.URL = fmt.Sprintf("http://127.0.0.1:%d", port)
	webhookPorts := make([]int, cfg.WebhookProcesses)
	for i := range webhookPorts {
		webhookPorts[i] = FreePort(t)
		n.WebhookBaseURLs = append(n.WebhookBaseURLs, fmt.Sprintf("http://127.0.0.1:%d", webhookPorts[i]))
	}
	if len(n.WebhookBaseURLs) == 0 {
		n.WebhookBaseURLs = []string{n.URL}
	}

	pg := parsePG(t, n.DatabaseURL)
	common := map[string]string{
		"PATH": filepath.Join(in.NodeDir, "bin") + string(os.PathListSeparator) + os.Getenv("PATH"),

		"DB_TYPE":                "postgresdb",
		"DB_POSTGRESDB_HOST":     pg.Host,
		"DB_POSTGRESDB_PORT":     pg.Port,
		"DB_POSTGRESDB_DATABASE": pg.Database,
		"DB_POSTGRESDB_USER":     pg.User,
		"DB_POSTGRESDB_PASSWORD": pg.Password,

		"N8N_ENCRYPTION_KEY":                    "ic-e2e-" + RandomHex(t, 16),
		"N8N_LISTEN_ADDRESS":                    "127.0.0.1",
		"N8N_HOST":                              "127.0.0.1",
		"N8N_PROTOCOL":                          "http",
		"N8N_PORT":                              strconv.Itoa(port),
		"N8N_WEBHOOK_URL":                       n.WebhookBaseURLs[0] + "/",
		"N8N_DIAGNOSTICS_ENABLED":               "false",
		"N8N_VERSION_NOTIFICATIONS_ENABLED":     "false",
		"N8N_PERSONALIZATION_ENABLED":           "false",
		"N8N_TEMPLATES_ENABLED":                 "false",
		"N8N_SECURE_COOKIE":                     "false",
		"N8N_ENFORCE_SETTINGS_FILE_PERMISSIONS": "false",
		"N8N_LOG_LEVEL":                         "info",
		"N8N_LOG_OUTPUT":                        "console",
		"NODE_ENV":                              "production",
		// Executions are the tests' evidence; keep them all.
		"EXECUTIONS_DATA_SAVE_ON_SUCCESS": "all",
		"EXECUTIONS_DATA_SAVE_ON_ERROR":   "all",
		"EXECUTIONS_DATA_PRUNE":           "false",
	}
	if cfg.Queue {
		redisHost, redisPort := redisAddr(t)
		common["EXECUTIONS_MODE"] = "queue"
		common["QUEUE_BULL_REDIS_HOST"] = redisHost
		common["QUEUE_BULL_REDIS_PORT"] = redisPort
		// A fresh prefix keeps parallel runs (and leftovers of killed runs)
		// out of each other's queues.
		prefix := "ic-e2e-" + RandomHex(t, 6)
		common["QUEUE_BULL_PREFIX"] = prefix
		if cfg.WebhookProcesses > 0 {
			common["N8N_DISABLE_PRODUCTION_MAIN_PROCESS"] = "true"
		}
		// Registered before any process starts, so it runs after they stop.
		t.Cleanup(func() {
			if _, err := redisDeletePrefix(net.JoinHostPort(redisHost, redisPort), prefix+":"); err != nil {
				t.Logf("cleaning Redis keys %s:*: %v", prefix, err)
			}
		})
	}

	n.common = common
	n.cfg = cfg
	n.mainEnv = n.procEnv(t, "main")
	mainLog := filepath.Join(n.Dir, "main.log")
	for _, cred := range cfg.Credentials {
		RunCmd(t, fmt.Sprintf("n8n import:credentials %s", filepath.Base(cred)), n.Dir, mainLog, n.mainEnv, n8nCLITimeout,
			in.NodeBin, in.N8NBin, "import:credentials", "--input="+cred)
	}
	for _, wf := range cfg.Workflows {
		id := workflowID(t, wf)
		n.WorkflowIDs = append(n.WorkflowIDs, id)
		RunCmd(t, fmt.Sprintf("n8n import:workflow %s", filepath.Base(wf)), n.Dir, mainLog, n.mainEnv, n8nCLITimeout,
			in.NodeBin, in.N8NBin, "import:workflow", "--input="+wf)
		RunCmd(t, fmt.Sprintf("n8n publish:workflow --id=%s", id), n.Dir, mainLog, n.mainEnv, n8nCLITimeout,
			in.NodeBin, in.N8NBin, "publish:workflow", "--id="+id)
	}
	t.Logf("n8n: database and %d workflow(s) prepared in %s", len(cfg.Workflows), time.Since(began).Round(time.Millisecond))

	started := time.Now()
	n.Main = StartProc(t, "n8n-main", n.Dir, mainLog, n.mainEnv, in.NodeBin, in.N8NBin, "start")
	// Workers and webhook processes start once main is ready: main and
	// workers booting together against one fresh database have made main
	// exit now and then.
	if cfg.Workers > 0 || cfg.WebhookProcesses > 0 {
		WaitHTTP(t, n.URL+"/healthz/readiness", http.StatusOK, "", n8nReadyTimeout, n.Main)
	}
	var health []string
	for i := 0; i < cfg.Workers; i++ {
		health = append(health, n.startWorker(t))
	}
	for _, p := range webhookPorts {
		n.startWebhookProcess(t, p)
	}
	for _, url := range health {
		WaitHTTP(t, url, http.StatusOK, "", n8nReadyTimeout, n.procs()...)
	}
	n.waitWebhooks(t)
	t.Logf("n8n: %d process(es) serving webhooks %s after start (logs in %s)", len(n.procs()), time.Since(started).Round(time.Millisecond), n.Dir)
	return n
}

// procEnv prepares the user folder of process name (config, event log,
// binary data, the community node) and returns its environment. Every
// process gets its own task-runner broker port: the default (5679) makes a
// second n8n process on the host exit ("Task Broker's port 5679 is already in
// use").
func (n *N8N) procEnv(t testing.TB, name string) []string {
	t.Helper()
	userDir := filepath.Join(n.Dir, name)
	if err := os.MkdirAll(filepath.Join(userDir, ".n8n"), 0o755); err != nil {
		t.Fatalf("creating %s: %v", userDir, err)
	}
	if n.cfg.NodePackage != "" {
		installNodePackage(t, n.cfg.NodePackage, filepath.Join(userDir, ".n8n", "nodes", "node_modules", NodePackageName), n.cfg.HookFiles)
	}
	own := map[string]string{
		"N8N_USER_FOLDER":         userDir,
		"N8N_RUNNERS_BROKER_PORT": strconv.Itoa(FreePort(t)),
	}
	if len(n.cfg.HookFiles) > 0 {
		pkg := filepath.Join(userDir, ".n8n", "nodes", "node_modules", NodePackageName)
		files := make([]string, len(n.cfg.HookFiles))
		for i, f := range n.cfg.HookFiles {
			files[i] = filepath.Join(pkg, filepath.FromSlash(f))
		}
		own["EXTERNAL_HOOK_FILES"] = strings.Join(files, ":")
	}
	return EnvWithout(n8nEnvPrefixes, n.common, own, n.cfg.Env)
}

// startWebhookProcess starts one `n8n webhook` process on port (named
// webhook<N>, log webhook<N>.log). The harness waits for it through the
// workflows' GET probes.
func (n *N8N) startWebhookProcess(t testing.TB, port int) {
	t.Helper()
	name := fmt.Sprintf("webhook%d", len(n.WebhookProcs))
	env := append(n.procEnv(t, name), "N8N_PORT="+strconv.Itoa(port))
	p := StartProc(t, "n8n-"+name, n.Dir, filepath.Join(n.Dir, name+".log"), env,
		n.install.NodeBin, n.install.N8NBin, "webhook")
	n.WebhookProcs = append(n.WebhookProcs, p)
}

// startWorker starts one more queue-mode worker and returns the URL of its
// readiness endpoint (the worker server, on its own port: its default is
// 5678, the main process's default port).
func (n *N8N) startWorker(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("worker%d", len(n.Workers))
	hcPort := FreePort(t)
	env := append(n.procEnv(t, name),
		"QUEUE_HEALTH_CHECK_ACTIVE=true",
		"QUEUE_HEALTH_CHECK_PORT="+strconv.Itoa(hcPort),
		"N8N_WORKER_SERVER_ADDRESS=127.0.0.1",
	)
	w := StartProc(t, "n8n-"+name, n.Dir, filepath.Join(n.Dir, name+".log"), env,
		n.install.NodeBin, n.install.N8NBin, "worker", "--concurrency="+strconv.Itoa(n.cfg.WorkerConcurrency))
	n.Workers = append(n.Workers, w)
	return fmt.Sprintf("http://127.0.0.1:%d/healthz/readiness", hcPort)
}

// procs lists the main process and the workers and webhook processes that
// have not exited.
func (n *N8N) procs() []*Proc {
	out := []*Proc{n.Main}
	for _, p := range append(append([]*Proc{}, n.Workers...), n.WebhookProcs...) {
		if exited, _ := p.Exited(); !exited {
			out = append(out, p)
		}
	}
	return out
}

// waitWebhooks polls every workflow's GET probe webhooks, on every process
// that serves production webhooks, until each answers 200 with its
// expected body.
func (n *N8N) waitWebhooks(t testing.TB) {
	t.Helper()
	for _, wf := range n.cfg.Workflows {
		for _, pr := range probes(t, wf) {
			for i := range n.WebhookBaseURLs {
				WaitHTTP(t, n.WebhookURLAt(i, pr.path), http.StatusOK, pr.body, n8nReadyTimeout, n.procs()...)
			}
		}
	}
}

// AddWorker starts one more queue-mode worker (named worker<N>, log
// worker<N>.log) and returns once it reports ready.
func (n *N8N) AddWorker(t testing.TB) *Proc {
	t.Helper()
	if !n.cfg.Queue {
		t.Fatalf("AddWorker needs an n8n started with Queue: true")
	}
	url := n.startWorker(t)
	WaitHTTP(t, url, http.StatusOK, "", n8nReadyTimeout, n.procs()...)
	return n.Workers[len(n.Workers)-1]
}

// RestartMain stops the main process with SIGTERM (or kills it with SIGKILL
// when crash is true), starts a new one on the same port, database and user
// folder, and returns once the probe webhooks answer again.
func (n *N8N) RestartMain(t testing.TB, crash bool) {
	t.Helper()
	if crash {
		n.Main.Kill(t)
	} else {
		n.Main.Stop(t)
	}
	n.Main = StartProc(t, "n8n-main", n.Dir, n.Main.LogPath, n.mainEnv, n.install.NodeBin, n.install.N8NBin, "start")
	n.waitWebhooks(t)
}

// WebhookURL is the production URL of the webhook with the given path, on
// the first process serving production webhooks (WebhookBaseURLs[0]).
func (n *N8N) WebhookURL(path string) string {
	return n.WebhookURLAt(0, path)
}

// WebhookURLAt is the production URL of the webhook with the given path on
// WebhookBaseURLs[i % len(WebhookBaseURLs)], for spreading deliveries over
// several webhook processes.
func (n *N8N) WebhookURLAt(i int, path string) string {
	return n.WebhookBaseURLs[i%len(n.WebhookBaseURLs)] + "/webhook/" + strings.TrimPrefix(path, "/")
}

// PostWebhook POSTs body (JSON-encoded unless it is []byte) to the production
// webhook at path with the given extra headers, and returns the status and
// response body. A transport error is reported with t.Errorf and returns
// status 0, so PostWebhook is safe to call from several goroutines.
func (n *N8N) PostWebhook(t testing.TB, path string, body any, headers map[string]string) (int, []byte) {
	t.Helper()
	raw, ok := body.([]byte)
	if !ok {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			t.Fatalf("encoding webhook body: %v", err)
		}
	}
	req, err := http.NewRequest(http.MethodPost, n.WebhookURL(path), bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("webhook request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := n.client.Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", req.URL, err)
		return 0, nil
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("POST %s: reading response: %v", req.URL, err)
	}
	return resp.StatusCode, out
}

// installNodePackage copies package.json and dist/ of the built node package
// at src to dst, and for each of hookFiles outside dist/ the top-level
// folder holding it (hooks/settle.js: hooks/).
func installNodePackage(t testing.TB, src, dst string, hookFiles []string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(src, "dist")); err != nil {
		t.Fatalf("node package %s is not built (no dist/): %v", src, err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatalf("creating %s: %v", dst, err)
	}
	pj, err := os.ReadFile(filepath.Join(src, "package.json"))
	if err != nil {
		t.Fatalf("reading node package.json: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dst, "package.json"), pj, 0o644); err != nil {
		t.Fatalf("copying package.json: %v", err)
	}
	if err := os.CopyFS(filepath.Join(dst, "dist"), os.DirFS(filepath.Join(src, "dist"))); err != nil {
		t.Fatalf("copying dist/: %v", err)
	}
	copied := map[string]bool{"dist": true}
	for _, f := range hookFiles {
		top, _, _ := strings.Cut(filepath.ToSlash(filepath.Clean(f)), "/")
		if top == ".." || filepath.IsAbs(f) {
			t.Fatalf("hook file %q is not inside the node package", f)
		}
		if !copied[top] {
			if st, err := os.Stat(filepath.Join(src, top)); err == nil && !st.IsDir() {
				raw, err := os.ReadFile(filepath.Join(src, top))
				if err == nil {
					err = os.WriteFile(filepath.Join(dst, top), raw, 0o644)
				}
				if err != nil {
					t.Fatalf("copying the hook file %s: %v", top, err)
				}
			} else if err := os.CopyFS(filepath.Join(dst, top), os.DirFS(filepath.Join(src, top))); err != nil {
				t.Fatalf("copying the hook files' folder %s/: %v", top, err)
			}
			copied[top] = true
		}
		if _, err := os.Stat(filepath.Join(dst, filepath.FromSlash(f))); err != nil {
			t.Fatalf("hook file %s is not in the node package: %v", f, err)
		}
	}
}

// workflowFile is the part of an n8n workflow export the harness reads.
type workflowFile struct {
	ID    string `json:"id"`
	Nodes []struct {
		Type       string         `json:"type"`
		Parameters map[string]any `json:"parameters"`
	} `json:"nodes"`
}

func readWorkflow(t testing.TB, path string) workflowFile {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading workflow: %v", err)
	}
	var wf workflowFile
	if err := json.Unmarshal(raw, &wf); err != nil {
		t.Fatalf("workflow %s is not valid JSON: %v", path, err)
	}
	return wf
}

func workflowID(t testing.TB, path string) string {
	t.Helper()
	wf := readWorkflow(t, path)
	if wf.ID == "" {
		t.Fatalf("workflow %s has no top-level \"id\"; the harness needs it to publish the workflow", path)
	}
	return wf.ID
}

// probe is a GET webhook the harness polls, and the body it must answer.
type probe struct{ path, body string }

// defaultProbeBody is what a Webhook node in "Respond: Immediately" mode
// answers when it has no custom Response Data.
const defaultProbeBody = "Workflow was started"

// probes lists the workflow's GET webhooks with the body each answers once it
// is registered: its options.responseData, or n8n's default message.
func probes(t testing.TB, path string) []probe {
	t.Helper()
	var out []probe
	for _, node := range readWorkflow(t, path).Nodes {
		if node.Type != "n8n-nodes-base.webhook" {
			continue
		}
		if m, _ := node.Parameters["httpMethod"].(string); m != "GET" {
			continue
		}
		if mode, _ := node.Parameters["responseMode"].(string); mode != "" && mode != "onReceived" {
			t.Fatalf("workflow %s: GET webhook %v must use responseMode onReceived to serve as a readiness probe", path, node.Parameters["path"])
		}
		p, _ := node.Parameters["path"].(string)
		if p == "" {
			continue
		}
		body := defaultProbeBody
		if opts, ok := node.Parameters["options"].(map[string]any); ok {
			if rd, _ := opts["responseData"].(string); rd != "" {
				body = rd
			}
		}
		out = append(out, probe{path: p, body: body})
	}
	if len(out) == 0 {
		t.Fatalf("workflow %s has no GET Webhook node to probe; add one (n8n answers 200 before its webhooks are registered)", path)
	}
	return out
}

// WriteWorkflow reads the workflow template at src (usually under testdata/),
// replaces every "__NAME__" placeholder with vars["NAME"], and writes the
// result into the test's temp dir, returning its path. A placeholder left
// unreplaced fails the test.
func WriteWorkflow(t testing.TB, src string, vars map[string]string) string {
	t.Helper()
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("reading workflow template: %v", err)
	}
	s := string(raw)
	for k, v := range vars {
		s = strings.ReplaceAll(s, "__"+k+"__", v)
	}
	if i := strings.Index(s, "__"); i >= 0 {
		if j := strings.Index(s[i+2:], "__"); j > 0 && !strings.ContainsAny(s[i+2:i+2+j], " \"{}") {
			t.Fatalf("workflow template %s: placeholder %s not replaced", src, s[i:i+4+j])
		}
	}
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.WriteFile(dst, []byte(s), 0o644); err != nil {
		t.Fatalf("writing workflow: %v", err)
	}
	return dst
}

// WriteJSON writes v as JSON to name in the test's temp dir and returns the
// path (for credential files and generated workflows).
func WriteJSON(t testing.TB, name string, v any) string {
	t.Helper()
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatalf("encoding %s: %v", name, err)
	}
	dst := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(dst, raw, 0o600); err != nil {
		t.Fatalf("writing %s: %v", name, err)
	}
	return dst
}

// redisAddr returns the Redis host and port for queue mode, from
// IC_REDIS_ADDR (host:port, default 127.0.0.1:6379).
func redisAddr(t testing.TB) (string, string) {
	t.Helper()
	addr := os.Getenv("IC_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	host, port, ok := strings.Cut(addr, ":")
	if !ok {
		t.Fatalf("IC_REDIS_ADDR %q is not host:port", addr)
	}
	return host, port
}

// openDB connects to n8n's own database for a test's reads, with a 30 s
// context; done closes the connection and ends the context.
func (n *N8N) openDB(t testing.TB) (ctx context.Context, conn *pgx.Conn, done func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	conn, err := pgx.Connect(ctx, n.DatabaseURL)
	if err != nil {
		cancel()
		t.Fatalf("connecting to n8n's database: %v", err)
	}
	return ctx, conn, func() { conn.Close(context.Background()); cancel() }
}

// ExecutionStatuses counts n8n's stored executions of workflowID ("" for all
// workflows) by status (new, running, waiting, success, error, canceled,
// crashed, unknown), read from n8n's own database. GET probe calls add one
// execution each.
func (n *N8N) ExecutionStatuses(t testing.TB, workflowID string) map[string]int {
	t.Helper()
	ctx, conn, done := n.openDB(t)
	defer done()
	rows, err := conn.Query(ctx, `SELECT status, count(*) FROM execution_entity
		WHERE "deletedAt" IS NULL AND ($1 = '' OR "workflowId" = $1) GROUP BY status`, workflowID)
	if err != nil {
		t.Fatalf("reading n8n executions: %v", err)
	}
	out := map[string]int{}
	for rows.Next() {
		var status string
		var count int
		if err := rows.Scan(&status, &count); err != nil {
			t.Fatalf("reading n8n executions: %v", err)
		}
		out[status] = count
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("reading n8n executions: %v", err)
	}
	return out
}

// WaitExecutionsSettled polls until no execution of workflowID ("" for all)
// is new or running (waiting executions count as settled), and returns the
// final counts by status. It fails the test after deadline. Respond to
// Webhook answers before its execution is stored as finished, so check
// executions through this, not right after the webhook answers.
func (n *N8N) WaitExecutionsSettled(t testing.TB, workflowID string, deadline time.Duration) map[string]int {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		st := n.ExecutionStatuses(t, workflowID)
		if st["new"] == 0 && st["running"] == 0 {
			return st
		}
		if time.Now().After(end) {
			t.Fatalf("n8n executions not settled within %s: %v", deadline, st)
		}
		time.Sleep(pollInterval)
	}
}

// OwnerClient returns an HTTP client logged in to n8n's internal REST API
// (/rest/..., /types/...) as the instance owner, creating the owner
// (POST /rest/owner/setup) on first use. The client keeps the auth cookie.
func (n *N8N) OwnerClient(t testing.TB) *http.Client {
	t.Helper()
	if n.owner != nil {
		return n.owner
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatalf("cookie jar: %v", err)
	}
	c := &http.Client{Timeout: time.Minute, Jar: jar}
	body, _ := json.Marshal(map[string]string{
		"email": "owner@e2e.invalid", "firstName": "E2E", "lastName": "Owner",
		"password": "E2e-" + RandomHex(t, 12),
	})
	resp, err := c.Post(n.URL+"/rest/owner/setup", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("n8n owner setup: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		t.Fatalf("n8n owner setup: %s %.300s", resp.Status, raw)
	}
	n.owner = c
	return c
}

// NodeTypes returns the names of the node types the main process has loaded
// (GET /types/nodes.json), e.g. "n8n-nodes-base.webhook" or
// NodePackageName+".idempotentClaim".
func (n *N8N) NodeTypes(t testing.TB) []string {
	t.Helper()
	resp, err := n.OwnerClient(t).Get(n.URL + "/types/nodes.json")
	if err != nil {
		t.Fatalf("GET /types/nodes.json: %v", err)
	}
	defer resp.Body.Close()
	var types []struct {
		Name string `json:"name"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /types/nodes.json: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&types); err != nil {
		t.Fatalf("GET /types/nodes.json: %v", err)
	}
	out := make([]string, 0, len(types))
	for _, nt := range types {
		out = append(out, nt.Name)
	}
	return out
}
