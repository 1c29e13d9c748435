#!/usr/bin/env bash
# Installs what Kairos needs into ./.venv (idempotent): the project with its extras, and
# Apache Kafka's jars when Java 17+ and Maven are present. Sourced by dev.sh and test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV="${KAIROS_VENV:-.venv}"
PYTHON="${PYTHON:-python3}"

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "kairos: Python 3.11 or newer is needed (found: $("$PYTHON" --version 2>&1))" >&2
    exit 2
fi

step() { echo "kairos setup [$(( SECONDS ))s]: $*" >&2; }

if [ ! -x "$VENV/bin/python" ]; then
    step "creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi

stamp="$VENV/.kairos-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    step "upgrading pip"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    step "installing Kairos and its dependencies into $VENV (about a minute the first time)"
    # One line per package as pip resolves and installs, instead of a silent minute.
    # (pipefail: a failing pip still fails this script, its errors on stderr as usual)
    "$VENV/bin/python" -m pip install --progress-bar off -e '.[dev,local]' \
        | { grep --line-buffered -E '^(Collecting|Installing collected|Successfully)' || true; } \
        | cut -c1-100 >&2
    touch "$stamp"
    step "installed"
fi

# Apache Kafka runs from Maven Central jars; without Java/Maven, Kairos falls back to tansu.
if [ "${CI:-}" = "true" ] && { ! command -v java >/dev/null || ! command -v mvn >/dev/null; }; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless maven >/dev/null
    fi
fi
# The console's browser test drives Debian's Chromium through its chromedriver (no browser
# download); outside CI it is skipped when they are missing.
if [ "${CI:-}" = "true" ] && { ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; }; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        echo "kairos: installing chromium and chromium-driver for the console test" >&2
        apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null
    fi
fi
# kcat publishes with librdkafka's default partitioner in tests/integration/test_any_producer.py.
if [ "${CI:-}" = "true" ] && ! command -v kcat >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        echo "kairos: installing kcat for the any-producer test" >&2
        apt-get update -qq && apt-get install -y -qq kcat >/dev/null
    fi
fi
# The secured-transport test makes its certificates with openssl and runs Debian's PostgreSQL
# (the embedded one is built without TLS).
if [ "${CI:-}" = "true" ] && { ! command -v openssl >/dev/null || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; }; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        echo "kairos: installing openssl and postgresql for the secured-transport test" >&2
        apt-get update -qq && apt-get install -y -qq openssl postgresql >/dev/null
    fi
fi
if command -v java >/dev/null && command -v mvn >/dev/null; then
    step "checking Apache Kafka's jars (Maven fetches them on the first run only)"
    "$VENV/bin/python" -c 'from kairos.localstack.apache import fetch_kafka_jars; fetch_kafka_jars()'
fi
