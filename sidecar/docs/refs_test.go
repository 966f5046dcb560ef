package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/docref"
)

// The files whose references to documents are checked, by extension: code,
// scripts, alert rules, the API description.
var refExts = map[string]bool{".go": true, ".ts": true, ".js": true, ".mjs": true, ".sh": true, ".yml": true, ".yaml": true}

// Folders not walked: dependencies, build output, local state.
var refSkip = map[string]bool{".git": true, "node_modules": true, "dist": true, ".run": true}

// TestCodeReferencesResolve: every reference that code, comments, log and
// error messages, settings descriptions and alert rules make to a document
// by its path from the repository's root ("sidecar/docs/ingest.md#changing-the-sources-file")
// names a document that exists and, with #anchor, a heading of it.
func TestCodeReferencesResolve(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	c := &docref.Checker{Root: root}
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if refSkip[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !refExts[filepath.Ext(path)] {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for i, line := range strings.Split(string(raw), "\n") {
			for _, ref := range docref.Find(line) {
				n++
				if err := c.Check(ref); err != nil {
					t.Errorf("%s:%d: %v", filepath.ToSlash(rel), i+1, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no references found: the walk missed the tree")
	}
	t.Logf("%d references checked", n)
}
