package config

import (
	"fmt"
	"strings"
)

// MarkdownTable renders Vars as the README's configuration table
// (`claimd settings -markdown` prints it; a test keeps the README in sync).
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
