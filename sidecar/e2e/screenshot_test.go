package e2e

import (
	"bytes"
	"encoding/json"
	"image/png"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The screenshot of n8n-node/examples/README.md#walk-through-inline-claimjson: the inline
// example in the n8n editor.
const (
	// screenshotFile is where TestScreenshotExampleWorkflow writes the PNG,
	// next to the workflow it shows.
	screenshotFile = "inline-claim.png"
	// screenshotScript drives headless Chromium (playwright-core).
	screenshotScript = "../../n8n-node/scripts/screenshot.mjs"
	// screenshotCredID is the id of the Idempotent Claim API credential the
	// example's claim nodes reference.
	screenshotCredID = "icShotClaimCred1"
	// screenshotEffectURL fills the example's __EFFECT_URL__: the placeholder
	// a user replaces with their own API, shown under Call Protected API.
	screenshotEffectURL = "https://api.example.com/orders"
	// screenshotTimeout bounds the browser run (Chromium start, sign-in,
	// loading the editor bundle, rendering the canvas).
	screenshotTimeout = 5 * time.Minute
	// screenshotMinWidth is the narrowest PNG accepted as a screenshot of the
	// editor (the script's default is 1600 pixels wide).
	screenshotMinWidth = 1000
)

// TestScreenshotExampleWorkflow takes the screenshot of the inline example
// workflow in the n8n editor that
// n8n-node/examples/README.md#walk-through-inline-claimjson shows, and writes it to
// n8n-node/examples/inline-claim.png. It runs only with IC_SCREENSHOT=1.
//
// It starts n8n with the node package and the example imported (placeholders
// filled, credential imported), creates the owner, and runs
// n8n-node/scripts/screenshot.mjs with Node 24: headless Chromium signs in,
// opens the workflow, waits for every node on the canvas, closes modals and
// zooms to fit. Needs Chromium (CHROMIUM_PATH, default /usr/bin/chromium)
// and playwright-core installed under IC_SCREENSHOT_TOOLS (default
// $IC_CACHE_DIR/screenshot-tools). The committed PNG is replaced only after
// the new one decoded as a PNG of the expected size.
func TestScreenshotExampleWorkflow(t *testing.T) {
	if os.Getenv("IC_SCREENSHOT") != "1" {
		t.Skip("IC_SCREENSHOT=1 takes the screenshot of the inline example workflow " +
			"(n8n-node/examples/" + screenshotFile + ", shown in n8n-node/examples/README.md#walk-through-inline-claimjson) with headless Chromium")
	}
	in := FindN8N(t)
	chromium := os.Getenv("CHROMIUM_PATH")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("Chromium not found (%v): install it (Debian: apt-get install chromium) or set CHROMIUM_PATH", err)
	}
	tools := screenshotToolsDir(t)
	if _, err := os.Stat(filepath.Join(tools, "node_modules", "playwright-core", "package.json")); err != nil {
		t.Fatalf("playwright-core not installed under %s (%v): run n8n-node/scripts/install-playwright.sh (make playwright)", tools, err)
	}
	script, err := filepath.Abs(screenshotScript)
	if err != nil {
		t.Fatalf("locating %s: %v", screenshotScript, err)
	}

	creds := WriteJSON(t, "credentials.json", []credential{
		claimCredential(screenshotCredID, "Idempotent Claim API", "http://127.0.0.1:8080", "ic_demo_"+RandomHex(t, 16)),
	})
	wf := WriteExample(t, inlineExample, exampleVars{"EFFECT_URL": screenshotEffectURL, "CREDENTIAL_ID": screenshotCredID}, "")
	n := StartN8N(t, N8NConfig{Workflows: []string{wf}, Credentials: []string{creds}, NodePackage: nodePackageDir})

	email, password, owner := setupOwner(t, n)
	// A node type that failed to load still renders, as a placeholder: check
	// it was loaded before taking the picture.
	checkNodeTypeLoaded(t, n, owner, NodePackageName+".idempotentClaim")

	out := filepath.Join(t.TempDir(), screenshotFile)
	nodes, err := json.Marshal(canvasNodeNames(t, wf))
	if err != nil {
		t.Fatalf("encoding node names: %v", err)
	}
	env := Env(map[string]string{
		"IC_N8N_URL":          n.URL,
		"IC_N8N_EMAIL":        email,
		"IC_N8N_PASSWORD":     password,
		"IC_WORKFLOW_ID":      n.WorkflowIDs[0],
		"IC_WORKFLOW_NODES":   string(nodes),
		"IC_SCREENSHOT_OUT":   out,
		"IC_SCREENSHOT_DEBUG": n.Dir,
		"IC_SCREENSHOT_TOOLS": tools,
		"CHROMIUM_PATH":       chromium,
	})
	began := time.Now()
	RunCmd(t, "screenshot.mjs", n.Dir, filepath.Join(n.Dir, "screenshot.log"), env, screenshotTimeout, in.NodeBin, script)

	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("reading the screenshot: %v", err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if cfg.Width < screenshotMinWidth || cfg.Height < screenshotMinWidth/2 {
		t.Fatalf("the screenshot is %dx%d pixels, want at least %dx%d", cfg.Width, cfg.Height, screenshotMinWidth, screenshotMinWidth/2)
	}
	dst := filepath.Join(examplesDir, screenshotFile)
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		t.Fatalf("writing %s: %v", tmp, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		t.Fatalf("replacing %s: %v", dst, err)
	}
	abs, _ := filepath.Abs(dst)
	t.Logf("screenshot %dx%d (%d bytes) taken in %s, written to %s",
		cfg.Width, cfg.Height, len(raw), time.Since(began).Round(time.Millisecond), abs)
}

// screenshotToolsDir is the folder whose node_modules holds playwright-core:
// IC_SCREENSHOT_TOOLS, else $IC_CACHE_DIR/screenshot-tools (IC_CACHE_DIR
// defaulting to $HOME/.cache/idempotent-claim), outside the checkout like the
// n8n install; n8n-node/scripts/install-playwright.sh installs it there.
func screenshotToolsDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("IC_SCREENSHOT_TOOLS"); d != "" {
		return d
	}
	cache := os.Getenv("IC_CACHE_DIR")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatalf("locating the cache: %v", err)
		}
		cache = filepath.Join(home, ".cache", "idempotent-claim")
	}
	return filepath.Join(cache, "screenshot-tools")
}

