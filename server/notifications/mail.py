"""The missed-message email: one per user batch, a plain-text and an HTML
part, through the SMTP server of `EVENTQ_SMTP_URL` (the standard library's
smtplib, from the worker's own thread: it blocks only the worker)."""

from __future__ import annotations

import email.utils
import html
import smtplib
import ssl
import urllib.parse
from collections.abc import Sequence
from email.message import EmailMessage

from server.notifications.settings import SmtpTarget
from server.notifications.store import NotifiedMessage, Recipient
from server.notifications.unsubscribe import unsubscribe_url


class SendFailed(Exception):
    """The SMTP server could not be reached, or refused the email; the batch
    is retried later. Raised by `send`."""


def narrow_url(site_url: str, message: NotifiedMessage) -> str:
    """Where the message is on the site (Zulip's `#narrow/.../near/<id>`)."""
    if message.stream_id is None:
        return f"{site_url}/#narrow/dm/{message.sender_id}/near/{message.id}"
    channel = urllib.parse.quote(f"{message.stream_id}-{message.stream_name or ''}", safe="")
    topic = urllib.parse.quote(message.topic, safe="")
    return f"{site_url}/#narrow/channel/{channel}/topic/{topic}/near/{message.id}"


def where(message: NotifiedMessage) -> str:
    if message.stream_id is None:
        return "direct message"
    topic = message.topic or "general chat"
    return f"#{message.stream_name} > {topic}"


def one_line(text: str) -> str:
    """`text` fit for a header: every run of whitespace, line breaks included,
    one space. A header value with a line break is refused by the email
    package (ValueError), and realm and user names made through the command
    line (generation/accounts.py) are checked only for their length."""
    return " ".join(text.split())


def subject(messages: Sequence[NotifiedMessage], realm_name: str) -> str:
    """Zulip's subjects: a conversation's name, or a count when there are several."""
    places = {(m.stream_id, m.topic, m.sender_id if m.stream_id is None else 0) for m in messages}
    if len(places) > 1:
        return f"{len(messages)} new messages in {realm_name}"
    first = messages[0]
    if first.stream_id is None:
        return f"Direct message from {first.sender_full_name}"
    return where(first)


def compose(
    recipient: Recipient,
    messages: Sequence[NotifiedMessage],
    *,
    site_url: str,
    sender: str,
    secret: bytes,
    message_id: str,
) -> EmailMessage:
    """The email for one batch. `message_id` makes the Message-ID header
    (the same for a retried batch, so a mail system may drop a repeat)."""
    assert messages
    unsubscribe = unsubscribe_url(site_url, secret, recipient.id)
    settings_url = f"{site_url}/#settings/notifications"
    mail = EmailMessage()
    mail["Subject"] = one_line(subject(messages, recipient.realm_name))
    mail["From"] = sender
    mail["To"] = email.utils.formataddr((one_line(recipient.full_name), recipient.email))
    mail["Date"] = email.utils.formatdate(localtime=False)
    mail["Message-ID"] = f"<{message_id}@{urllib.parse.urlsplit(site_url).hostname or 'eventq'}>"
    mail["List-Unsubscribe"] = f"<{unsubscribe}>"
    mail["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    mail["Auto-Submitted"] = "auto-generated"

    text = [f"You have {len(messages)} unread message(s) in {recipient.realm_name}:", ""]
    parts = [
        f"<p>You have {len(messages)} unread message(s) in {html.escape(recipient.realm_name)}:</p>"
    ]
    for message in messages:
        link = narrow_url(site_url, message)
        text += [f"{message.sender_full_name} ({where(message)}):", message.content, link, ""]
        parts.append(
            "<div style='margin: 1em 0'>"
            f"<p><b>{html.escape(message.sender_full_name)}</b>"
            f" &middot; <a href='{html.escape(link)}'>{html.escape(where(message))}</a></p>"
            f"<div>{message.rendered_content}</div></div>"
        )
    text += [
        "--",
        f"Reply and read the conversation on the site: {site_url}",
        f"You get these emails for messages you miss while away. Settings: {settings_url}",
        f"Unsubscribe from these emails: {unsubscribe}",
    ]
    parts.append(
        "<hr><p style='color: #666; font-size: small'>"
        f"You get these emails for messages you miss while away."
        f" <a href='{html.escape(settings_url)}'>Notification settings</a>"
        f" &middot; <a href='{html.escape(unsubscribe)}'>Unsubscribe</a></p>"
    )
    mail.set_content("\n".join(text))
    mail.add_alternative(
        "<!doctype html><html><body>" + "".join(parts) + "</body></html>", subtype="html"
    )
    return mail


class Mailer:
    """One SMTP session kept open across the batches of a tick (`close` ends
    it): a connection, TLS and login per email cost more than the email
    (tests/benchmarks/notifications.py). Worker thread only."""

    def __init__(self, target: SmtpTarget, timeout_secs: float):
        self.target = target
        self.timeout_secs = timeout_secs
        self._smtp: smtplib.SMTP | None = None

    def _open(self) -> smtplib.SMTP:
        target = self.target
        context = ssl.create_default_context()
        smtp: smtplib.SMTP
        if target.tls:
            smtp = smtplib.SMTP_SSL(
                target.host, target.port, timeout=self.timeout_secs, context=context
            )
        else:
            smtp = smtplib.SMTP(target.host, target.port, timeout=self.timeout_secs)
        try:
            if target.starttls:
                smtp.starttls(context=context)
            if target.username is not None:
                smtp.login(target.username, target.password or "")
        except BaseException:
            smtp.close()
            raise
        return smtp

    def send(self, mail: EmailMessage) -> None:
        """Hand `mail` to the SMTP server; `SendFailed` if it is not taken.
        A session the server closed while idle is opened again once (the
        email was not taken: a server takes it only with its final reply)."""
        for attempt in (1, 2):
            fresh = self._smtp is None
            try:
                if self._smtp is None:
                    self._smtp = self._open()
                refused = self._smtp.send_message(mail)
            except smtplib.SMTPServerDisconnected as exc:
                self.close()
                if fresh or attempt == 2:
                    raise SendFailed(f"{type(exc).__name__}: {exc}") from exc
                continue
            except (smtplib.SMTPException, OSError) as exc:
                self.close()
                raise SendFailed(f"{type(exc).__name__}: {exc}") from exc
            if refused:
                raise SendFailed(f"the SMTP server refused {sorted(refused)}")
            return

    def close(self) -> None:
        smtp, self._smtp = self._smtp, None
        if smtp is None:
            return
        try:
            smtp.quit()
        except (smtplib.SMTPException, OSError):
            smtp.close()
