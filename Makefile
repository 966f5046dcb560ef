# Idempotent Claim: developer entry points.
#
# `make help` lists every target with its one-line description, taken from
# the `## target: description` comment above the target (the one place a
# target is described; sidecar/deploy/makefile_test.go checks every .PHONY
# target has one). `make doctor` checks the prerequisites.
#
# Environment: DATABASE_URL (make run), TEST_DATABASE_URL (make test; default:
# the project-local cluster), BENCH_DATABASE_URL (make bench: a server URL,
# default: the project-local cluster), IC_E2E=0 (skip the end-to-end
# tests and the n8n install), IC_BROWSER=0 (skip the console's browser test
# and the playwright-core install), CHROMIUM_PATH (default /usr/bin/chromium),
# IC_CACHE_DIR (n8n/Node/playwright-core cache, default
# $HOME/.cache/idempotent-claim), IC_REDIS_ADDR (Redis for queue-mode tests),
# CLAIMD_ADDR (make run's listen address, default 127.0.0.1:8080).

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO ?= go
NPM ?= npm

# The Go packages of this repository (go.mod ignores n8n-node/node_modules,
# so ./... is the same list).
GO_PACKAGES := ./sidecar/... ./schema/...

IC_CACHE_DIR ?= $(HOME)/.cache/idempotent-claim
export IC_CACHE_DIR

DEVDB := sidecar/scripts/devdb.sh
TESTENV := sidecar/scripts/testenv.sh

# Puts the cached Node 24 (installed by `make n8n`) first on PATH when it is
# there: n8n and @n8n/node-cli want it. Without it the system node is used.
with_node24 = d=$$(ls -d "$(IC_CACHE_DIR)"/node-24.*/node_modules/node-*/bin 2>/dev/null | sort -V | tail -n 1 || true); \
	if [ -n "$$d" ]; then export PATH="$$d:$$PATH"; fi;

# The end-to-end tests need the cached n8n install; IC_E2E=0 skips both.
# The console's browser test needs playwright-core (and Chromium); IC_E2E=0
# or IC_BROWSER=0 skips it and the install.
ifeq ($(IC_E2E),0)
E2E_PREREQ :=
else ifeq ($(IC_BROWSER),0)
E2E_PREREQ := n8n build-node
else
E2E_PREREQ := n8n build-node playwright
endif

.PHONY: help doctor run try compose-env compose-test build build-go build-node test test-short test-go test-node test-e2e lint \
	sqlc bench compare overhead screenshot console-screenshots n8n node24 playwright node-deps db-start db-stop db-status db-url db-reset clean

## help: list the targets with what each does (this text)
help:
	@echo 'Idempotent Claim: developer entry points. Usage: make TARGET'
	@echo
	@awk '/^## [a-z0-9-]+: / { \
		line = substr($$0, 4); i = index(line, ": "); \
		n++; name[n] = substr(line, 1, i - 1); desc[n] = substr(line, i + 2); \
		if (i - 1 > w) w = i - 1 } \
		END { fmt = "  %-" w "s  %s\n"; for (k = 1; k <= n; k++) printf fmt, name[k], desc[k] }' Makefile
	@echo
	@sed -n '/^# Environment:/,/^$$/s/^# \{0,1\}//p' Makefile

## doctor: check what make run and make test need; print what to install
doctor:
	@sidecar/scripts/doctor.sh

## run: build bin/claimd and start it (project-local PostgreSQL when DATABASE_URL is unset)
run:
	@sidecar/scripts/run.sh

## try: the node in a running n8n: claimd + n8n with the examples imported; prints the editor URL, login, a sample delivery
# Installs Node 24 and n8n into IC_CACHE_DIR the first time (several
# minutes); state in .run/try (rm -rf .run/try starts over); Ctrl-C stops
# both. Ports: TRY_N8N_PORT (5688), TRY_CLAIMD_PORT (8088); see
# sidecar/scripts/try.sh.
try:
	@sidecar/scripts/try.sh

## compose-env: write docker compose's required secrets missing from .env (random; never changes one)
# The secrets are the ${NAME:?…} of docker-compose.yml; see
# sidecar/scripts/compose-env.sh.
compose-env:
	@sidecar/scripts/compose-env.sh

## compose-test: docker-compose.yml for real: images built here, regular + queue mode, storms, restarts, claimd upgrade
# Not part of make test (too slow for CI when cold; times in
# sidecar/docs/compose.md#without-a-registry): run it after changing docker-compose.yml,
# sidecar/deploy/, n8n-node/hooks/ or a Dockerfile. It records what it ran
# in sidecar/deploy/local-images/compose-test.verified, which make test
# checks. Needs root, podman (or Docker) and debootstrap; see
# sidecar/scripts/compose-test.sh.
compose-test:
	@sidecar/scripts/compose-test.sh

## build: the sidecar binary and the n8n node package
build: build-go build-node

## build-go: the sidecar binary only (bin/claimd)
build-go:
	$(GO) build -o bin/claimd ./sidecar/cmd/claimd

