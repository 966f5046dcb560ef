package verify

import (
	"fmt"
	"strconv"
	"strings"
)

// MarkdownProviderTable renders every registered provider as the provider
// table of sidecar/docs/ingest.md#durable-ingest-providers-post-to-the-sidecar
// (between ProviderTableBegin and ProviderTableEnd; a test keeps the
// document in sync): type, name and documentation, key, retries, how long
// an id is unique (the key horizon), batches, resends under new ids, the
// methods it sends besides POST (handshakes) and its default volatile
// fields.
func MarkdownProviderTable() string {
	var b strings.Builder
	b.WriteString("| type | provider (documentation) | key | retries | id unique | batches | resends under a new id | handshake methods | volatile by default |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range Providers() {
		docs := "[" + cell(p.Name) + "](" + p.Docs[0] + ")"
		for i, d := range p.Docs[1:] {
			docs += " [" + strconv.Itoa(i+2) + "](" + d + ")"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s | %s | %s |\n", p.Type, docs,
			cell(p.Redelivery.Key), cell(p.Redelivery.Retries), cell(p.Redelivery.Horizon), cell(p.Redelivery.Batches),
			cell(p.Redelivery.Resends), codeList(p.Methods), codeList(p.VolatileFields))
	}
	return b.String()
}

// The markers around the generated provider table in sidecar/docs/ingest.md.
const (
	ProviderTableBegin = "<!-- provider table: generated from the registry (sidecar/verify/table.go), do not edit -->\n"
	ProviderTableEnd   = "<!-- end of provider table -->\n"
)

// cell makes s safe inside a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

// codeList is items as code, comma-separated, or "—".
func codeList(items []string) string {
	if len(items) == 0 {
		return "—"
	}
	out := make([]string, len(items))
	for i, s := range items {
		out[i] = "`" + cell(s) + "`"
	}
	return strings.Join(out, ", ")
}
