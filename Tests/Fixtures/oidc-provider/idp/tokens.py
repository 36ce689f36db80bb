"""Token customisation for the test IdP.

Access-token generator: RFC 9068 JWTs for clients named jwt-*, opaque otherwise.

Wired in as OAUTH2_PROVIDER["ACCESS_TOKEN_GENERATOR"]. oauthlib calls it with
the token request before django-oauth-toolkit stores the token, so the string
returned here is exactly what is saved in the database; /o/introspect/ therefore
works for JWTs and opaque tokens alike.
"""
import json
import time
import uuid

from django.conf import settings
from jwcrypto import jwt
from oauthlib.oauth2.rfc6749.tokens import random_token_generator
from oauth2_provider.oauth2_validators import OAuth2Validator
from oauth2_provider.settings import oauth2_settings
from oauth2_provider.utils import jwk_from_pem


def access_token_generator(request, refresh_token=False):
    client = request.client  # the authenticated oauth2_provider Application
    if not client.client_id.startswith("jwt-"):
        return random_token_generator(request)

    key = jwk_from_pem(oauth2_settings.OIDC_RSA_PRIVATE_KEY)  # the active key
    now = int(time.time())
    user = None if request.grant_type == "client_credentials" else request.user
    claims = {
        "iss": oauth2_settings.OIDC_ISS_ENDPOINT,
        # RFC 9068: the user's id, or the client itself for client credentials.
        "sub": str(user.pk) if user else client.client_id,
        "aud": settings.JWT_ACCESS_TOKEN_AUDIENCE,
        "iat": now,
        "nbf": now,
        # oauthlib sets expires_in just before calling the generator.
        "exp": now + int(request.expires_in or oauth2_settings.ACCESS_TOKEN_EXPIRE_SECONDS),
        "jti": str(uuid.uuid4()),
        "client_id": client.client_id,
        "scope": " ".join(request.scopes or []),
    }
    if user:
        claims["preferred_username"] = user.get_username()
        claims["groups"] = sorted(user.groups.values_list("name", flat=True))
    # kid is the RFC 7638 thumbprint, the same value /o/.well-known/jwks.json publishes.
    header = {"typ": "at+jwt", "alg": "RS256", "kid": key.thumbprint()}
    token = jwt.JWT(header=json.dumps(header), claims=json.dumps(claims))
    token.make_signed_token(key)
    return token.serialize()


class OIDCValidator(OAuth2Validator):
    """Adds user claims to id_tokens and /o/userinfo/ (OAUTH2_VALIDATOR_CLASS).

    The library only emits "sub" by default. Each claim is released when its
    scope was granted: preferred_username and groups with "profile", email with
    "email". The request-agnostic form (no request argument) also lists the
    claims in the discovery document's claims_supported.
    """

    oidc_claim_scope = {**OAuth2Validator.oidc_claim_scope, "groups": "profile"}

    def get_additional_claims(self):
        return {
            "preferred_username": lambda r: r.user.get_username(),
            "email": lambda r: r.user.email,
            "groups": lambda r: sorted(r.user.groups.values_list("name", flat=True)),
        }
