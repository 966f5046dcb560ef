package verifytest

import (
	"net/http"
	"time"
)

// GitHubFixtureSecret is the webhook secret of the "github" fixture.
const GitHubFixtureSecret = "fixture-github-secret-0001"

func githubDelivery(guid, body string) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-GitHub-Delivery", guid)
	h.Set("X-GitHub-Event", "issues")
	h.Set("X-GitHub-Hook-ID", "4242")
	h.Set("X-Hub-Signature-256", GitHub(GitHubFixtureSecret, []byte(body)))
	return Delivery{Header: h, Body: []byte(body)}
}

func githubLabeled(label string) string {
	return `{"action":"labeled","issue":{"number":7,"updated_at":"2025-04-22T14:30:00Z"},"label":{"name":"` + label + `"},"sender":{"login":"octocat"}}`
}

func init() {
	RegisterFixture(Fixture{
		Type:    "github",
		Secrets: []string{GitHubFixtureSecret},
		Cases: func(time.Time) Cases {
			tampered := githubDelivery("5b1e0c00-0000-4000-8000-000000000009", githubLabeled("docs"))
			tampered.Body = []byte(githubLabeled("p0"))
			return Cases{
				// Two labels added to one issue in one second: two GUIDs.
				Distinct: []Delivery{
					githubDelivery("5b1e0c00-0000-4000-8000-000000000001", githubLabeled("bug")),
					githubDelivery("5b1e0c00-0000-4000-8000-000000000002", githubLabeled("p1")),
				},
				// A redelivery (UI or API) keeps X-GitHub-Delivery.
				Redelivery: []Delivery{
					githubDelivery("5b1e0c00-0000-4000-8000-000000000003", githubLabeled("docs")),
					githubDelivery("5b1e0c00-0000-4000-8000-000000000003", githubLabeled("docs")),
				},
				Tampered: tampered,
			}
		},
	})
}