// setupOwner creates n8n's owner (POST /rest/owner/setup) with a fresh
// password and returns the sign-in e-mail and password, and a client holding
// the owner's session cookie. The browser signs in with the e-mail and
// password through the sign-in form, as a user would.
func setupOwner(t testing.TB, n *N8N) (email, password string, client *http.Client) {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatalf("cookie jar: %v", err)
	}
	client = &http.Client{Timeout: time.Minute, Jar: jar}
	email = "owner@example.com"
	password = "Shot-" + RandomHex(t, 12)
	body, _ := json.Marshal(map[string]string{
		"email": email, "firstName": "Ada", "lastName": "Owner", "password": password,
	})
	resp, err := client.Post(n.URL+"/rest/owner/setup", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("n8n owner setup: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		t.Fatalf("n8n owner setup: %s %.300s", resp.Status, raw)
	}
	return email, password, client
}

// checkNodeTypeLoaded fails the test unless n8n lists node type want in
// GET /types/nodes.json (read with the owner's session).
func checkNodeTypeLoaded(t testing.TB, n *N8N, owner *http.Client, want string) {
	t.Helper()
	resp, err := owner.Get(n.URL + "/types/nodes.json")
	if err != nil {
		t.Fatalf("GET /types/nodes.json: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /types/nodes.json: %s", resp.Status)
	}
	var types []struct {
		Name string `json:"name"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&types); err != nil {
		t.Fatalf("GET /types/nodes.json: %v", err)
	}
	for _, nt := range types {
		if nt.Name == want {
			return
		}
	}
	t.Fatalf("node type %s is not loaded (%d node types listed)", want, len(types))
}

// canvasNodeNames lists the names of the workflow's nodes that the editor
// draws as canvas nodes (every node but sticky notes).
func canvasNodeNames(t testing.TB, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading workflow: %v", err)
	}
	var wf struct {
		Nodes []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(raw, &wf); err != nil {
		t.Fatalf("workflow %s: %v", path, err)
	}
	var out []string
	for _, nd := range wf.Nodes {
		if nd.Type != "n8n-nodes-base.stickyNote" {
			out = append(out, nd.Name)
		}
	}
	if len(out) == 0 {
		t.Fatalf("workflow %s has no nodes to show", path)
	}
	return out
}
