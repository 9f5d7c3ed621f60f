# The two commands a newcomer needs: `make run` and `make test`. Both create .venv with pip
# when it is missing and install the pinned requirements (re-installing only when they change).

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Where `make run` listens: this machine only; HOST=0.0.0.0 serves your network.
HOST ?= 127.0.0.1

.PHONY: run test format setup browser bench clean

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet "setuptools>=77"
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	@# The memory layer's fused CPU scan (C++, about half a minute); a failed build only prints that the
	@# slower pure-PyTorch scan will run, never fails the install.
	-$(PY) -m tensor_memory.memory.build_scan
	@touch $(STAMP)

setup: $(STAMP)

# The explorer opens on checkpoints/occlusion-tensor with a sample already captured
# (python -m app: streamlit run app/main.py, the opening page prepared while the server starts).
# It listens on $(HOST); `make run HOST=0.0.0.0` lets others on your network in (a class: README).
run: $(STAMP)
	$(PY) -m app --server.address $(HOST)

# Lint and format checks first (ruff, configured in pyproject.toml; `make format` applies the formatting), then pytest.
test: $(STAMP) browser
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pytest

format: $(STAMP)
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

# Browser tests drive Debian's Chromium (never `playwright install`). Installed here when
# missing and running as root; otherwise the command is printed and those tests skip.
browser:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "Installing Debian's chromium for the browser tests..."; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
		|| echo "Could not install chromium; browser tests will be skipped."; \
	else echo "Browser tests will be skipped; to run them: sudo apt-get install -y chromium"; fi

# Every benchmark in benchmarks/README.md but trainability.py (a training study of about 30 minutes).
BENCHMARKS := memory_step scan_floor hook_overhead large_grid training_throughput language_step streaming trace app app_browser first_visit budget monitor monitor_browser

bench: $(STAMP)
	@set -e; for name in $(BENCHMARKS); do echo "== benchmarks/$$name.py"; $(PY) benchmarks/$$name.py; done

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
