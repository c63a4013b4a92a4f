# One image for every role: web (gunicorn), Celery workers (cpu, gpu, llm) and beat.
# Build: docker build -t evalstudy .    (see docker-compose.yml and the README's Deployment)
FROM python:3.11-slim-bookworm

# R with lme4/ordinal/jsonlite for the mixed models (run as a separate Rscript process, not
# loaded into Python), Pango and fonts for the PDF reports, libpq for PostgreSQL, a compiler for
# the few source builds, FFmpeg's ffprobe/ffmpeg to check media stimuli on import (separate
# programs too).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      r-base-core r-cran-jsonlite r-cran-lme4 r-cran-lmertest r-cran-emmeans r-cran-ordinal \
      r-cran-blme r-cran-brglm2 \
      libpango-1.0-0 libpangoft2-1.0-0 fonts-dejavu-core libpq5 build-essential ffmpeg espeak-ng \
 && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    DJANGO_SETTINGS_MODULE=config.settings.production \
    EVALSTUDY_VAR_DIR=/app/var

WORKDIR /app
# torch first and pinned, so nothing else pulls another version. Which build pip finds depends
# on the index: choose it explicitly with TORCH_REQUIREMENT, e.g. a CPU-only image for web and
# cpu/llm workers ("torch==2.13.0 --index-url <PyTorch's CPU wheel index>") and a CUDA build
# for GPU workers ("torch==2.13.0+cu124 --extra-index-url <PyTorch's CUDA index>").
ARG TORCH_REQUIREMENT=torch==2.13.0
COPY requirements.txt ./
# Unquoted on purpose: TORCH_REQUIREMENT may carry pip options.
RUN pip install $TORCH_REQUIREMENT \
 && grep -v '^torch==' requirements.txt > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

COPY . .
# Static files are collected into the image: every web container serves the same files
# (whitenoise, compressed, hashed names). The variables below exist only for this step.
RUN SECRET_KEY=collectstatic-only-not-a-real-key-0123456789abcdefghijklmnopqrstuvwxyz \
    ALLOWED_HOSTS=build DATABASE_URL=postgres://build@build/build \
    CELERY_BROKER_URL=redis://build:6379/0 \
    python manage.py collectstatic --noinput -v 0

RUN useradd --create-home --uid 1000 evalstudy \
 && mkdir -p /app/var/proxies && chown -R evalstudy /app/var
USER evalstudy

EXPOSE 8000
CMD ["gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi"]