## build-node: the n8n node package only (n8n-node/dist)
# n8n-node build draws a spinner (@clack/prompts): a frame every 80 ms. When
# stdout is not a terminal (CI, a log file) it runs with CI=true (one line
# a step) and NO_COLOR, and the cursor controls it still writes are removed.
build-node: node-deps
	@echo "npm --prefix n8n-node run build"; $(with_node24) \
	if [ -t 1 ]; then $(NPM) --prefix n8n-node run build; \
	else CI=true NO_COLOR=1 $(NPM) --prefix n8n-node run build 2>&1 | \
		awk '{ gsub(/\033\[[0-9;?]*[A-Za-z]/, ""); print }'; fi

## test: every suite: Go (race detector, real PostgreSQL, end-to-end), then the node's tests
# Both suites run; the target fails if either failed.
test: $(E2E_PREREQ) node-deps
	@rc=0; \
	echo "go test -race -count=1 -timeout 30m $(GO_PACKAGES)"; \
	$(TESTENV) $(GO) test -race -count=1 -timeout 30m $(GO_PACKAGES) || rc=1; \
	echo "npm --prefix n8n-node test"; \
	$(with_node24) $(NPM) --prefix n8n-node test || rc=1; \
	if [ $$rc -ne 0 ]; then echo 'make test: FAILED (see above)' >&2; fi; \
	exit $$rc

## test-short: the fast tier: go test -short (no PostgreSQL, n8n, Redis or browser), then the node's unit tests
# -short skips, each saying what it needs, the tests that need PostgreSQL,
# n8n, Redis, Chromium, promtool or a build of claimd (package
# sidecar/internal/short); the node's vitest suite needs none of them. Both
# run; the target fails if either failed.
test-short: node24 node-deps
	@rc=0; \
	echo "go test -short $(GO_PACKAGES)"; \
	$(GO) test -short $(GO_PACKAGES) || rc=1; \
	echo "npm --prefix n8n-node test"; \
	$(with_node24) $(NPM) --prefix n8n-node test || rc=1; \
	if [ $$rc -ne 0 ]; then echo 'make test-short: FAILED (see above)' >&2; fi; \
	exit $$rc

## test-go: the Go tests only (end-to-end included unless IC_E2E=0)
test-go: $(E2E_PREREQ)
	$(TESTENV) $(GO) test -race -count=1 -timeout 30m $(GO_PACKAGES)

## test-node: the n8n node's unit tests only (vitest)
test-node: node24 node-deps
	@echo "npm --prefix n8n-node test"; $(with_node24) $(NPM) --prefix n8n-node test

## test-e2e: the end-to-end tests only, against a real n8n (verbose)
test-e2e: n8n build-node playwright
	$(TESTENV) $(GO) test -race -count=1 -v ./sidecar/e2e

# The shell scripts of the registry-free images (sidecar/deploy/local-images).
LOCAL_IMAGE_SCRIPTS := $(wildcard sidecar/deploy/local-images/*.sh sidecar/deploy/local-images/*/*.sh)

