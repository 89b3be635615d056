"""The notification worker's settings, from `EVENTQ_*` variables (the same
environment file as the server's: docs/configuration.md, "Notifications")."""

from __future__ import annotations

import dataclasses
import os
import urllib.parse
from collections.abc import Mapping

from generation.config import DEFAULT_AMQP_URL, NOTIFICATION_QUEUE, ProducerConfig, api_key_secret
from server.config import ConfigError, env_number

# The links of emails point here unless EVENTQ_SITE_URL says otherwise.
DEFAULT_SITE_URL = "http://127.0.0.1:9800"


class NotificationConfigError(ConfigError):
    """A notification setting is invalid; raised by `WorkerSettings.from_env`
    (the command line answers it as any configuration error, exit status 2)."""


@dataclasses.dataclass(frozen=True, slots=True)
class SmtpTarget:
    """Where emails go: `smtp://[user:password@]host[:port][?starttls=true]`
    (port 25 by default; STARTTLS when asked, and then a login when the URL
    names a user) or `smtps://...` (TLS from the start, port 465)."""

    host: str
    port: int
    tls: bool
    starttls: bool
    username: str | None
    password: str | None

    @classmethod
    def parse(cls, url: str) -> SmtpTarget:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("smtp", "smtps") or not parts.hostname:
            raise NotificationConfigError(
                f"EVENTQ_SMTP_URL must be smtp://host[:port] or smtps://host[:port], not {url!r}"
            )
        query = urllib.parse.parse_qs(parts.query)
        starttls = query.get("starttls", ["false"])[-1].lower() in ("1", "true", "yes")
        tls = parts.scheme == "smtps"
        try:
            port = parts.port or (465 if tls else 25)
        except ValueError as exc:
            raise NotificationConfigError(f"EVENTQ_SMTP_URL has a bad port: {exc}") from None
        username = urllib.parse.unquote(parts.username) if parts.username else None
        password = urllib.parse.unquote(parts.password) if parts.password else None
        if username is not None and not (tls or starttls):
            raise NotificationConfigError(
                "EVENTQ_SMTP_URL names a user but neither smtps:// nor ?starttls=true:"
                " the password would cross the network in clear"
            )
        return cls(parts.hostname, port, tls, starttls, username, password)


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerSettings:
    database_url: str
    amqp_url: str = DEFAULT_AMQP_URL
    queue: str = NOTIFICATION_QUEUE
    # Emails: where to (None: no emails), from whom, and the site the links
    # point to.
    smtp: SmtpTarget | None = None
    email_from: str = "eventq <noreply@localhost>"
    site_url: str = DEFAULT_SITE_URL
    # Every user's email batching window in seconds, replacing their
    # `email_notifications_batching_period_seconds` (default 120, Zulip's)
    # when set: for a test site or a demo.
    email_delay_secs: float | None = None
    # The webhook (None: no webhook), its signing secret, and how long a
    # user's pushes are gathered before one call (0: the next tick's).
    webhook_url: str | None = None
    webhook_secret: str = ""
    push_delay_secs: float = 0.0
    # How often due batches are looked for, and the backoff of a failed
    # send: first, doubling up to the cap, given up after `max_attempts`.
    tick_secs: float = 1.0
    retry_first_secs: float = 5.0
    retry_max_secs: float = 600.0
    max_attempts: int = 8
    # Network timeouts of one SMTP session or webhook call.
    send_timeout_secs: float = 30.0
    # Rows of sent, read and deleted notifications are kept this long.
    keep_days: float = 7.0
    # The key unsubscribe links are signed with (the installation's).
    api_key_secret: bytes = b""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WorkerSettings:
        env = os.environ if env is None else env
        producer = ProducerConfig.from_env(env)
        if not producer.amqp_url:
            raise NotificationConfigError(
                "the notification worker consumes RabbitMQ: set EVENTQ_AMQP_URL"
            )
        smtp_url = env.get("EVENTQ_SMTP_URL", "").strip()
        webhook_url = env.get("EVENTQ_NOTIFICATION_WEBHOOK_URL", "").strip() or None
        webhook_secret = env.get("EVENTQ_NOTIFICATION_WEBHOOK_SECRET", "").strip()
        if webhook_url is not None:
            scheme = urllib.parse.urlsplit(webhook_url).scheme
            if scheme not in ("http", "https"):
                raise NotificationConfigError(
                    f"EVENTQ_NOTIFICATION_WEBHOOK_URL must be http(s)://..., not {webhook_url!r}"
                )
            if len(webhook_secret) < 16:
                raise NotificationConfigError(
                    "EVENTQ_NOTIFICATION_WEBHOOK_SECRET must be set (16 characters or more)"
                    " when EVENTQ_NOTIFICATION_WEBHOOK_URL is: the receiver checks each"
                    " call's signature with it"
                )
        site_url = env.get("EVENTQ_SITE_URL", "").strip().rstrip("/") or DEFAULT_SITE_URL
        host = urllib.parse.urlsplit(site_url).hostname or "localhost"
        delay = env.get("EVENTQ_NOTIFICATION_DELAY_SECS", "").strip()
        return cls(
            database_url=producer.database_url,
            amqp_url=producer.amqp_url,
            queue=env.get("EVENTQ_NOTIFICATION_QUEUE", "").strip() or NOTIFICATION_QUEUE,
            smtp=SmtpTarget.parse(smtp_url) if smtp_url else None,
            email_from=env.get("EVENTQ_NOTIFICATION_FROM", "").strip()
            or f"eventq <noreply@{host}>",
            site_url=site_url,
            email_delay_secs=(
                env_number(env, "EVENTQ_NOTIFICATION_DELAY_SECS", 120.0) if delay else None
            ),
            webhook_url=webhook_url,
            webhook_secret=webhook_secret,
            push_delay_secs=env_number(env, "EVENTQ_NOTIFICATION_PUSH_DELAY_SECS", 0.0),
            tick_secs=env_number(env, "EVENTQ_NOTIFICATION_TICK_SECS", 1.0, minimum=0.01),
            retry_first_secs=env_number(env, "EVENTQ_NOTIFICATION_RETRY_SECS", 5.0, minimum=0.01),
            keep_days=env_number(env, "EVENTQ_NOTIFICATION_KEEP_DAYS", 7.0, minimum=0.001),
            max_attempts=int(env_number(env, "EVENTQ_NOTIFICATION_MAX_ATTEMPTS", 8, minimum=1)),
            send_timeout_secs=env_number(
                env, "EVENTQ_NOTIFICATION_SEND_TIMEOUT_SECS", 30.0, minimum=0.1
            ),
            api_key_secret=api_key_secret(env),
        )
