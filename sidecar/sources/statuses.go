package sources

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// StatusRange is an inclusive range of HTTP statuses; Lo == Hi for one status.
type StatusRange struct{ Lo, Hi int }

// Statuses is a set of HTTP statuses as ranges sorted by Lo, overlapping
// ranges merged. The zero value holds no status.
type Statuses []StatusRange

// Has reports whether status is in the set.
func (s Statuses) Has(status int) bool {
	for _, r := range s {
		if status >= r.Lo && status <= r.Hi {
			return true
		}
	}
	return false
}

// String lists the set as the sources file writes it: "404, 408, 500-599".
func (s Statuses) String() string {
	parts := make([]string, len(s))
	for i, r := range s {
		parts[i] = strconv.Itoa(r.Lo)
		if r.Hi != r.Lo {
			parts[i] += "-" + strconv.Itoa(r.Hi)
		}
	}
	return strings.Join(parts, ", ")
}

// DefaultRetryStatuses are the statuses a source retries when its sources
// file sets no forward.retry_statuses, chosen for an n8n target:
//   - 404: n8n answers `{"code":404,"message":"The requested webhook … is
//     not registered."}` while a workflow is being activated or n8n
//     restarts; the provider already has its 2xx, so dead-lettering at
//     once would leave only a manual replay (the price: a wrong URL
//     dead-letters only at the attempt cap);
//   - 408 Request Timeout, 425 Too Early, 429 Too Many Requests;
//   - 409: what a workflow may answer while another delivery of the event
//     holds the claim (in_progress); not for an n8n resume URL, whose 409
//     means the execution was resumed already (forwardStatuses);
//   - 500-599: the target or a proxy in front of it is failing or starting.
//
// Any other 4xx (400, 401, 403, 413, 422…) is taken as permanent.
func DefaultRetryStatuses() Statuses {
	return Statuses{{404, 404}, {408, 408}, {409, 409}, {425, 425}, {429, 429}, {500, 599}}
}

// statusItem is one entry of forward.retry_statuses: "404" or "500-599".
var statusItem = regexp.MustCompile(`^\s*([0-9]{1,6})\s*(?:-\s*([0-9]{1,6})\s*)?$`)

// forwardStatuses sets fw's RetryStatuses and DeliveredStatuses from the
// file's lists forward.retry_statuses and forward.delivered_statuses: each
// a list whose items are an integer status (404) or a string holding one
// or a range ("500-599"), all within 100-599 and none a 2xx; errors name
// the item ("forward.retry_statuses[2]: …"). An empty retry_statuses is
// refused, as it would dead-letter every 5xx at once; an empty
// delivered_statuses is none. A list left out takes its default less the statuses the
// other list names, so naming a status in one list is enough to move it:
// an n8n resume URL's 409 is delivered unless retry_statuses names 409,
// and delivered_statuses: [409] takes 409 out of the default retries. A
// status named in both lists is refused, naming it.
func forwardStatuses(fw *Forward, f ForwardSpec) error {
	fw.ResumeURL = isN8nResumeURL(fw.URL)
	retry, retryGiven, err := parseStatusList(f.RetryStatuses, "forward.retry_statuses", `[404, 429, "500-599"]`)
	if err != nil {
		return err
	}
	if retryGiven && len(retry) == 0 {
		return fmt.Errorf("forward.retry_statuses is empty; leave it out for the defaults (%s), or set forward.max_attempts: 1 to never retry",
			DefaultRetryStatuses())
	}
	delivered, deliveredGiven, err := parseStatusList(f.DeliveredStatuses, "forward.delivered_statuses", "[409]")
	if err != nil {
		return err
	}
	if !deliveredGiven {
		delivered = nil
		if fw.ResumeURL {
			delivered = Statuses{{http.StatusConflict, http.StatusConflict}}.without(retry)
		}
	}
	if !retryGiven {
		retry = DefaultRetryStatuses().without(delivered)
	}
	if st := retry.overlap(delivered); st != 0 {
		return fmt.Errorf("forward.delivered_statuses: %d is in forward.retry_statuses too; a status is retried or taken as delivered, not both", st)
	}
	if len(delivered) == 0 {
		delivered = nil // the zero value: none
	}
	fw.RetryStatuses, fw.DeliveredStatuses = retry, delivered
	return nil
}

