#!/usr/bin/env bash
# Usage: newkey.sh VENV_DIR OUT.pem — writes a new 2048-bit RSA private key (PKCS#8 PEM), made
# with the venv's `cryptography` (a dependency of jwcrypto), for IDP_KEY.
set -euo pipefail
venv="${1:?usage: newkey.sh VENV_DIR OUT.pem}"
out="${2:?usage: newkey.sh VENV_DIR OUT.pem}"
"$venv/bin/python" - "$out" <<'PY'
import sys
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
with open(sys.argv[1], "wb") as f:
    f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
PY
