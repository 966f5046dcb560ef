// Package docref checks the references that code, messages and alert rules
// make to the repository's documents: "sidecar/docs/ingest.md#changing-the-sources-file",
// a path from the repository's root and, after #, the anchor GitHub gives
// one of its headings.
package docref

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// ref matches a reference to a document by its path from the repository's
// root: one under sidecar/ or n8n-node/, or the top README.md, with an
// optional #anchor. A relative path (../docs/manual.md) is not one.
var ref = regexp.MustCompile(`(?:^|[^A-Za-z0-9_./-])((?:sidecar|n8n-node)/[A-Za-z0-9_./-]*?\.md|README\.md)(#[a-z0-9_-]+)?`)

// Find returns the references of text, in order.
func Find(text string) []string {
	var out []string
	for _, m := range ref.FindAllStringSubmatchIndex(text, -1) {
		if end := m[1]; end < len(text) && isPathByte(text[end]) {
			continue // sidecar/docs/x.mdx
		}
		r := text[m[2]:m[3]]
		if m[4] >= 0 {
			r += text[m[4]:m[5]]
		}
		out = append(out, r)
	}
	return out
}

var (
	fence   = regexp.MustCompile("(?ms)^[ \t]*```.*?^[ \t]*```[^\n]*$")
	heading = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *#*$`)
)

func isPathByte(b byte) bool {
	return b == '_' || b == '-' || b == '/' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z'
}

// Anchors returns the anchors GitHub gives the headings of md.
func Anchors(md string) map[string]bool {
	md = fence.ReplaceAllString(md, "")
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(md, -1) {
		slug := Slugify(m[1])
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// Slugify is GitHub's heading anchor: lower case, spaces to hyphens, every
// character but letters, digits, hyphens and underscores left out.
func Slugify(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Checker resolves references against the files under a repository root,
// reading each document once.
type Checker struct {
	Root    string
	anchors map[string]map[string]bool
}

// Check says why ref ("path.md" or "path.md#anchor", path from the root)
// does not name an existing document and, with #anchor, one of its headings.
func (c *Checker) Check(ref string) error {
	path, anchor, _ := strings.Cut(ref, "#")
	if !strings.HasSuffix(path, ".md") {
		return fmt.Errorf("%s: not a Markdown document", ref)
	}
	a, ok := c.anchors[path]
	if !ok {
		raw, err := os.ReadFile(filepath.Join(c.Root, filepath.FromSlash(path)))
		if err != nil {
			return fmt.Errorf("%s: no document %s", ref, path)
		}
		a = Anchors(string(raw))
		if c.anchors == nil {
			c.anchors = map[string]map[string]bool{}
		}
		c.anchors[path] = a
	}
	if anchor != "" && !a[anchor] {
		return fmt.Errorf("%s: %s has no heading #%s", ref, path, anchor)
	}
	return nil
}
