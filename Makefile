# Self-Attention, Verified — the whole set-up is `make html` and `make test`.
#
#   make html    create .venv if needed, install pinned deps + the package, execute and build the book
#   make test    the same set-up, then the test suite (package, built pages, browser): ~2 min
#   make test-slow  what `make test` leaves out: browser sweeps over every page, page budget,
#                the PDF, published notebooks in a fresh venv, fault-injection builds (CI runs both)
#   make serve   live-reloading preview on http://127.0.0.1:8000
#   make clean   remove the build (keeps .venv)
#   make diagrams  redraw the SVG diagrams in images/ (commit the result)
#   make clean-cache  remove the chapters' execution cache: the next build executes them all
#   make lint    ruff over code, tests and tooling
#   make pdf     the whole book as one PDF (LaTeX builder + XeLaTeX): _build/pdf
#   make site    what the hosted site serves: the pages, linking and holding the PDF, the
#                sitemap; both hosted builds (GitHub Pages, Read the Docs) run exactly this

SHELL := /bin/bash
# pipefail: a failing pip install fails the recipe even though its output is filtered
.SHELLFLAGS := -o pipefail -c
PYTHON  ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
BUILD   ?= _build
# -j auto: chapters execute while Sphinx reads them, one worker (and one kernel with one
# BLAS thread, see _ext/chapter_execution.py) per core.
SPHINXOPTS ?= -n -W --keep-going -j auto
# The stamp changes whenever the pins or the package metadata change, so `make`
# re-installs exactly then.
STAMP   := $(VENV)/.stamp-$(shell cat requirements-lock.txt pyproject.toml | cksum | cut -d' ' -f1)

# KaTeX (math typeset at build time, CSS and fonts served from the site) comes
# from npm, pinned in package-lock.json; its stamp follows the lock the same way.
NODE_STAMP := node_modules/.stamp-$(shell cat package-lock.json | cksum | cut -d' ' -f1)

# PyTorch's version is written once, in requirements.txt; the lock file, the hosted builds,
# Binder's environment and the tests read it from there or are checked against it.
TORCH_PIN := $(shell sed -n 's/^\(torch==[^ ;\#]*\).*/\1/p' requirements.txt)
# The CPU build of that version (no CUDA wheels, several GB, on machines without a GPU).
TORCH_INDEX := https://download.pytorch.org/whl/cpu

export PYTHONHASHSEED := 0
export OMP_NUM_THREADS ?= 2

.PHONY: html site test test-slow test-fast serve clean clean-cache lint venv node-deps browser-deps lock diagrams pdf latex-deps

venv: $(STAMP)