// parseStatusList reads a list of statuses and ranges written as field:
// given false when it is not set or null; an empty list is given and
// empty. example is a valid list for the error of a value that is no list.
func parseStatusList(spec yaml.Node, field, example string) (Statuses, bool, error) {
	if spec.IsZero() {
		return nil, false, nil
	}
	list := resolveAlias(&spec)
	switch {
	case list.Kind == yaml.ScalarNode && list.ShortTag() == "!!null":
		return nil, false, nil
	case list.Kind != yaml.SequenceNode:
		return nil, false, fmt.Errorf(`%s must be a list, such as %s`, field, example)
	}
	items := list.Content
	if len(items) == 0 {
		return Statuses{}, true, nil
	}
	set := make(Statuses, 0, len(items))
	for i, n := range items {
		r, err := parseStatusItem(n)
		if err != nil {
			return nil, false, fmt.Errorf("%s[%d]: %w", field, i, err)
		}
		set = append(set, r)
	}
	sort.Slice(set, func(i, j int) bool { return set[i].Lo < set[j].Lo })
	merged := set[:1]
	for _, r := range set[1:] {
		if last := &merged[len(merged)-1]; r.Lo <= last.Hi {
			last.Hi = max(last.Hi, r.Hi)
			continue
		}
		merged = append(merged, r)
	}
	return merged, true, nil
}

// without is s less the statuses of t.
func (s Statuses) without(t Statuses) Statuses {
	out := Statuses{}
	for _, r := range s {
		lo := r.Lo
		for _, x := range t {
			if x.Hi < lo || x.Lo > r.Hi {
				continue
			}
			if x.Lo > lo {
				out = append(out, StatusRange{lo, x.Lo - 1})
			}
			lo = x.Hi + 1
		}
		if lo <= r.Hi {
			out = append(out, StatusRange{lo, r.Hi})
		}
	}
	return out
}

// overlap returns a status in both s and t, or 0.
func (s Statuses) overlap(t Statuses) int {
	for _, a := range s {
		for _, b := range t {
			if lo := max(a.Lo, b.Lo); lo <= min(a.Hi, b.Hi) {
				return lo
			}
		}
	}
	return 0
}

// n8nResumePath matches the path of an n8n resume URL ($execution.resumeUrl
// and resumeFormUrl): a segment webhook-waiting or form-waiting (n8n's
// default N8N_ENDPOINT_WEBHOOK_WAIT and N8N_ENDPOINT_FORM_WAIT) followed by
// the execution id, anywhere in the path (n8n may sit under a prefix).
var n8nResumePath = regexp.MustCompile(`(?:^|/)(?:webhook-waiting|form-waiting)/[^/]+`)

// isN8nResumeURL reports whether forward.url is an n8n resume URL.
func isN8nResumeURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && n8nResumePath.MatchString(u.EscapedPath())
}

func parseStatusItem(n *yaml.Node) (StatusRange, error) {
	const want = `want a status (404) or a range written as a string ("500-599")`
	n = resolveAlias(n)
	switch n.Kind {
	case yaml.ScalarNode:
	case yaml.SequenceNode:
		return StatusRange{}, errors.New(want + ", not a list")
	case yaml.MappingNode:
		return StatusRange{}, errors.New(want + ", not a map")
	default:
		return StatusRange{}, errors.New(want)
	}
	var lo, hi int
	var item string // as written, for the errors below
	switch n.ShortTag() {
	case "!!int":
		if err := n.Decode(&lo); err != nil {
			return StatusRange{}, fmt.Errorf("%s is not an HTTP status (100-599)", n.Value)
		}
		hi, item = lo, strconv.Itoa(lo)
	case "!!str":
		m := statusItem.FindStringSubmatch(n.Value)
		if m == nil {
			// Other text is not quoted: the sources file holds secrets.
			return StatusRange{}, fmt.Errorf("%s, not other text", want)
		}
		lo, _ = strconv.Atoi(m[1])
		hi = lo
		if m[2] != "" {
			hi, _ = strconv.Atoi(m[2])
		}
		item = strconv.Quote(n.Value)
	case "!!null":
		return StatusRange{}, fmt.Errorf("%s, not null", want)
	default:
		return StatusRange{}, fmt.Errorf("%s, not a YAML %s", want, strings.TrimPrefix(n.ShortTag(), "!!"))
	}
	switch {
	case lo < 100 || lo > 599 || hi < 100 || hi > 599:
		return StatusRange{}, fmt.Errorf("%s is not an HTTP status (100-599)", item)
	case lo > hi:
		return StatusRange{}, fmt.Errorf("%s: a range runs from the lower status to the higher", item)
	case lo <= 299 && hi >= 200:
		return StatusRange{}, fmt.Errorf("%s includes a 2xx: a 2xx is a success, never retried by status (an unclaimed one is retried under forward.require_claim)", item)
	}
	return StatusRange{Lo: lo, Hi: hi}, nil
}

// resolveAlias follows YAML aliases (*name) to the node they stand for.
func resolveAlias(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}