## lint: gofmt, go vet, golangci-lint, go mod tidy (no diff), sqlc diff, shell checks, n8n node lint and scanner
# (n8n's community package scanner runs on the packed tarball).
lint: node-deps
	@out=$$(gofmt -l sidecar schema); \
	if [ -n "$$out" ]; then echo 'gofmt -l: these files need gofmt:' >&2; echo "$$out" >&2; exit 1; fi
	$(GO) vet $(GO_PACKAGES)
	@echo "sidecar/scripts/golangci-lint.sh (sidecar/.golangci.yml)"; sidecar/scripts/golangci-lint.sh $(GO_PACKAGES)
	@$(GO) mod tidy -diff >/dev/null || { echo 'go.mod/go.sum are not tidy: run go mod tidy' >&2; $(GO) mod tidy -diff >&2; exit 1; }
	@sidecar/scripts/sqlc.sh check
	@for f in sidecar/scripts/*.sh n8n-node/scripts/*.sh .ci/run $(LOCAL_IMAGE_SCRIPTS); do [ ! -f "$$f" ] || bash -n "$$f"; done
	@if command -v shellcheck >/dev/null; then shellcheck sidecar/scripts/*.sh .ci/run n8n-node/scripts/*.sh sidecar/deploy/n8n-entrypoint.sh $(LOCAL_IMAGE_SCRIPTS); fi
	@echo "npm --prefix n8n-node run lint"; $(with_node24) $(NPM) --prefix n8n-node run lint
	@echo "npm --prefix n8n-node run typecheck"; $(with_node24) $(NPM) --prefix n8n-node run typecheck
	@echo "n8n-node/scripts/scan-package.sh"; $(with_node24) n8n-node/scripts/scan-package.sh

## sqlc: regenerate sidecar/db/dbsqlc from sidecar/db/queries/*.sql (builds sqlc into IC_CACHE_DIR once)
# The generated code is committed; make lint fails when it is not what the
# queries generate. See sidecar/db/sqlc.yaml and sidecar/scripts/sqlc.sh.
sqlc:
	@sidecar/scripts/sqlc.sh generate

## bench: figures only: payload hash MB/s, then claims/s next to pgbench (BENCH_ARGS)
# claimbench first times the payload hash in-process (-hash-only: that
# alone), then creates (and drops) its own database on the server, starts
# bin/claimd and runs pgbench; BENCH_ARGS go to claimbench
# (e.g. BENCH_ARGS='-duration 10s -concurrency 1,16,64').
bench: build-go
	@if [ -z "$${BENCH_DATABASE_URL:-}" ]; then \
		$(DEVDB) start; BENCH_DATABASE_URL=$$($(DEVDB) url); \
	fi; \
	if d=$$($(DEVDB) bindir 2>/dev/null); then export PATH="$$d:$$PATH"; fi; \
	DATABASE_URL=$$BENCH_DATABASE_URL $(GO) run ./sidecar/cmd/claimbench -claimd $(CURDIR)/bin/claimd $(BENCH_ARGS)

## compare: the remove-duplicates comparison against a real n8n
compare: n8n build-node
	IC_COMPARE=1 $(TESTENV) $(GO) test ./sidecar/e2e -run TestCompareRemoveDuplicates -v -count=1

## overhead: figures only (~8 min): what each deduplication recipe adds per delivery in n8n, won and duplicate
# One run, two n8n in regular mode on PostgreSQL (A without the settle hook,
# B with it): plain, Remove Duplicates, Claim + Complete, the Idempotent
# Claim Trigger (claims completed by the test) and the trigger with the
# settle hook; paced, interleaved, in rounds of new event ids then the same
# ids again. Prints added latency vs plain (p50/p95, won and duplicate), n8n
# executions per duplicate, n8n's and claimd's own times
# (sidecar/e2e/overhead_test.go). Knobs: IC_OVERHEAD_N (200 events per
# workflow), IC_OVERHEAD_ROUND (40 per round), IC_OVERHEAD_GAP_MS (100),
# IC_OVERHEAD_WARMUP (20), IC_OVERHEAD_N8N_ENV ('K=V ...', n8n settings),
# IC_OVERHEAD_NODE_DIR (another build of n8n-node/, with hooks/).
overhead: n8n build-node
	IC_OVERHEAD=1 $(TESTENV) $(GO) test ./sidecar/e2e -run '^TestOverhead$$' -v -count=1 -timeout 30m

## screenshot: the inline example's screenshot in n8n-node/examples/README.md (needs Chromium or CHROMIUM_PATH)
# Writes n8n-node/examples/inline-claim.png; Chromium: apt-get install chromium.
screenshot: n8n build-node playwright
	IC_SCREENSHOT=1 $(TESTENV) $(GO) test ./sidecar/e2e -run TestScreenshotExampleWorkflow -count=1 -v

## console-screenshots: the console's screenshots in sidecar/docs/operations.md, by its browser test (needs Chromium)
# Writes sidecar/console/screenshots/*.png (TestConsoleBrowser and TestConsoleCharts with
# IC_CONSOLE_SCREENSHOTS=1: every check runs, the PNGs replace the committed
# ones only when all passed).
console-screenshots: playwright
	IC_CONSOLE_SCREENSHOTS=1 $(TESTENV) $(GO) test ./sidecar/e2e -run '^TestConsole(Browser|Charts)$$' -count=1 -v

## playwright: install the pinned playwright-core into IC_CACHE_DIR (cached; drives the system Chromium)
# Only stdout (the path) goes to /dev/null.
playwright:
	@$(with_node24) n8n-node/scripts/install-playwright.sh >/dev/null

## n8n: install the pinned Node 24 and n8n into IC_CACHE_DIR (cached; cold: 4-17 min)
# Only stdout (the paths) goes to /dev/null: progress, heartbeats and errors
# on stderr show.
n8n:
	n8n-node/scripts/install-n8n.sh >/dev/null

## node24: the pinned Node.js only (into IC_CACHE_DIR), for the node's unit tests
node24:
	@n8n-node/scripts/install-n8n.sh --node-only >/dev/null

## node-deps: npm ci in n8n-node when n8n-node/node_modules is missing
# --ignore-scripts: see .ci/run (a dependency's preinstall refuses npm).
node-deps:
	@if [ ! -d n8n-node/node_modules ]; then \
		echo "npm --prefix n8n-node ci --ignore-scripts"; \
		$(with_node24) $(NPM) --prefix n8n-node ci --ignore-scripts --no-audit --no-fund; \
	fi

## db-start: start the project-local PostgreSQL cluster (created at the first start)
db-start:
	@$(DEVDB) start
## db-stop: stop the project-local cluster (its data stays)
db-stop:
	@$(DEVDB) stop
## db-status: print whether the project-local cluster runs (exits 0 either way)
# devdb.sh status exits 3 when the cluster is stopped (for scripts); the
# target reports the state, it does not fail on it.
db-status:
	@$(DEVDB) status || [ $$? -eq 3 ]
## db-url: print the URL of make run's database (claimd) in the project-local cluster
db-url:
	@$(DEVDB) url claimd
## db-reset: stop the project-local cluster and delete it with its data
db-reset:
	@$(DEVDB) destroy

## clean: build outputs (keeps the database cluster and the demo key)
clean:
	rm -rf bin n8n-node/dist coverage
