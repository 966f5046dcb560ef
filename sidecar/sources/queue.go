package sources

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
)

// riverQueueName is what River accepts as a queue name (besides at most 64
// characters): letters and digits separated by single '_' or '-'.
var riverQueueName = regexp.MustCompile(`^[a-z0-9]+(?:[_-][a-z0-9]+)*$`)

// QueueName is the River queue of a source's dispatch jobs:
// "dispatch_<source>" with dots as underscores, or, for a source name that
// would not make a valid River queue name (too long, or with doubled or
// trailing separators), "dispatch_h" and 24 hex digits of the name's
// SHA-256. Parse refuses sources whose queue names coincide.
func QueueName(source string) string {
	q := "dispatch_" + strings.ReplaceAll(source, ".", "_")
	if len(q) <= 64 && riverQueueName.MatchString(q) {
		return q
	}
	sum := sha256.Sum256([]byte(source))
	return "dispatch_h" + hex.EncodeToString(sum[:12])
}
