# One entry point for students, instructors and CI. `make` alone lists the targets.
.DEFAULT_GOAL := help
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
ROLE ?= student
# nbgrader runs `alembic` as a subprocess when it makes a gradebook: the venv must be on PATH.
export PATH := $(BIN):$(PATH)

.PHONY: help setup lab check test release dist grade bench bench-grade bench-similarity bench-launch gpu-check colab-check clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: $(VENV)/.installed ## create .venv: pinned packages, the torchcourse helpers, nbgrader's extensions

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt -e .
	for extension in formgrader validate_assignment assignment_list course_list; do \
	  $(BIN)/jupyter server extension enable --sys-prefix nbgrader.server_extensions.$$extension || exit 1; done
	$(BIN)/jupyter labextension enable @jupyter/nbgrader
	touch $@

# A student's Lab has nbgrader's Validate alone: formgrader, Create Assignment and the exchange's Assignments and
# Courses (which a laptop has none of) are switched off by jupyter/student, the Jupyter configuration path read first.
# Kernels get CurveZMQ keys (ipykernel's kernelspec asks for them) rather than plain TCP. As root (containers, cloud
# machines) Jupyter needs --allow-root.
lab: setup ## open JupyterLab on notebooks/ [PORT=8888] [TOKEN=...] [ARGS=...]; ROLE=instructor: with formgrader
	$(if $(filter student instructor,$(ROLE)),,$(error ROLE is student (the default) or instructor, not "$(ROLE)"))
	$(if $(filter student,$(ROLE)),JUPYTER_CONFIG_PATH=$(CURDIR)/jupyter/student) $(BIN)/jupyter lab \
	  --ServerApp.root_dir=$(CURDIR) --LabApp.default_url=/lab/tree/notebooks --KernelManager.transport_encryption=auto \
	  $(if $(PORT),--ServerApp.port=$(PORT)) $(if $(TOKEN),--IdentityProvider.token=$(TOKEN)) \
	  $(if $(filter 0,$(shell id -u)),--allow-root) $(ARGS)

check: setup ## run a notebook's visible tests, per exercise: make check NB=02 (or NB=path/to/a/copy.ipynb)
	$(BIN)/python -m torchcourse.check $(NB)

test: setup ## run the course's whole test suite (TESTS=... to pick, e.g. TESTS="-k ex4_sliding_window")
	$(BIN)/python -m pytest -n $(JOBS) --dist loadgroup $(TESTS)

release: setup ## regenerate the student notebooks/ from solutions/ with nbgrader
	$(BIN)/python tests/colab_cell.py  # each notebook's first cell, from its template and pyproject's address
	rm -rf notebooks
	$(BIN)/nbgrader generate_assignment "*" --force --no-db --log-level=WARN
	$(BIN)/python -m torchcourse.handin --manifest notebooks  # what hand_in() checks a notebook against

dist: setup ## build the torchcourse wheel (helpers and data) and sdist into dist/, checked by twine, for PyPI
	rm -rf dist build
	$(BIN)/python -m build --outdir dist .
	$(BIN)/python -m twine check --strict dist/*

grade: setup ## grade a class in parallel: make grade ASSIGNMENT=02 [SUBMISSIONS=folder-or.zip] (ARGS="--force ...")
	$(if $(ASSIGNMENT),,$(error usage: make grade ASSIGNMENT=02 [SUBMISSIONS=path/to/submissions]; without SUBMISSIONS, what nbgrader collect put in the course))
	$(BIN)/python -m autograder grade $(ASSIGNMENT) $(SUBMISSIONS) --jobs $(JOBS) $(ARGS)

bench: setup ## print the wall time of executing each solution notebook
	$(BIN)/python tests/benchmark.py

bench-grade: setup ## plain sequential nbgrader against make grade: 13 hand-ins each of 02 and 03, and 60 of 03 (ARGS="--class big|small")
	$(BIN)/python tests/benchmark_grading.py $(ARGS)

bench-similarity: setup ## time report.html's similar answers on 1,000 synthetic hand-ins x 4 exercises, print what it flagged
	$(BIN)/python tests/benchmark_similarity.py

bench-launch: setup ## repeat 06's and 07's distributed cells in one kernel, print failures and times (ARGS=--rounds N)
	$(BIN)/python tests/benchmark_launch.py $(ARGS)

gpu-check: setup ## on a CUDA machine: run every solution notebook and the tests' CUDA branches, write a report (OUT=file.md)
	$(BIN)/python tests/gpu_check.py $(if $(OUT),--out $(OUT))

colab-check: setup ## every notebook on Colab's versions (Python 3.13, torch 2.11, ipywidgets 7) in .colab/, a report (OUT=file.md, ONLY="01_tensors ...", BROWSER=1: 01 and 08 in Chromium too)
	$(BIN)/python tests/colab_check.py $(if $(OUT),--out $(OUT)) $(if $(ONLY),--only $(ONLY)) $(if $(BROWSER),--browser) $(if $(PYTHON_COLAB),--python $(PYTHON_COLAB))

clean: ## remove grading scratch and caches (keeps .venv)
	rm -rf autograder/submitted autograder/autograded autograder/feedback autograder/grades autograder/gradebook.db .pytest_cache
	find . -name __pycache__ -not -path "./$(VENV)/*" -prune -exec rm -rf {} +
