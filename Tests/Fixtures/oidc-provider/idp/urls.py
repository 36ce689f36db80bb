"""URLs: the OAuth2/OIDC endpoints under /o/ and a plain login form."""
from django.contrib.auth import views as auth_views
from django.urls import include, path
from oauth2_provider.views import OAuthServerMetadataView

urlpatterns = [
    # /o/authorize/, /o/token/, /o/introspect/, /o/revoke_token/, /o/userinfo/,
    # /o/.well-known/openid-configuration, /o/.well-known/jwks.json,
    # /o/.well-known/oauth-authorization-server
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    # RFC 8414 location of the metadata for issuer http://host/o.
    path(".well-known/oauth-authorization-server/o", OAuthServerMetadataView.as_view()),
    # Login form used before /o/authorize/ (authorization-code flow).
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
]
