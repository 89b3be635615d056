"""The operator page's Notifications panel in a real browser (Debian's
Chromium, headless; tests/browser/conftest.py): it shows the shard's own
counters and its last read of the workers' figures exactly as
/operator/stats gives them, flags a queue nobody consumes, and says so on a
shard that enqueues no notifications."""

from __future__ import annotations

from typing import Any

from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By

from tests.browser.test_pages import WAIT_SECS, console_errors, screenshot, wait

# The panel's figures whose element shows one number of the answer, by id:
# the path to it in `notifications`.
FIGURES = {
    "notifications-enqueued-delivery": ("enqueued", "delivery"),
    "notifications-enqueued-gc": ("enqueued", "gc"),
    "notifications-unpublished": ("unpublished",),
    "notifications-publish-failures": ("publish_failures",),
    "notifications-dropped": ("dropped",),
    "notifications-queue-depth": ("queue", "messages"),
    "notifications-queue-consumers": ("queue", "consumers"),
    "notifications-dead-letters": ("queue", "dead_letters"),
    "notifications-recorded": ("worker", "counters", "recorded"),
    "notifications-email-sent": ("worker", "counters", "email_sent"),
    "notifications-push-sent": ("worker", "counters", "push_sent"),
    "notifications-skipped-read": ("worker", "counters", "skipped_read"),
    "notifications-skipped-deleted": ("worker", "counters", "skipped_deleted"),
    "notifications-failed": ("worker", "counters", "failed"),
    "notifications-dead-lettered": ("worker", "counters", "dead_lettered"),
    "notifications-pending-email": ("worker", "pending", "email"),
    "notifications-pending-push": ("worker", "pending", "push"),
}


def panel(driver: WebDriver) -> dict[str, Any]:
    """The panel's texts by id, and the answer the page shows them from."""
    found: dict[str, Any] = driver.execute_script(
        """const text = (id) => document.getElementById(id).textContent;
           return {shown: Object.fromEntries(arguments[0].map((id) => [id, text(id)])),
                   latest: window.eventqOperator.latest};""",
        list(FIGURES),
    )
    return found


def dig(body: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        body = body[key]
    return body


def test_the_notifications_panel_shows_the_shards_and_the_workers_figures(demo_site, browser):
    site = demo_site()
    polonius = site.users["polonius"]
    # A direct message to a user with no queue: one notification, at delivery.
    site.rest("hamlet", "POST", "messages", type="direct", to=[polonius.user_id], content="hi")
    operator = browser()
    operator.get(f"{site.server.url}/operator?every=0.3")
    figures = wait(
        operator,
        lambda d: (
            (f := panel(d))["latest"] is not None
            and f["latest"]["notifications"]["enqueued"]["delivery"] == 1
            and f["latest"]["notifications"]["worker"] is not None
            and f["latest"]["notifications"]["queue"] is not None
            and f
        ),
    )
    # The page draws each answer as it takes it: what it shows is `latest`.
    notifications = figures["latest"]["notifications"]
    assert figures["shown"] == {id_: str(dig(notifications, path)) for id_, path in FIGURES.items()}
    assert operator.find_element(By.ID, "notifications-figures").is_displayed()
    assert not operator.find_element(By.ID, "notifications-off").is_displayed()
    # No worker runs here: nobody consumes the queue, which the page flags.
    assert notifications["queue"]["consumers"] == 0
    consumers = operator.find_element(By.ID, "notifications-queue-consumers")
    assert "alert" in (consumers.get_attribute("class") or "")
    read_at = operator.find_element(By.ID, "notifications-read-at")
    assert read_at.text.startswith("Read by this shard every 15 s: the workers' figures at ")
    assert read_at.get_attribute("data-worker-read-at") == str(notifications["worker"]["read_at"])
    screenshot(operator, "operator-notifications")
    assert console_errors(operator) == []


def test_the_notifications_panel_says_when_a_shard_enqueues_none(demo_site, browser):
    site = demo_site(EVENTQ_NOTIFICATIONS="0")
    operator = browser()
    operator.get(f"{site.server.url}/operator?every=0.3")
    wait(
        operator,
        lambda d: d.find_element(By.ID, "fetch-status").get_attribute("data-status") == "ok",
        WAIT_SECS,
    )
    assert operator.find_element(By.ID, "notifications-off").is_displayed()
    assert not operator.find_element(By.ID, "notifications-figures").is_displayed()
    assert console_errors(operator) == []
