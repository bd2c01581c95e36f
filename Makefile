# One place for set-up and the checks users run. The README and .ci/run call these targets.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.vlrollout-installed

.PHONY: setup demo demo-baseline tiny-ground tiny-count train test test-fast lint bench readme-numbers config-doc lock snapshots

# Creates the venv and installs exactly what CI tested (requirements.lock), with the test extra and
# the bench extra (TRL, the peer that tests/bench/test_bench_vs_trl.py and bench/bench_vs_trl.py
# run beside ours: about 7 MiB, no other new package); reruns only when pyproject.toml or the lock
# changes. The venv takes about 10 GiB (areal pins a torch whose Linux
# wheels carry CUDA) and pip needs about 14 GiB while installing (bench/setup_footprint.sh), so
# set-up warns first when there is less room, instead of pip failing half-way with "No space left
# on device"; --no-cache-dir keeps pip from storing a second copy of the wheels.
SETUP_NEEDS_GIB := 14
setup: $(STAMP)
$(STAMP): pyproject.toml requirements.lock
	@free=$$(df -Pk . | awk 'NR==2 {print int($$4 / 1048576)}'); \
	if [ "$$free" -lt $(SETUP_NEEDS_GIB) ]; then \
	  echo "warning: installing into $(VENV) needs about $(SETUP_NEEDS_GIB) GiB free; $$free GiB free on $$(df -P . | awk 'NR==2 {print $$6}')" >&2; \
	fi
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --no-cache-dir --upgrade pip
	$(BIN)/pip install --quiet --no-cache-dir -c requirements.lock -e '.[test,bench]'
	# lmms-eval's own scoring files, loaded by path by the reference tests of vlrollout eval's metrics
	# (tests/eval/test_metrics_boxes.py, test_metrics_answers.py); without its ~40 dependencies, which
	# the scoring files do not import.
	$(BIN)/pip install --quiet --no-cache-dir --no-deps lmms-eval==0.7.3
	touch $(STAMP)

# The main job: rollouts of the tiny model on the sample images -> runs/demo/
demo: setup
	$(BIN)/vlrollout run --config examples/demo.yaml

# The same job with an untrained model of the same architecture (the baseline for the demo's rewards).
demo-baseline: setup
	$(BIN)/vlrollout train-tiny --steps 0 --max-minutes 0 --eval-per-task 4 --out runs/untrained-model
	$(BIN)/vlrollout run --config examples/demo.yaml --model runs/untrained-model --output runs/untrained

# The grounding recipe's starting checkpoint, assets/tiny-qwen3vl-ground: a tiny Qwen3-VL trained
# from scratch on one-shape boxes, then on naming the target's grid cell, then briefly on boxes
# (240 steps: it localises but leaves room for GRPO). vlrollout/tiny/train.py; about 20 minutes on
# one CPU core; the same weights on the same machine, float rounding differs between CPUs.
tiny-ground: setup
	$(BIN)/vlrollout train-tiny --family qwen3_vl --mix ground:1=1 --steps 800 --max-minutes 0 \
		--eval-per-task 50 --out runs/tiny-ground-stage1
	$(BIN)/vlrollout train-tiny --init runs/tiny-ground-stage1 --phase 0.8:cell:1=1 \
		--mix ground=0.7,cell=0.3 --steps 1200 --lr 1e-3 --warmup 20 --min-lr-ratio 0.3 \
		--max-minutes 0 --eval-every 400 --out assets/tiny-qwen3vl-ground
	cp runs/tiny-ground-stage1/TRAINING.json assets/tiny-qwen3vl-ground/TRAINING-stage1.json

# The counting recipe's starting checkpoint, assets/tiny-qwen3vl-count: the grounding checkpoint
# above, then 80 steps of counting (0.78 held-out: it counts and leaves room for GRPO; the shipped
# Qwen2-VL model stays near 0.87 under GRPO and more supervised counting alike,
# bench/bench_counting.py). About a minute on one CPU core; same machine, same weights.
tiny-count: setup
	$(BIN)/vlrollout train-tiny --init assets/tiny-qwen3vl-ground --mix count=1 --steps 80 \
		--lr 3e-4 --warmup 10 --min-lr-ratio 0.3 --max-minutes 0 --out assets/tiny-qwen3vl-count

# GRPO with AReaL's own actor over the embedded engine on the grounding recipe, from
# assets/tiny-qwen3vl-ground (what it learns against the lr = 0 control:
# bench/results/learning_grounding.json) -> runs/train/ (checkpoints, metrics, report with the
# control); resumes from runs/train/checkpoints.
# Overrides: make train ARGS="total_train_steps=10"; the counting recipe: vlrollout train --config
# examples/train_count.yaml.
train: setup
	$(BIN)/vlrollout train --config examples/train_grounding.yaml vlrollout.output=runs/train $(ARGS)

# What CI runs: every test (slow ones included: the training, serving and learning tests behind
# the README's claims; tests that need a GPU skip themselves without one), then the linter. The
# slowest tests are listed at the end, so a CI log shows where a run's time went.
test: setup
	$(BIN)/python -m pytest -q --durations=30
	$(MAKE) --no-print-directory lint

# The quick loop while developing: tests marked slow left out.
test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Each benchmark also writes its numbers to bench/results/<name>.json (command, date, cores, load).
bench: setup
	@for f in bench/bench_*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

# The benchmark tables of README.md and docs/**/*.md, rendered from the latest records in
# bench/results/ between their <!-- bench:NAME --> markers, with the charts of long per-step tables
# in docs/results/charts/ (run after a benchmark; commit the records with the pages).
readme-numbers: setup
	$(BIN)/python scripts/render_readme_numbers.py

# docs/config.md, every vlrollout.* key with its help, rendered from the config dataclasses
# (run after changing a key; tests/test_config_doc.py fails while the page is stale).
config-doc: setup
	$(BIN)/python scripts/render_config_doc.py

# Re-record resolved versions after changing dependencies (review the diff).
lock: setup
	$(BIN)/pip freeze --exclude-editable | grep -v '^vlrollout' > requirements.lock

# Regenerate the processor regression snapshots (review `git diff tests/snapshots` before committing).
SNAPSHOT_FAMILIES = $(shell $(BIN)/python -c "from vlrollout.testing.offline_processors import OFFLINE_BUILDERS; print(*OFFLINE_BUILDERS)")
snapshots: setup
	@for f in $(SNAPSHOT_FAMILIES); do $(BIN)/vlrollout snapshot --processor offline:$$f --data assets/samples/data.jsonl --out tests/snapshots/$$f.json || exit 1; done
