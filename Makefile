# Idempotent Claim: developer entry points.
#
#   make run    build and start the sidecar (a project-local PostgreSQL is
#               created and started when DATABASE_URL is unset)
#   make test   every test suite: Go (unit, PostgreSQL, end-to-end with a real
#               n8n) and the n8n node's unit tests
#
# Environment: DATABASE_URL (make run), TEST_DATABASE_URL (make test; default:
# the project-local cluster), BENCH_DATABASE_URL (make bench: a server URL,
# default: the project-local cluster), IC_E2E=0 (skip the end-to-end
# tests and the n8n install), IC_CACHE_DIR (n8n/Node cache, default
# $HOME/.cache/idempotent-claim), IC_REDIS_ADDR (Redis for queue-mode tests).

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO ?= go
NPM ?= npm

# The Go packages of this repository. Not ./... : n8n-node/node_modules
# contains third-party .go files that ./... would pick up.
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
ifeq ($(IC_E2E),0)
E2E_PREREQ :=
else
E2E_PREREQ := n8n build-node
endif

.PHONY: help run build build-go build-node test test-go test-node test-e2e lint \
	bench compare overhead screenshot n8n node-deps db-start db-stop db-status db-url db-reset clean

help:
	@sed -n '3,12p' Makefile | sed 's/^# \{0,1\}//'
	@echo
	@echo 'targets: run build test test-go test-node test-e2e lint bench compare overhead screenshot n8n'
	@echo '         db-start db-stop db-status db-url db-reset clean'

## run: build bin/claimd and start it (see sidecar/scripts/run.sh)
run:
	sidecar/scripts/run.sh

## build: the sidecar binary and the n8n node package
build: build-go build-node

build-go:
	$(GO) build -o bin/claimd ./sidecar/cmd/claimd

build-node: node-deps
	@echo "npm --prefix n8n-node run build"; $(with_node24) $(NPM) --prefix n8n-node run build

## test: Go tests (race detector, real PostgreSQL, end-to-end), then node tests.
## Both suites run; the target fails if either failed.
test: $(E2E_PREREQ) node-deps
	@rc=0; \
	echo "go test -race -count=1 -timeout 30m $(GO_PACKAGES)"; \
	$(TESTENV) $(GO) test -race -count=1 -timeout 30m $(GO_PACKAGES) || rc=1; \
	echo "npm --prefix n8n-node test"; \
	$(with_node24) $(NPM) --prefix n8n-node test || rc=1; \
	if [ $$rc -ne 0 ]; then echo 'make test: FAILED (see above)' >&2; fi; \
	exit $$rc

test-go: $(E2E_PREREQ)
	$(TESTENV) $(GO) test -race -count=1 -timeout 30m $(GO_PACKAGES)

test-node: node-deps
	@echo "npm --prefix n8n-node test"; $(with_node24) $(NPM) --prefix n8n-node test

test-e2e: n8n build-node
	$(TESTENV) $(GO) test -race -count=1 -v ./sidecar/e2e

## lint: gofmt, go vet, go mod tidy (no diff), shell syntax, n8n node lint,
## n8n's community package scanner on the packed tarball
lint: node-deps
	@out=$$(gofmt -l sidecar schema); \
	if [ -n "$$out" ]; then echo 'gofmt -l: these files need gofmt:' >&2; echo "$$out" >&2; exit 1; fi
	$(GO) vet $(GO_PACKAGES)
	@$(GO) mod tidy -diff >/dev/null || { echo 'go.mod/go.sum are not tidy: run go mod tidy' >&2; $(GO) mod tidy -diff >&2; exit 1; }
	@for f in sidecar/scripts/*.sh n8n-node/scripts/*.sh .ci/run; do [ ! -f "$$f" ] || bash -n "$$f"; done
	@if command -v shellcheck >/dev/null; then shellcheck sidecar/scripts/*.sh .ci/run n8n-node/scripts/scan-package.sh sidecar/deploy/n8n-entrypoint.sh; fi
	@echo "npm --prefix n8n-node run lint"; $(with_node24) $(NPM) --prefix n8n-node run lint
	@echo "n8n-node/scripts/scan-package.sh"; $(with_node24) n8n-node/scripts/scan-package.sh

## bench: figures only. claimbench first times the payload hash in-process
## (-hash-only: that alone), then creates (and drops) its own database on
## the server, starts bin/claimd and runs pgbench; BENCH_ARGS go to claimbench
## (e.g. BENCH_ARGS='-duration 10s -concurrency 1,16,64').
bench: build-go
	@if [ -z "$${BENCH_DATABASE_URL:-}" ]; then \
		$(DEVDB) start; BENCH_DATABASE_URL=$$($(DEVDB) url); \
	fi; \
	if d=$$($(DEVDB) bindir 2>/dev/null); then export PATH="$$d:$$PATH"; fi; \
	DATABASE_URL=$$BENCH_DATABASE_URL $(GO) run ./sidecar/cmd/claimbench -claimd $(CURDIR)/bin/claimd $(BENCH_ARGS)

## compare: the remove-duplicates comparison against a real n8n
compare: n8n build-node
	IC_COMPARE=1 $(TESTENV) $(GO) test ./sidecar/e2e -run TestCompareRemoveDuplicates -v -count=1

## overhead: figures only (~3-4 min). Latency Claim + Complete add per
## execution in a real n8n: the workflow with them vs the same without, vs two
## No Op nodes and vs two HTTP Request nodes making the same calls, next to
## claimd's own time for the two calls (sidecar/e2e/overhead_test.go). Knobs:
## IC_OVERHEAD_N (200 per workflow), IC_OVERHEAD_GAP_MS (100),
## IC_OVERHEAD_WARMUP (20), IC_OVERHEAD_N8N_ENV ('K=V ...', n8n settings).
overhead: n8n build-node
	IC_OVERHEAD=1 $(TESTENV) $(GO) test ./sidecar/e2e -run '^TestOverhead$$' -v -count=1 -timeout 30m

## screenshot: README screenshot of the inline example -> n8n-node/examples/inline-claim.png
## (needs Chromium: apt-get install chromium, or CHROMIUM_PATH)
screenshot: n8n build-node
	@t="$(IC_CACHE_DIR)/screenshot-tools"; \
	if [ ! -f "$$t/node_modules/playwright-core/package.json" ]; then \
		$(with_node24) $(NPM) install --prefix "$$t" --no-audit --no-fund playwright-core@1.65.1; \
	fi
	IC_SCREENSHOT=1 $(TESTENV) $(GO) test ./sidecar/e2e -run TestScreenshotExampleWorkflow -count=1 -v

## n8n: install the pinned Node 24 and n8n into $(IC_CACHE_DIR) (cached)
n8n:
	n8n-node/scripts/install-n8n.sh >/dev/null

# --ignore-scripts: see .ci/run (a dependency's preinstall refuses npm).
node-deps:
	@if [ ! -d n8n-node/node_modules ]; then \
		echo "npm --prefix n8n-node ci --ignore-scripts"; \
		$(with_node24) $(NPM) --prefix n8n-node ci --ignore-scripts --no-audit --no-fund; \
	fi

db-start:
	$(DEVDB) start
db-stop:
	$(DEVDB) stop
db-status:
	@$(DEVDB) status
db-url:
	@$(DEVDB) url
## db-reset: stop the project-local cluster and delete it with its data
db-reset:
	$(DEVDB) destroy

## clean: build outputs (keeps the database cluster and the demo key)
clean:
	rm -rf bin n8n-node/dist coverage
