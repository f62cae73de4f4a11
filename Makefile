# relayout — see README.md. `make demo` and `make test` are the two commands a
# new user needs; everything else is for developers.

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/relayout/relayout/internal/version.Version=$(VERSION)
DEMO    := .demo

.PHONY: all build pgo image deps python-deps browser-deps bench-gpu test test-short race vet fmt-check py-check demo bench clean fuzz-short probe

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/relayout ./cmd/relayout
	$(GO) build -o bin/relayout-gen ./cmd/relayout-gen

# The OCI image, without a Docker daemon (cmd/relayout-image, with
# go-containerregistry): a static binary, CA certificates, a non-root user;
# written to bin/relayout-oci.tar. Push it with
#   go run ./cmd/relayout-image -bin bin/relayout-linux-amd64 -version $(VERSION) -push REGISTRY/relayout:$(VERSION)
# or `skopeo copy oci-archive:bin/relayout-oci.tar docker://REGISTRY/relayout:$(VERSION)`.
image:
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags "$(LDFLAGS) -s -w" -o bin/relayout-linux-amd64 ./cmd/relayout
	$(GO) run ./cmd/relayout-image -bin bin/relayout-linux-amd64 -version $(VERSION) -out bin/relayout-oci.tar

# Test and benchmark peers: DuckDB (npm @duckdb/node-api) as an independent
# reader, and Debian's python3-numpy for the NumPy loader and its checks.
# Node.js itself comes with the machine image.
deps: tools/node/node_modules/.installed python-deps browser-deps

python-deps:
	scripts/deps_python.sh

# Debian's Chromium, for the report page test.
browser-deps:
	scripts/deps_browser.sh

tools/node/node_modules/.installed: tools/node/package.json tools/node/package-lock.json
	scripts/deps.sh
	touch $@

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# pyflakes over the Python loader, its tests and the bench scripts: names
# used but never defined fail here, not in the one branch a test reaches
# (a retry's `time.sleep` without `import time` went unnoticed until a test
# damaged a block).
py-check: python-deps
	/usr/bin/python3 -m pyflakes python bench

# The README's test command. RELAYOUT_REQUIRE_PEERS makes tests fail, not
# skip, when DuckDB is missing.
test: deps fmt-check vet py-check
	RELAYOUT_REQUIRE_PEERS=1 $(GO) test -count=1 -timeout 30m ./...
	$(MAKE) --no-print-directory fuzz-short

# Each fuzz target for a fixed number of executions (make test). Counts, not
# durations: with a -fuzztime duration Go's fuzz coordinator can report
# "context deadline exceeded" as a failure on a busy machine, with no
# crasher (golang/go#75804, unfixed in Go 1.26). FUZZTIME=10m runs every
# target for that long instead, for a real session.
FUZZ_HEADER ?= 50000x
FUZZ_CONFIG ?= 10000x
FUZZ_PARQUET ?= 20000x
FUZZ_PLAN ?= 5000x
FUZZ_DETECT ?= 3000x
# FuzzPlanAndTaskManifests runs reduce and commit on a fresh copy of a
# mapped output per input; minimizing an interesting input that way at Go's
# default (60 s each) stalled the run for minutes.
FUZZ_PLAN_MINIMIZE ?= 20x
fuzz-short:
	RELAYOUT_REQUIRE_PEERS=1 $(GO) test -run '^$$' -fuzz '^FuzzReadHeader$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_HEADER)) ./loader
	RELAYOUT_REQUIRE_PEERS=1 $(GO) test -run '^$$' -fuzz '^FuzzConfig$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_CONFIG)) ./cmd/relayout
	RELAYOUT_REQUIRE_PEERS=1 $(GO) test -run '^$$' -fuzz '^FuzzParquetInput$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_PARQUET)) ./source
	RELAYOUT_REQUIRE_PEERS=1 $(GO) test -run '^$$' -fuzz '^FuzzPlanAndTaskManifests$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_PLAN)) -fuzzminimizetime $(FUZZ_PLAN_MINIMIZE) ./pipeline
	RELAYOUT_REQUIRE_PEERS=1 $(GO) test -run '^$$' -fuzz '^FuzzPackedDetect$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_DETECT)) -fuzzminimizetime $(FUZZ_PLAN_MINIMIZE) ./pipeline

