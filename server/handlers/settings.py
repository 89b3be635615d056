"""`GET /api/v1/server_settings`: unauthenticated facts the `zulip` client
reads first (its constructor calls this and needs `zulip_version`)."""

from __future__ import annotations

from server.handlers.base import BaseHandler
from server.version import ZULIP_FEATURE_LEVEL, ZULIP_MERGE_BASE, ZULIP_VERSION


class ServerSettingsHandler(BaseHandler):
    SUPPORTED_METHODS = ("GET",)

    def get(self) -> None:
        self.write_success(
            {
                "authentication_methods": {
                    "password": False,
                    "dev": False,
                    "email": False,
                    "ldap": False,
                    "remoteuser": False,
                    "github": False,
                    "azuread": False,
                    "gitlab": False,
                    "apple": False,
                    "google": False,
                    "saml": False,
                    "openid connect": False,
                },
                "external_authentication_methods": [],
                "zulip_version": ZULIP_VERSION,
                "zulip_merge_base": ZULIP_MERGE_BASE,
                "zulip_feature_level": ZULIP_FEATURE_LEVEL,
                "push_notifications_enabled": False,
                "is_incompatible": False,
                "email_auth_enabled": False,
                "require_email_format_usernames": True,
            }
        )
