#!/usr/bin/env bash
# Usage: setup.sh VENV_DIR
# Creates the virtualenv if missing, installs the pinned requirements and keeps a
# migrated template database in VENV_DIR (start.sh copies it for a new IDP_DB).
# Idempotent: a second run only confirms the pins.
set -euo pipefail
venv="${1:?usage: setup.sh VENV_DIR}"
cd "$(dirname "$0")"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt
template="$venv/idp-template.sqlite3"
if [ ! -e "$template" ] || [ requirements.txt -nt "$template" ]; then
  rm -f "$template.tmp"
  IDP_DB="$template.tmp" DJANGO_SETTINGS_MODULE=idp.settings "$venv/bin/python" manage.py migrate -v0
  mv "$template.tmp" "$template"
fi
