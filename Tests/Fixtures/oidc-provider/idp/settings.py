"""Settings for a throw-away OpenID Connect provider used by end-to-end tests.

Everything here is for loopback testing only: the secret key, passwords and
client secrets are public test values. Configuration comes from env vars:

  PORT          port runserver listens on (used for the default issuer)
  IDP_ISSUER    issuer URL; default http://127.0.0.1:$PORT/o
  IDP_KEY       path to the ACTIVE RSA private key (PEM) that signs tokens
  IDP_OLD_KEYS  colon-separated PEM paths of INACTIVE keys (still in JWKS)
  IDP_DB        sqlite file; default ./idp.sqlite3
  IDP_AUDIENCE  "aud" of JWT access tokens; default "gateway"
"""
import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent

# Test-only value; nothing secret is protected by it.
SECRET_KEY = "loopback-test-idp-not-a-secret"
DEBUG = False
# runserver binds to 127.0.0.1; accept the usual loopback spellings.
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]

INSTALLED_APPS = [
    "django.contrib.auth",  # users and groups (groups become the "groups" claim)
    "django.contrib.contenttypes",  # required by auth
    "django.contrib.sessions",  # login session for the authorization-code flow
    "oauth2_provider",  # django-oauth-toolkit
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",  # protects the login form only
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "idp.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],  # registration/login.html
        "APP_DIRS": True,  # oauth2_provider's own templates
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("IDP_DB", "idp.sqlite3"),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# MD5 keeps user passwords and hashed client secrets cheap to check (tests only).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

LOGIN_URL = "/accounts/login/"  # where /o/authorize/ sends anonymous users
USE_TZ = True
TIME_ZONE = "UTC"


def _read(path):
    return Path(path).read_text() if path else ""


PORT = os.environ.get("PORT", "8000")
ISSUER = os.environ.get("IDP_ISSUER", f"http://127.0.0.1:{PORT}/o")
# Audience written into JWT access tokens (see idp/tokens.py).
JWT_ACCESS_TOKEN_AUDIENCE = os.environ.get("IDP_AUDIENCE", "gateway")

OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    # Fixed issuer, so "iss" and discovery do not depend on the Host header.
    "OIDC_ISS_ENDPOINT": ISSUER,
    # Active signing key: signs id_tokens and JWT access tokens; its RFC 7638
    # thumbprint is the "kid". Empty is allowed so `migrate` runs without a key.
    "OIDC_RSA_PRIVATE_KEY": _read(os.environ.get("IDP_KEY", "")),
    # Rotation: restart with the old key listed here; it stays in the JWKS so
    # tokens it signed still verify, but nothing new is signed with it.
    "OIDC_RSA_PRIVATE_KEYS_INACTIVE": [
        _read(p) for p in os.environ.get("IDP_OLD_KEYS", "").split(":") if p
    ],
    # Short JWKS Cache-Control max-age so clients notice rotation quickly.
    "OIDC_JWKS_MAX_AGE_SECONDS": 5,
    # Scope names may contain ':' (RFC 6749 scope-token allows it; DOT does not
    # restrict names). Every application may request every scope.
    "SCOPES": {
        "openid": "OpenID Connect",
        "profile": "Profile claims",
        "email": "Email claim",
        "read": "Read",
        "write": "Write",
        "introspection": "Call the introspection endpoint with a bearer token",
        "todo:read": "Read todos",
        "todo:write": "Write todos",
        "notes:read": "Read notes (the gateway's test plugin)",
        "notes:write": "Write notes (the gateway's test plugin)",
        "admin": "Administer the gateway",
        "accounts:read": "Read one's own gateway account",
    },
    # Granted when a token request names no scope.
    "DEFAULT_SCOPES": ["read"],
    "ACCESS_TOKEN_EXPIRE_SECONDS": 300,
    "ID_TOKEN_EXPIRE_SECONDS": 300,  # library default is 10 hours
    # id_token / userinfo claims: preferred_username, email, groups (idp/tokens.py).
    "OAUTH2_VALIDATOR_CLASS": "idp.tokens.OIDCValidator",
    # JWT access tokens for clients named jwt-*, opaque random ones otherwise.
    "ACCESS_TOKEN_GENERATOR": "idp.tokens.access_token_generator",
    # Must be set explicitly: oauthlib otherwise reuses ACCESS_TOKEN_GENERATOR
    # for refresh tokens.
    "REFRESH_TOKEN_GENERATOR": "oauthlib.oauth2.rfc6749.tokens.random_token_generator",
    # PKCE is required for the authorization-code grant (library default).
    "PKCE_REQUIRED": True,
}

# Request lines from runserver go to stderr; keep the rest quiet.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
