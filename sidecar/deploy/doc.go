// Package deploy holds the files of the container deployment: the example
// sources file mounted into claimd (sources.example.yaml), the PostgreSQL
// init script that creates n8n's database (postgres/), the entrypoint of the
// n8n image that installs the Idempotent Claim node and refuses a queue-mode
// mismatch (n8n-entrypoint.sh), and monitoring/: Prometheus alerting rules
// for claimd (claimd-rules.yml, unit-tested by claimd-rules.test.yml), a
// Grafana dashboard (grafana-dashboard.json), and the monitoring profile's
// Prometheus and Grafana configuration (prometheus.yml, grafana/).
// The repository root's docker-compose.yml, sidecar/Dockerfile and
// n8n-node/Dockerfile use them.
//
// The package has no Go API. Its tests load docker-compose.yml with the
// compose-spec parser (github.com/compose-spec/compose-go/v2), read both
// Dockerfiles, and run the two shell scripts for real (the init script
// against the test PostgreSQL server), since no Docker engine is needed.
// The settle hook's wiring (the n8n image carries n8n-node/hooks/, every n8n
// process loads it with a key claimd accepts) is checked the same way, and
// the hook's own settings reader runs under node with each n8n service's
// compose environment.
// The monitoring files go through promtool (check rules, test rules; a
// missing promtool fails the test, it never skips), and every metric their
// PromQL reads must be in the /metrics of a claimd built and run here.
//
// The developer entry points are tested here too, as a newcomer meets them:
// the Makefile (make help lists every target with a description, make
// db-status), sidecar/scripts/compose-env.sh (the .env of compose secrets), sidecar/scripts/doctor.sh (on a PATH missing tools, and on this
// machine's), sidecar/scripts/run.sh (in a copy of the module, against a
// database of its own) and n8n-node/scripts/install-n8n.sh (with a stand-in
// npm that blocks until the test lets it go).
package deploy
