#!/usr/bin/env bash
# Installs what evalstudy needs into .venv: system packages (R for the mixed models) and the
# pinned Python set. Idempotent: a stamp per requirements file skips work already done.
# Usage: scripts/install.sh [requirements.txt|requirements-dev.txt]
set -euo pipefail
cd "$(dirname "$0")/.."
REQS=${1:-requirements.txt}
PYTHON=${PYTHON:-python3}
R_APT_PACKAGES="r-base-core r-base-dev r-cran-lme4 r-cran-lmertest r-cran-emmeans r-cran-ordinal"
# WeasyPrint (PDF reports) needs Pango; R pulls it in, but say so explicitly.
PDF_APT_PACKAGES="libpango-1.0-0 libpangoft2-1.0-0 fonts-dejavu-core"
say() { printf '\033[1m[install]\033[0m %s\n' "$*"; }

# --- R (rpy2 builds against it; ordinal::clmm and lme4::glmer fit the models) ---------------
with_r=1
if ! command -v R >/dev/null 2>&1 || ! Rscript -e 'library(ordinal); library(lme4)' >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    say "installing R and its model packages with apt-get (about 90 s, once)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq $R_APT_PACKAGES $PDF_APT_PACKAGES >/dev/null
  else
    say "R with the 'ordinal' and 'lme4' packages is not installed, and this script cannot"
    say "install it (needs root and apt-get). Install it yourself, e.g. on Debian/Ubuntu:"
    say "  sudo apt-get install $R_APT_PACKAGES"
    say "Continuing without the R bridge (rpy2, pymer4): analyses use the statsmodels engines."
    with_r=0
  fi
fi

# --- Chromium for the browser tests (Playwright drives Debian's build; it never downloads one) ---
if [ "$REQS" = requirements-dev.txt ] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Chromium with apt-get for the browser tests"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq chromium >/dev/null
  else
    say "Chromium is not installed (Debian/Ubuntu: sudo apt-get install chromium);"
    say "the browser tests will fail until it is, or set EVALSTUDY_CHROMIUM to its path."
  fi
fi

# --- Python -------------------------------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
stamp=".venv/.installed.$(basename "$REQS" .txt).$(cat requirements*.txt | sha1sum | cut -c1-12).r$with_r"
if [ -f "$stamp" ]; then
  exit 0
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# torch first and pinned: any other spec, or a package pulling an unpinned torch, downloads GBs
# of CUDA wheels; 2.13.0 is the CPU build.
.venv/bin/python -m pip install -q "$(grep -E '^torch==' requirements.txt)"
if [ "$with_r" = 1 ]; then
  .venv/bin/python -m pip install -q -r "$REQS"
else
  filtered=$(mktemp)
  # Keep -r includes working by filtering every file into one list without the R bridge.
  cat requirements.txt $( [ "$REQS" != requirements.txt ] && echo "$REQS" ) \
    | grep -vE '^(rpy2|pymer4)==|^-r ' > "$filtered"
  .venv/bin/python -m pip install -q -r "$filtered"
  rm -f "$filtered"
fi
rm -f .venv/.installed."$(basename "$REQS" .txt)".*
touch "$stamp"
say "Python dependencies installed from $REQS"
