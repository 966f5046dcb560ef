package docs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/docref"
)

// The documents whose links are checked, relative to the repository root.
var docs = []string{
	"README.md",
	"sidecar/docs/README.md",
	"sidecar/docs/manual.md",
	"sidecar/docs/ingest.md",
	"sidecar/docs/operations.md",
	"sidecar/docs/security.md",
	"sidecar/docs/ha.md",
	"sidecar/docs/compose.md",
	"sidecar/docs/design.md",
	"sidecar/docs/development.md",
	"n8n-node/README.md",
	"n8n-node/examples/README.md",
}

// repoURL is how the node's README (the npm page) links into the repository.
const repoURL = "https://github.com/idempotent-claim/idempotent-claim/"

var (
	fence      = regexp.MustCompile("(?ms)^[ \t]*```.*?^[ \t]*```[^\n]*$")
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	linkTarget = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
)

// TestDocLinksResolve: every relative link of the documents, and every
// link of the node's README into this repository, names a file that
// exists and, with #anchor, a heading of that file.
func TestDocLinksResolve(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		raw, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			return nil, err
		}
		a := docref.Anchors(string(raw))
		anchors[path] = a
		return a, nil
	}
	for _, doc := range docs {
		raw, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Errorf("%s: %v", doc, err)
			continue
		}
		for _, target := range links(string(raw)) {
			if err := check(root, doc, target, anchorsOf); err != nil {
				t.Errorf("%s: link %s: %v", doc, target, err)
			}
		}
	}
}

func check(root, doc, target string, anchorsOf func(string) (map[string]bool, error)) error {
	path, anchor, _ := strings.Cut(target, "#")
	switch {
	case strings.HasPrefix(path, repoURL):
		rest := strings.TrimPrefix(path, repoURL)
		var ok bool
		for _, p := range []string{"blob/main/", "tree/main/", "raw/main/"} {
			if r, found := strings.CutPrefix(rest, p); found {
				path, ok = r, true
			}
		}
		if rest == "" {
			path, ok = "README.md", true
		}
		if !ok {
			return fmt.Errorf("not a blob/tree/raw link of the main branch")
		}
	case strings.Contains(path, ":"):
		return nil // another site, mailto:
	case path == "":
		path = doc
	default:
		path = filepath.ToSlash(filepath.Join(filepath.Dir(doc), path))
	}
	info, err := os.Stat(filepath.Join(root, path))
	if err != nil {
		return fmt.Errorf("no file %s", path)
	}
	if anchor == "" {
		return nil
	}
	if info.IsDir() {
		path += "/README.md" // GitHub shows a folder's README.md, and its anchors
	}
	if !strings.HasSuffix(path, ".md") {
		return fmt.Errorf("anchor #%s on %s, which is not a Markdown file", anchor, path)
	}
	a, err := anchorsOf(path)
	if err != nil {
		return err
	}
	if !a[anchor] {
		return fmt.Errorf("%s has no heading #%s", path, anchor)
	}
	return nil
}

// links returns the link targets outside code.
func links(md string) []string {
	md = fence.ReplaceAllString(md, "")
	md = inlineCode.ReplaceAllString(md, "``")
	var out []string
	for _, m := range linkTarget.FindAllStringSubmatch(md, -1) {
		out = append(out, m[1])
	}
	return out
}
