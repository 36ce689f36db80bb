"""Migrate the database, then idempotently create the test users and clients.

Run from this directory (start.sh does): python -m idp.seed
All credentials below are public test values.
"""
import os

USERS = [
    # username, password, Django groups (-> "groups" claim)
    ("alice", "alice-pass", ["staff"]),
    ("bob", "bob-pass", ["gateway-admins"]),
]

APPS = [
    # client_id (jwt-* => JWT access tokens), secret, client type, grant type, redirect uris
    ("jwt-service", "jwt-service-secret", "confidential", "client-credentials", ""),
    ("jwt-app", "jwt-app-secret", "confidential", "password", ""),
    ("opaque-app", "opaque-app-secret", "confidential", "password", ""),
    # The resource server authenticates to /o/introspect/ with these credentials.
    ("gateway", "gateway-secret", "confidential", "client-credentials", ""),
    # Authorization code + PKCE (S256); consent screen skipped.
    ("jwt-web", "jwt-web-secret", "confidential", "authorization-code", "http://127.0.0.1/callback"),
]


def seed():
    from django.contrib.auth.models import Group, User
    from oauth2_provider.models import Application

    for username, password, groups in USERS:
        user, _ = User.objects.get_or_create(username=username)
        user.email = f"{username}@example.test"
        user.set_password(password)
        user.save()
        user.groups.set([Group.objects.get_or_create(name=g)[0] for g in groups])

    for client_id, secret, client_type, grant, redirect_uris in APPS:
        Application.objects.update_or_create(
            client_id=client_id,
            defaults=dict(
                name=client_id,
                client_secret=secret,  # stored hashed (MD5 hasher, see settings)
                client_type=client_type,
                authorization_grant_type=grant,
                redirect_uris=redirect_uris,
                algorithm="RS256",  # id_tokens signed with the active IDP_KEY
                skip_authorization=True,  # no consent page
            ),
        )


if __name__ == "__main__":
    import django
    from django.core.management import call_command

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "idp.settings")
    django.setup()
    call_command("migrate", verbosity=0)  # a no-op on an already migrated database
    seed()
