#!/usr/bin/env bash
# Installs what evalstudy needs into .venv: system packages (R for the mixed models) and the
# pinned Python set. Idempotent: a stamp per requirements file skips work already done.
# Usage: scripts/install.sh [requirements.txt|requirements-dev.txt]
set -euo pipefail
cd "$(dirname "$0")/.."
REQS=${1:-requirements.txt}
PYTHON=${PYTHON:-python3}
# R runs as a separate program (Rscript analysis/stats/r/server.R); nothing Python builds
# against it. jsonlite carries the requests and replies.
# blme (penalised glmer) and brglm2 (Firth logistic regression) fit data with separation.
R_APT_PACKAGES="r-base-core r-cran-jsonlite r-cran-lme4 r-cran-lmertest r-cran-emmeans r-cran-ordinal
  r-cran-blme r-cran-brglm2"
# WeasyPrint (PDF reports) needs Pango; R pulls it in, but say so explicitly.
PDF_APT_PACKAGES="libpango-1.0-0 libpangoft2-1.0-0 fonts-dejavu-core"
say() { printf '\033[1m[install]\033[0m %s\n' "$*"; }

# --- R (ordinal::clmm and lme4::glmer fit the models, in an Rscript worker process) ---------
# Loading the packages to see that they are there takes R seconds (tens on a busy machine), on
# every `make run`: once they have loaded, a stamp says so and later runs only look for Rscript.
R_STAMP=".venv/.installed.r-packages"
r_ready() {
  command -v Rscript >/dev/null 2>&1 || return 1
  [ -f "$R_STAMP" ] && return 0
  Rscript -e 'library(ordinal); library(lme4); library(jsonlite); library(blme); library(brglm2)' >/dev/null 2>&1 || return 1
  if [ -d .venv ]; then touch "$R_STAMP"; fi
}
if ! r_ready; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    say "installing R and its model packages with apt-get (about 90 s, once)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq $R_APT_PACKAGES $PDF_APT_PACKAGES >/dev/null
  else
    say "R with the 'ordinal', 'lme4', 'jsonlite', 'blme' and 'brglm2' packages is not installed,"
    say "and this script cannot install it (needs root and apt-get). Install it yourself, e.g.:"
    say "  sudo apt-get install $R_APT_PACKAGES"
    say "Continuing without R: analyses use the statsmodels engines until R is installed (no"
    say "reinstall needed: R is found at run time)."
  fi
fi

# --- FFmpeg (ffprobe and ffmpeg check every media stimulus on import, as separate programs:
# nothing links it; evalstudy/media_probe.py) and espeak-ng (the demo's speech recordings; the
# demo falls back to tones without it) --------------------------------------------------------
MEDIA_APT_PACKAGES="ffmpeg espeak-ng"
if ! command -v ffprobe >/dev/null 2>&1 || ! command -v espeak-ng >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    say "installing ffmpeg and espeak-ng with apt-get (media stimuli and the audio demo)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq $MEDIA_APT_PACKAGES >/dev/null
  else
    say "ffprobe (Debian/Ubuntu: sudo apt-get install ffmpeg) or espeak-ng is not installed:"
    say "media files are refused on import until ffprobe is, and the audio demo uses tones"
    say "instead of speech without espeak-ng."
  fi
fi

# --- Chromium for the browser tests (Playwright drives Debian's build; it never downloads one)
# and poppler's pdftoppm, which turns the rendered test reports into PNG pages to look at ---
if [ "$REQS" = requirements-dev.txt ] \
   && { ! command -v chromium >/dev/null 2>&1 || ! command -v pdftoppm >/dev/null 2>&1; }; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Chromium and poppler-utils with apt-get for the browser and report tests"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq chromium poppler-utils >/dev/null
  else
    say "Chromium or pdftoppm is not installed (Debian/Ubuntu: sudo apt-get install chromium"
    say "poppler-utils); the browser tests fail until Chromium is (or set EVALSTUDY_CHROMIUM),"
    say "and the report tests skip their PNG pages without pdftoppm."
  fi
fi

# --- Python -------------------------------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
stamp=".venv/.installed.$(basename "$REQS" .txt).$(cat requirements*.txt | sha1sum | cut -c1-12)"
if [ -f "$stamp" ]; then
  exit 0
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# torch first and pinned: any other spec, or a package pulling an unpinned torch, downloads GBs
# of CUDA wheels; 2.13.0 is the CPU build.
.venv/bin/python -m pip install -q "$(grep -E '^torch==' requirements.txt)"
.venv/bin/python -m pip install -q -r "$REQS"
rm -f .venv/.installed."$(basename "$REQS" .txt)".*
touch "$stamp"
say "Python dependencies installed from $REQS"
