# The two commands a newcomer needs: `make run` and `make test`. Both install what they need first.
PYTHON ?= python3
PORT ?= 8501

.PHONY: setup setup-browser run test train bench

setup:
	$(PYTHON) -m pip install -q -r requirements.txt
	$(PYTHON) -m pip install -q --no-deps -r requirements-nodeps.txt

# Debian's chromium for the real-browser tests (playwright cannot download its own browser here).
setup-browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && apt-get install -y -q chromium; \
	  else sudo apt-get update -q && sudo apt-get install -y -q chromium; fi; }

run: setup
	$(PYTHON) -m streamlit run app.py --server.port $(PORT) --server.headless true --browser.gatherUsageStats false

test: setup setup-browser
	$(PYTHON) -m pytest -q tests

train: setup
	$(PYTHON) -m mha_viz.train

bench: setup setup-browser
	$(PYTHON) benchmarks/bench_compute.py