$(STAMP): requirements-lock.txt requirements.txt pyproject.toml
	@test -n "$(TORCH_PIN)" || { echo "requirements.txt has no torch==VERSION line" >&2; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# CPU torch first (its dependencies come with the lock file below): the lock's
	@# torch==VERSION is then already met by VERSION+cpu, and pip leaves it.
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps "$(TORCH_PIN)" --index-url $(TORCH_INDEX) 2>&1 | { grep -v "is ignored: it is neither" || true; }
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-lock.txt 2>&1 | { grep -v "is ignored: it is neither" || true; }
	$(PY) -m pip check
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e . 2>&1 | { grep -v "is ignored: it is neither" || true; }
	$(PY) -c "import torch, myst_nb; print('venv ready: torch', torch.__version__)"
	@rm -f $(VENV)/.stamp-*
	@touch $@

node-deps: $(NODE_STAMP)

$(NODE_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || { echo "npm not found: install Node.js (Debian: apt-get install nodejs npm)" >&2; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# Every file the book is built from (not the tests, CI files or caches), and git's index
# (the pages show each file's last commit). Sphinx runs only when one of them is newer
# than the last successful build: a no-op `make html` starts no Python at all.
BOOK_INPUTS := $(shell find . \( -name .git -o -name .venv -o -name node_modules \
	-o -name _build -o -name tests -o -name .ci -o -name .github -o -name __pycache__ \
	-o -name '.*_cache' -o -name .hypothesis -o -name '* *' \) -prune -o -type f -print)
GIT_INDEX := $(wildcard $(shell git rev-parse --git-path index 2>/dev/null | grep -v ' '))

html: $(BUILD)/.html-built
	@if [ -e $(BUILD)/.html-fresh ]; then rm -f $(BUILD)/.html-fresh; \
	  echo "Built: $(BUILD)/html/index.html"; \
	else echo "Up to date: $(BUILD)/html/index.html (no input changed since the last build;" \
	  "chapter execution times in $(BUILD)/exec-times.json)"; fi

# The pages alone do not link the PDF (nor offer it in the download menus): only
# `make site` puts it into the site, so only its build (-t book_pdf) links it.
$(BUILD)/.html-built: $(STAMP) $(NODE_STAMP) $(BOOK_INPUTS) $(GIT_INDEX)
	@rm -f $(BUILD)/.site-built
	$(VENV)/bin/sphinx-build $(SPHINXOPTS) -b html . $(BUILD)/html
	@touch $@ $(BUILD)/.html-fresh

# The hosted site: the PDF first (so a failed PDF leaves the pages as they were), then the
# package's wheel named by the commit (_ext/site_wheel.py: the published notebooks install
# exactly it, from the site), then the pages with -t book_pdf (the front page and every
# download menu link the PDF) and the wheel in them, then the PDF into the site. The pages' stamp is touched too: `make html` (and so `make test`)
# after `make site` keeps these pages, which link a PDF that is there. The sitemap,
# OpenGraph tags and canonical links take the site's address from conf.py (or the
# hosted build's environment, see _ext/hosting.py).
site: $(BUILD)/.site-built
	@echo "Site: $(BUILD)/html (with $(PDF_NAME))"

$(BUILD)/.site-built: $(STAMP) $(NODE_STAMP) $(BOOK_INPUTS) $(GIT_INDEX)
	@rm -f $(BUILD)/.html-built $@
	$(MAKE) --no-print-directory pdf
	$(PY) _ext/site_wheel.py $(BUILD)/wheel
	BOOK_WHEEL="$$(ls $(BUILD)/wheel/selfattn-*.whl)" \
	  $(VENV)/bin/sphinx-build $(SPHINXOPTS) -t book_pdf -b html . $(BUILD)/html
	cp $(BUILD)/pdf/$(PDF_NAME) $(BUILD)/html/$(PDF_NAME)
	@touch $(BUILD)/.html-built $@

# Chromium for the browser tests comes from Debian. Under CI it is installed
# when missing, never skipped.
browser-deps:
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian's chromium for the browser tests"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || exit 1; \
	  elif [ "$$CI" = true ]; then echo "chromium missing and not root" >&2; exit 1; \
	  else echo "chromium not found: browser tests will be skipped (install Debian's chromium)"; fi; \
	fi

# The PDF lives under _build/pdf; `make site` copies it into the site, which links it
# from its front page. It reuses the site's executed notebooks (jupyter-cache).
PDF_NAME := self-attention-verified.pdf
# XeLaTeX, latexmk, xindy, the fonts and pdftotext (for the tests) come from Debian,
# installed like Chromium. The fonts are looked up without a pipe into grep -q: under
# pipefail, grep's early exit made fc-list die of SIGPIPE and a present font "missing"
# (then a non-root build stopped, and a root one ran apt-get for nothing).
LATEX_DEBS := texlive-xetex latexmk texlive-fonts-recommended fonts-freefont-otf fonts-dejavu-core xindy poppler-utils

latex-deps:
	@missing=""; for tool in xelatex latexmk xindy pdftotext; do command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	[ -n "$$(fc-list FreeSerif family 2>/dev/null)" ] || missing="$$missing FreeSerif"; \
	[ -n "$$(fc-list 'DejaVu Sans Mono' family 2>/dev/null)" ] || missing="$$missing DejaVuSansMono"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian's $(LATEX_DEBS) for the PDF (missing:$$missing)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(LATEX_DEBS) >/dev/null) || exit 1; \
	  else echo "missing:$$missing; install Debian's $(LATEX_DEBS)" >&2; exit 1; fi; \
	fi

pdf: $(STAMP) $(NODE_STAMP) latex-deps
	$(VENV)/bin/sphinx-build $(SPHINXOPTS) -t pdf -b latex . $(BUILD)/latex
	$(MAKE) -C $(BUILD)/latex all-pdf LATEXMKOPTS="-silent -interaction=nonstopmode -halt-on-error" >$(BUILD)/latex/make-pdf.log 2>&1 \
	  || { tail -40 $(BUILD)/latex/make-pdf.log >&2; exit 1; }
	mkdir -p $(BUILD)/pdf
	cp $(BUILD)/latex/$(PDF_NAME) $(BUILD)/pdf/$(PDF_NAME)
	@echo "Built: $(BUILD)/pdf/$(PDF_NAME) ($$(pdfinfo $(BUILD)/pdf/$(PDF_NAME) 2>/dev/null | sed -n 's/^Pages: *//p') pages)"

# pytest loads only the plugins the tests use (xdist, hypothesis). Left to load every
# installed one, it also rewrites the asserts of each plugin's whole package as it is
# imported (hypothesis: 1.6 s in each worker) and imports anyio's, pytest-benchmark's
# and platformdirs' plugins: collection took 8.7-10.3 s a worker, 7.7 s without them.
PYTEST = PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 $(VENV)/bin/pytest -p xdist.plugin -p _hypothesis_pytestplugin

# -n auto: the tests run in one pytest-xdist worker per core (the browser tests read the
# site built above; loadgroup keeps the tests of one page on one worker, see conftest.py).
test: html browser-deps
	$(VENV)/bin/ruff check code tests _ext conf.py benchmarks images .ci/hosted-dry-run
	$(PYTEST) -n auto --dist loadgroup -m "not timing and not slow"

# The tests marked slow (pyproject.toml): the browser sweeps over every page (axe in light
# and dark, dark mode, 390 px width, figures, math boxes), the PDF's text and figures, each
# published notebook run top to bottom in a fresh venv, each chapter's copied listing in a
# fresh interpreter, and the builds of small books that break things on purpose. The timing
# tests (page budget) run alone afterwards: under xdist they would time the other worker too.
# They read the hosted site (`make site`: the pages, the PDF in them, the sitemap).
test-slow: site browser-deps
	$(PYTEST) -n auto --dist loadgroup -m "slow and not timing"
	$(PYTEST) -m timing

# Package tests only: no book build, no browser, nothing that reads the built site or the
# PDF (markers html, pdf), so it passes on a fresh clone before `make html`; CI (.ci/run)
# runs it first, on a fresh clone, so that stays true. One worker per core, as `make test`.
test-fast: $(STAMP)
	$(PYTEST) -n auto -m "not build and not browser and not html and not pdf"

serve: $(STAMP) $(NODE_STAMP)
	$(VENV)/bin/sphinx-autobuild $(SPHINXOPTS) --watch code/selfattn --port 8000 . $(BUILD)/html

# The diagrams are committed; tests/test_diagrams.py fails when they drift from the script.
diagrams: $(STAMP)
	$(PY) images/make_diagrams.py

lint: $(STAMP)
	$(VENV)/bin/ruff check code tests _ext conf.py benchmarks images .ci/hosted-dry-run

lock: $(STAMP)
	$(PY) -m pip freeze --exclude-editable | grep -v "^torch==" > requirements-lock.txt
	echo "$(TORCH_PIN)" >> requirements-lock.txt

clean:
	rm -rf $(BUILD) .pytest_cache

# The execution cache and Sphinx's environment: the next `make html` executes every chapter.
clean-cache:
	rm -rf $(BUILD)/.jupyter_cache $(BUILD)/html/.doctrees $(BUILD)/.html-built
