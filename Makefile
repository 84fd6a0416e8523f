# minipar course. Every target sets up .venv first (once; again when requirements change).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with lessons/sanitize.cfg --nbval-cell-timeout 600 -p no:cacheprovider
export OMP_NUM_THREADS ?= 1

.PHONY: setup lab test test-unit test-notebooks train bench execute slides clean

# The stamp holds a hash of requirements.txt + pyproject.toml: install again only when their
# *contents* change (a newer file time, e.g. in a fresh git worktree, is not a reason).
$(STAMP): FORCE
	@h=$$(cat requirements.txt pyproject.toml | sha256sum | cut -c1-16); \
	if [ "$$(cat $(STAMP) 2>/dev/null)" != "$$h" ]; then \
	  echo "setting up $(VENV) (first time: about 2 minutes)"; \
	  [ -x $(PY) ] || $(PYTHON) -m venv $(VENV) || exit 1; \
	  $(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt || exit 1; \
	  $(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e . || exit 1; \
	  echo $$h > $(STAMP); \
	fi

FORCE:

setup: $(STAMP)                       ## create .venv with everything the course needs

lab: $(STAMP)                         ## open JupyterLab on the lessons
	$(VENV)/bin/jupyter lab lessons/

test: test-unit test-notebooks        ## unit tests, then every notebook under strict nbval

test-unit: $(STAMP)
	$(PY) -m pytest tests/ -q

test-notebooks: $(STAMP)
	@ls lessons/*.ipynb >/dev/null 2>&1 || { echo "no notebooks in lessons/"; exit 0; }; \
	$(PY) -m pytest $(NBVAL) lessons/ -q

train: $(STAMP)                       ## the main job with default settings
	$(PY) -m minipar.train

bench: $(STAMP)                       ## minipar vs PyTorch-native, ratios -> runs/bench/results.md
	$(PY) -m minipar.bench --out runs/bench

execute: $(STAMP)                     ## re-run notebooks in place (NB=lessons/00_single_device.ipynb for one)
	$(PY) -m jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=900 \
	  --ExecutePreprocessor.record_timing=False $(or $(NB),lessons/*.ipynb)

slides: $(STAMP)                      ## reveal.js decks lessons/NN_*.ipynb -> slides/ (LESSON=04 for one)
	$(PY) slides/build.py $(LESSON)

clean:                                ## remove the venv, run outputs and caches
	rm -rf $(VENV) runs .pytest_cache build *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
