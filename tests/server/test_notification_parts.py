"""The notification worker's pure parts: its settings, the email it
composes, the webhook's signature, the unsubscribe token."""

from __future__ import annotations

import email
import email.policy
import hashlib
import hmac

import pytest

from server.config import ConfigError
from server.notifications import mail, unsubscribe, webhook
from server.notifications.settings import SmtpTarget, WorkerSettings
from server.notifications.store import NotifiedMessage, Recipient, parse_candidates

SECRET = b"k" * 32
RECIPIENT = Recipient(7, "bob@example.com", "Bob <b>", 2, "Acme & Co", True)


def message(**changes: object) -> NotifiedMessage:
    fields: dict[str, object] = {
        "id": 40,
        "sender_id": 3,
        "sender_full_name": "Alice",
        "stream_id": None,
        "stream_name": None,
        "topic": "",
        "content": "see **this**",
        "rendered_content": "<p>see <strong>this</strong></p>",
        "timestamp": 1_764_300_000,
        "mentioned": False,
        "wildcard_mentioned": False,
        "via": "delivery",
    }
    fields.update(changes)
    return NotifiedMessage(**fields)  # type: ignore[arg-type]


def compose(*messages: NotifiedMessage) -> email.message.EmailMessage:
    composed = mail.compose(
        RECIPIENT,
        messages,
        site_url="https://chat.example.com",
        sender="eventq <noreply@chat.example.com>",
        secret=SECRET,
        message_id="eventq-email-7-40-40-1",
    )
    # As the receiving side parses it.
    parsed = email.message_from_bytes(composed.as_bytes(), policy=email.policy.default)
    assert isinstance(parsed, email.message.EmailMessage)
    return parsed


def test_one_direct_message_makes_an_email_with_both_parts_and_its_links():
    parsed = compose(message())
    assert parsed["Subject"] == "Direct message from Alice"
    assert parsed["To"] == '"Bob <b>" <bob@example.com>'
    assert parsed["Message-ID"] == "<eventq-email-7-40-40-1@chat.example.com>"
    link = unsubscribe.unsubscribe_url("https://chat.example.com", SECRET, 7)
    assert parsed["List-Unsubscribe"] == f"<{link}>"
    assert parsed["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    text = parsed.get_body(("plain",)).get_content()
    html = parsed.get_body(("html",)).get_content()
    assert "Alice (direct message):\nsee **this**" in text
    assert "https://chat.example.com/#narrow/dm/3/near/40" in text
    assert link in text
    assert link in html
    assert "<p>see <strong>this</strong></p>" in html
    # What the user and the organization named is escaped in the HTML.
    assert "Acme &amp; Co" in html


def test_messages_of_several_conversations_are_counted_in_the_subject():
    channel = message(id=41, stream_id=5, stream_name="design", topic="logo", mentioned=True)
    assert compose(channel)["Subject"] == "#design > logo"
    assert compose(message(), channel)["Subject"] == "2 new messages in Acme & Co"
    text = compose(message(), channel).get_body(("plain",)).get_content()
    assert "Alice (#design > logo):" in text
    assert "https://chat.example.com/#narrow/channel/5-design/topic/logo/near/41" in text


def test_triggers_are_zulips_names():
    assert message().trigger("push") == "direct_message"
    assert message(stream_id=5, mentioned=True).trigger("push") == "mentioned"
    assert message(stream_id=5, wildcard_mentioned=True).trigger("email") == (
        "stream_wildcard_mentioned"
    )
    assert message(stream_id=5).trigger("push") == "stream_push_notify"


def test_the_webhook_signature_is_an_hmac_of_the_timestamp_and_the_body():
    body = b'{"type": "notification"}'
    expected = hmac.new(b"s" * 16, b"1764300000." + body, hashlib.sha256).hexdigest()
    assert webhook.signature("s" * 16, 1_764_300_000, body) == f"v1={expected}"


def test_an_unsubscribe_token_names_its_user_and_nobody_else():
    token = unsubscribe.token(SECRET, 7)
    assert unsubscribe.user_of(SECRET, token) == 7
    assert unsubscribe.user_of(b"x" * 32, token) is None
    assert unsubscribe.user_of(SECRET, token.replace("7-", "8-", 1)) is None
    assert unsubscribe.user_of(SECRET, "nonsense") is None


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("smtp://127.0.0.1", SmtpTarget("127.0.0.1", 25, False, False, None, None)),
        (
            "smtp://me%40x:p%3Ass@mail:587?starttls=true",
            SmtpTarget("mail", 587, False, True, "me@x", "p:ss"),
        ),
        ("smtps://u:p@mail", SmtpTarget("mail", 465, True, False, "u", "p")),
    ],
)
def test_smtp_urls(url, target):
    assert SmtpTarget.parse(url) == target


@pytest.mark.parametrize(
    ("env", "error"),
    [
        ({"EVENTQ_SMTP_URL": "http://mail"}, "EVENTQ_SMTP_URL must be smtp://"),
        ({"EVENTQ_SMTP_URL": "smtp://u:p@mail"}, "in clear"),
        ({"EVENTQ_NOTIFICATION_WEBHOOK_URL": "https://h/x"}, "SECRET must be set"),
        ({"EVENTQ_NOTIFICATION_WEBHOOK_URL": "file:///etc/passwd"}, "must be http(s)"),
        ({"EVENTQ_NOTIFICATION_TICK_SECS": "0"}, "EVENTQ_NOTIFICATION_TICK_SECS"),
        ({"EVENTQ_AMQP_URL": ""}, "consumes RabbitMQ"),
    ],
)
def test_settings_refuse_what_cannot_work(env, error, tmp_path):
    base = {"EVENTQ_API_KEY_SECRET": "x" * 32, "EVENTQ_STATE_DIR": str(tmp_path)}
    with pytest.raises(ConfigError) as raised:
        WorkerSettings.from_env({**base, **env})
    assert error in str(raised.value)


def test_settings_defaults(tmp_path):
    settings = WorkerSettings.from_env(
        {"EVENTQ_API_KEY_SECRET": "x" * 32, "EVENTQ_STATE_DIR": str(tmp_path)}
    )
    assert settings.smtp is None
    assert settings.webhook_url is None
    assert settings.email_delay_secs is None  # each user's own window
    assert settings.email_from == "eventq <noreply@127.0.0.1>"
    assert settings.queue == "eventq.notifications"


@pytest.mark.parametrize(
    "items",
    [
        {"user_id": 1},
        [{"user_id": 1, "realm_id": 2, "message_id": 3, "kinds": ["sms"], "via": "gc", "at": 1}],
        [{"user_id": 1, "realm_id": 2, "message_id": 3, "kinds": [], "via": "x", "at": 1}],
        [{"user_id": True, "realm_id": 2, "message_id": 3, "kinds": [], "via": "gc", "at": 1}],
    ],
)
def test_a_malformed_published_batch_is_refused(items):
    with pytest.raises(ValueError, match="notifications"):
        parse_candidates(items)
