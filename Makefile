# minipar course. Every target sets up .venv first (once; again when requirements change).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with lessons/sanitize.cfg --nbval-cell-timeout 600 -p no:cacheprovider
export OMP_NUM_THREADS ?= 1
export LESSON  # read by the recipes as "$$LESSON", quoted: a value is one argument, never shell text

.PHONY: setup lab lint test test-unit test-notebooks test-portability test-loaded train bench gpu-check execute slides check clean

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

test: lint test-unit test-notebooks   ## lint, unit tests, then every notebook under strict nbval

# ruff (pinned in requirements.txt; rules and their reasons in pyproject.toml): formatted and lint-clean,
# as Megatron-LM and torchtitan check in CI. `ruff format .` then `ruff check --fix .` repairs most of it.
lint: $(STAMP)                        ## ruff format --check and ruff check over the code (not the notebooks)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

test-unit: $(STAMP)
	$(PY) -m pytest tests/ -q --durations=15

test-notebooks: $(STAMP)
	@ls lessons/*.ipynb >/dev/null 2>&1 || { echo "no notebooks in lessons/"; exit 0; }; \
	$(PY) -m pytest $(NBVAL) lessons/ -q

# Portability: every notebook again under PyTorch's AVX2 kernels and its plain C++ ones (no SIMD):
# a stored output that depends on the CPU's rounding (AVX-512 vs AVX2, another vendor) fails here,
# not on a learner's machine. x86-64 only (ATEN_CPU_CAPABILITY); either pass failing fails. A pass whose
# kernels are this CPU's own (avx2 on an AVX2-only CPU) would repeat make test-notebooks exactly: skipped.
# The cluster-clock lessons run in each pass beside two busy loops (make test-loaded): one pass checks
# both properties, so CI need not run them a third time. Elsewhere than x86-64: make test-loaded alone.
# oneDNN is capped at the same ISA (ONEDNN_MAX_CPU_ISA: AVX2, or SSE41 beside the plain kernels), as on a CPU
# that has no more: on an AMX CPU (Sapphire Rapids) PyTorch 2.13's bf16 CPU FlashAttention decides to pack its
# blocks by oneDNN's ISA, then fails in the AVX2 kernel ("pack_vnni2 is only supported when avx512 is supported").
test-portability: $(STAMP)            ## every notebook under strict nbval with ATEN_CPU_CAPABILITY=avx2, then =default
	@ls lessons/*.ipynb >/dev/null 2>&1 || { echo "no notebooks in lessons/"; exit 0; }; \
	if [ "$$(uname -m)" != x86_64 ]; then \
	  echo "test-portability: ATEN_CPU_CAPABILITY needs x86-64, skipped; the loaded pass instead"; exec $(MAKE) --no-print-directory test-loaded; fi; \
	native=$$($(PY) -c "import torch; print(torch.backends.cpu.get_cpu_capability().lower())"); \
	rc=0; for cap in avx2 default; do \
	  isa=$$([ $$cap = avx2 ] && echo AVX2 || echo SSE41); \
	  if [ "$$cap" = "$$native" ]; then \
	    echo "== ATEN_CPU_CAPABILITY=$$cap: this CPU's own kernels, which make test-notebooks runs: skipped"; continue; fi; \
	  echo "== notebooks under strict nbval, ATEN_CPU_CAPABILITY=$$cap ONEDNN_MAX_CPU_ISA=$$isa (the cluster-clock ones next, loaded)"; \
	  export ATEN_CPU_CAPABILITY=$$cap ONEDNN_MAX_CPU_ISA=$$isa; \
	  $(PY) -m pytest $(NBVAL) $(filter-out $(CLOCK_LESSONS),$(wildcard lessons/*.ipynb)) -q || rc=$$?; \
	  $(MAKE) --no-print-directory test-loaded || rc=$$?; \
	done; exit $$rc

# Loaded: the lessons whose timing stories run on the cluster clock (minipar.clock), under strict nbval
# with two busy-loop processes beside them: their verdicts read the clock, not the wall, so they must
# hold on a loaded machine (the busy loops end with the recipe's shell, even if it is killed).
CLOCK_LESSONS := lessons/02_data_parallel.ipynb lessons/05_pipeline_microbatches.ipynb lessons/06_1f1b.ipynb \
                 lessons/07_3d_parallel.ipynb lessons/09_communication.ipynb lessons/11_context_parallel.ipynb
test-loaded: $(STAMP)                 ## the cluster-clock lessons under strict nbval beside two busy loops
	@busy="import os; p = os.getppid(); exec('while os.getppid() == p: pass')"; \
	$(PY) -c "$$busy" & h1=$$!; $(PY) -c "$$busy" & h2=$$!; \
	echo "== $(CLOCK_LESSONS) under strict nbval, two busy loops beside them"; \
	rc=0; $(PY) -m pytest $(NBVAL) $(CLOCK_LESSONS) -q || rc=$$?; kill $$h1 $$h2; exit $$rc

train: $(STAMP)                       ## the main job (flags: make train ARGS="--steps 50 --dp 2")
	$(PY) -m minipar.train $(ARGS)

bench: $(STAMP)                       ## minipar vs PyTorch-native, ratios -> runs/bench/results.md
	$(PY) -m minipar.course.bench --out runs/bench

# On a node with >= 1 CUDA GPU: unit tests' 2-rank cases on NCCL, the main job on 1 GPU (fp32, bf16) and on
# every layout of all GPUs (torchrun), 3D vs 1 GPU, GPU benchmarks -> one table, runs/gpu_check/results.md.
# python -m minipar.course.gpu_check exits 0 all passed, 1 a check failed, 3 no CUDA device (nothing ran);
# make then reports "Error 1" / "Error 3" (and exits 2 itself).
gpu-check: $(STAMP)                   ## the GPU check-list (needs a GPU; exit 3 without one)
	$(PY) -m minipar.course.gpu_check --out runs/gpu_check $(ARGS)

execute: $(STAMP)                     ## re-run notebooks in place (NB=lessons/00_single_device.ipynb for one)
	$(PY) -m jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=900 \
	  --ExecutePreprocessor.record_timing=False $(or $(NB),lessons/*.ipynb)

slides: $(STAMP)                      ## reveal.js decks lessons/NN_*.ipynb -> slides/ (LESSON=04 for one)
	$(PY) slides/build.py $${LESSON:+"$$LESSON"}

clean:                                ## remove the venv, run outputs and caches
	rm -rf $(VENV) runs .pytest_cache build *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

check: $(STAMP)                       ## check your exercises on real ranks (LESSON=02 for one; SOLUTIONS=1: the references)
	$(PY) -m exercises.check $${LESSON:+--lesson "$$LESSON"} $(if $(SOLUTIONS),--solutions)
