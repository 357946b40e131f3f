# The two commands a newcomer needs: `make run` and `make test`. Both install what they need first, into a virtual
# environment (.venv), so they work where the system Python refuses `pip install` (PEP 668).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8501
STAMP := $(VENV)/.installed

.PHONY: english setup setup-test setup-compile compile setup-browser setup-nginx lint run serve test test-fast train train-seeds probe study bench train-twins

$(PY):
	$(PYTHON) -m venv $(VENV)

# Reinstalls only when a requirements file changed since the last install.
$(STAMP): requirements.txt requirements-nodeps.txt | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -r requirements-nodeps.txt
	touch $(STAMP)

setup: $(STAMP)

# Tracr and jax (requirements-compile.txt): only to compile RASP programs (`make compile`, `mha-viz compile`) and for
# the tests' parity with Tracr; a compiled folder runs with torch alone, so `make run` never installs them.
COMPILE_STAMP := $(VENV)/.installed-compile
$(COMPILE_STAMP): requirements-compile.txt $(STAMP)
	$(PY) -m pip install -q -r requirements-compile.txt
	touch $(COMPILE_STAMP)

setup-compile: $(COMPILE_STAMP)

# The tests' own references and the linter (requirements-test.txt), on top of the app's requirements.
TEST_STAMP := $(VENV)/.installed-test
$(TEST_STAMP): requirements-test.txt $(STAMP)
	$(PY) -m pip install -q -r requirements-test.txt
	touch $(TEST_STAMP)

setup-test: $(TEST_STAMP) $(COMPILE_STAMP)


# The ordinary English tiny trains on (assets/tiny/english.txt.gz, shipped): WordNet 3.0's example sentences, read
# from Debian's wordnet-base. Only to rebuild that file; `make train` reads the shipped one.
english: setup
	@[ -f /usr/share/wordnet/data.noun ] || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && apt-get install -y -q wordnet-base; \
	  else sudo apt-get update -q && sudo apt-get install -y -q wordnet-base; fi; }
	$(PY) -m mha_viz.models.tiny.english

# Every shipped program (assets/compiled/NAME/program.py) compiled again into its own folder, bit for bit.
compile: setup-compile
	@for f in assets/compiled/*/program.py; do \
	  $(PY) -m mha_viz.cli compile $$f --out $$(dirname $$f) || exit 1; done

# Debian's chromium for the real-browser tests (playwright cannot download its own browser here).
setup-browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && apt-get install -y -q chromium; \
	  else sudo apt-get update -q && sudo apt-get install -y -q chromium; fi; }

# Debian's nginx for `make serve` and its browser test (tests/e2e/test_proxy.py). It runs only as a child of
# deploy/serve.py, with its own config in a temp dir; the system service the package installs is not used.
setup-nginx:
	@command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && apt-get install -y -q nginx; \
	  else sudo apt-get update -q && sudo apt-get install -y -q nginx; fi; }

run: setup
	$(PY) app.py --server.port $(PORT) --server.headless true --browser.gatherUsageStats false

# Many people at once: N app processes under supervisord (restarted when they exit or stop answering their health
# check) behind nginx with sticky sessions, public-server settings; bad settings stop it before anything starts
# (README). supervisord and superlance come from requirements.txt (setup), nginx from Debian (setup-nginx).
N ?= 2
HOST ?= 127.0.0.1
serve: setup setup-nginx
	$(PY) deploy/serve.py --procs $(N) --port $(PORT) --host $(HOST)

lint: setup-test
	$(VENV)/bin/ruff check .

test: setup-test lint setup-browser setup-nginx
	$(PY) -m pytest -q tests --durations=15

# The quick loop while coding: the unit tests and the model tests that load no large model (markers from
# tests/conftest.py: every test carries its folder's marker, `large` what loads SmolLM2 or tests/models/hf).
# Under `-m "not large"` a test that loads SmolLM2 unmarked fails, so the tier stays fast.
test-fast: setup-test
	$(PY) -m pytest -q -m "not large" tests/unit tests/models --durations=10

# Retrains the tiny model bit for bit (weights, checkpoints, loss log in assets/tiny/) and its other seeds, then
# measures every saved step of each (probes.json in each folder, which the notes and the Training view read).
train: setup
	$(PY) -m mha_viz.models.tiny.train
	$(MAKE) train-seeds

# The same recipe from seeds 1, 2 and 3 (assets/tiny/seeds/seedN: float16 weights and step 2,500; steps 0 and 6,000
# are derived), then the probes of every seed, the shipped one included. Each run of 6,000 steps is about 21 minutes
# of one core alone (benchmarks/RESULTS.md, issue 51), much longer on a loaded machine.
train-seeds: setup
	$(PY) -m mha_viz.models.tiny.train --seed 1 --quiet
	$(PY) -m mha_viz.models.tiny.train --seed 2 --quiet
	$(PY) -m mha_viz.models.tiny.train --seed 3 --quiet
	$(PY) -m mha_viz.tiny_probes

# Learned twins of the written models (assets/twins/<program>/seed<N>, loaded as learned-induction,
# learned-three-heads and their #seed1, #seed2): the in-repo stack trained from scratch on what each compiled program
# outputs, three seeds each, bit for bit; 5-11 s of one core per seed. A seed below 95% held-out accuracy is
# not shipped (tried.json lists every seed's figure).
train-twins: setup
	$(PY) -m mha_viz.models.twins.train

# Every saved step of assets/tiny/ and of each seed under it: assets/tiny/probes.json, seeds/seedN/probes.json.
probe: setup
	$(PY) -m mha_viz.tiny_probes

# tiny and its seeds measured at every saved step as a study (assets/tiny/study.duckdb, which the Training view
# opens first): made again from scratch whenever the census or the weights change. Needs ray and duckdb (the
# `scale` extra, installed with the test requirements).
study: setup-test
	rm -f assets/tiny/study.duckdb
	$(PY) -m mha_viz.cli study assets/tiny assets/tiny/seeds/seed1 assets/tiny/seeds/seed2 assets/tiny/seeds/seed3 \
	  --out assets/tiny/study.duckdb

bench: setup setup-browser
	$(PY) benchmarks/bench_compute.py