# The reliability probes many times over (docs/reliability.md): random
# kills, network faults, flipped bytes, racing runs. PROBE_SCALE multiplies
# each probe's trial count.
PROBE_SCALE ?= 10
probe: deps
	RELAYOUT_REQUIRE_PEERS=1 RELAYOUT_PROBE_SCALE=$(PROBE_SCALE) $(GO) test -count=1 -timeout 60m -v \
		-run 'TestKillAtRandomPoints|UnderNetworkFaults|TestPageCRCsAreChecked|TestAnyFlippedByte|TestOutputHeldByAnotherRun|TestLeaseOnS3' \
		./cmd/relayout ./pipeline ./source > $${TMPDIR:-/tmp}/relayout-probe.log 2>&1; rc=$$?; \
	grep -E '^(--- |ok|FAIL|PASS)|probe|flipped|killed|requests|committed' $${TMPDIR:-/tmp}/relayout-probe.log; exit $$rc

test-short:
	$(GO) test -count=1 -short ./...

# The race detector over the short tests: slow (loader alone took 16 min on
# 2 cores, 2026-12-06), so past go test's 10-minute default per package.
race:
	$(GO) test -count=1 -race -short -timeout 120m ./...

# Builds, generates a sample impression log, shows how scattered its slices
# are, re-lays it out, verifies it and shows the result; then estimates a
# packed run with tensor shards (dry run), runs it and compares the two.
demo: build python-deps
	@rm -rf $(DEMO)
	bin/relayout-gen --out $(DEMO)/events --rows 300000 --files 4
	bin/relayout inspect $(DEMO)/events --slice-keys country,date --slices 5
	bin/relayout run --input $(DEMO)/events --output $(DEMO)/relaid --slice-keys country,date --row-group-bytes 8MiB
	bin/relayout verify --deep $(DEMO)/relaid
	bin/relayout inspect $(DEMO)/relaid/parquet --slice-keys country,date --slices 5
	bin/relayout run --dry-run --input $(DEMO)/events --output $(DEMO)/packed --slice-keys country,date --query-key query_id --row-group-bytes 8MiB --tensors --shard-bytes 16MiB --report-json $(DEMO)/estimate.json
	bin/relayout run --input $(DEMO)/events --output $(DEMO)/packed --slice-keys country,date --query-key query_id --row-group-bytes 8MiB --tensors --shard-bytes 16MiB
	/usr/bin/python3 python/compare_reports.py $(DEMO)/estimate.json $(DEMO)/packed/_report.json
	bin/relayout verify $(DEMO)/packed
	PYTHONPATH=python /usr/bin/python3 python/demo.py $(DEMO)/packed
	bin/relayout unpack --input $(DEMO)/packed --output $(DEMO)/unpacked
	@echo "outputs: $(DEMO)/relaid (slices contiguous), $(DEMO)/packed (one row per query, with tensor shards), $(DEMO)/unpacked (packed -> flat again)"

# Profile-guided optimization: go build uses cmd/relayout/default.pgo by
# itself; this regenerates it from the benchmark's jobs (scripts/pgo.sh).
pgo:
	scripts/pgo.sh

# Benchmarks: Go micro-benchmarks once each, then relayout against DuckDB side
# by side (see bench/README.md). BENCH_ROWS sizes the generated input.
bench: build deps
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...
	bench/compare.sh

# GPU feed benchmark (bench/gpu_feed.sh): needs torch, pyarrow and
# nvidia-ml-py on a GPU machine; binaries are static so they can be carried.
bench-gpu:
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o bin/relayout ./cmd/relayout
	CGO_ENABLED=0 $(GO) build -o bin/relayout-gen ./cmd/relayout-gen
	bench/gpu_feed.sh

clean:
	rm -rf bin $(DEMO) .bench .bench-gpu
