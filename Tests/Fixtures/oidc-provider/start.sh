#!/usr/bin/env bash
# Usage: PORT=... IDP_KEY=key.pem [IDP_OLD_KEYS=a.pem:b.pem] [IDP_DB=file] start.sh VENV_DIR
# Migrates and seeds the sqlite database, then execs the server on 127.0.0.1:$PORT
# (the server becomes this process: kill its pid to stop it). Restarting with the
# same IDP_DB keeps issued tokens, so a key rotation is: stop, then start with
# IDP_KEY=new.pem IDP_OLD_KEYS=old.pem.
set -euo pipefail
venv="$(realpath "${1:?usage: start.sh VENV_DIR (after setup.sh VENV_DIR)}")"
: "${PORT:?set PORT}" "${IDP_KEY:?set IDP_KEY to an RSA private key PEM}"
export PORT
for k in $IDP_KEY $(tr ':' ' ' <<<"${IDP_OLD_KEYS:-}"); do
  [ -r "$k" ] || { echo "start.sh: cannot read key $k" >&2; exit 1; }
done
export IDP_KEY="$(realpath "$IDP_KEY")"
old=""  # absolute paths, since we cd below
for k in $(tr ':' ' ' <<<"${IDP_OLD_KEYS:-}"); do old="$old${old:+:}$(realpath "$k")"; done
export IDP_OLD_KEYS="$old"
export IDP_DB="$(realpath -m "${IDP_DB:-idp.sqlite3}")"  # default: caller's working dir
export DJANGO_SETTINGS_MODULE=idp.settings
cd "$(dirname "$0")"
# setup.sh leaves an already migrated database in the venv; copying it saves ~2 s.
template="$venv/idp-template.sqlite3"
if [ ! -e "$IDP_DB" ] && [ -e "$template" ]; then cp "$template" "$IDP_DB"; fi
"$venv/bin/python" -m idp.seed
exec "$venv/bin/python" manage.py runserver --noreload --skip-checks "127.0.0.1:$PORT"
