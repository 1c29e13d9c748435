# Kairos worker/API image. docker-compose.yml picks the command (`kairos worker`,
# `kairos api ...`); run alone it prints the CLI help.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Unprivileged runtime user; its home holds the worker's local data (KAIROS_WORKDIR).
RUN groupadd --system --gid 10001 kairos \
    && useradd --system --uid 10001 --gid kairos --home-dir /var/lib/kairos --create-home \
        --shell /usr/sbin/nologin kairos

# .dockerignore limits the context to pyproject.toml, README.md and the four packages.
WORKDIR /src
COPY . .
RUN pip install . \
    && cd / && rm -rf /src

WORKDIR /var/lib/kairos
USER kairos:kairos

EXPOSE 8000
CMD ["kairos", "--help"]
