package config

import (
	"fmt"
	"strings"
)

// MarkdownTable renders Vars as the configuration table of
// sidecar/docs/manual.md#configuration (`claimd settings -markdown` prints
// it; a test keeps the manual in sync).
func MarkdownTable() string {
	var b strings.Builder
	b.WriteString("| Environment variable | Flag | Default | Meaning |\n|---|---|---|---|\n")
	for _, v := range Vars {
		d := "—"
		if v.Default != "" {
			d = "`" + v.Default + "`"
		}
		fmt.Fprintf(&b, "| `%s` | `-%s` | %s | %s |\n", v.Env, v.Flag, d, strings.ReplaceAll(v.Help, "|", `\|`))
	}
	return b.String()
}
