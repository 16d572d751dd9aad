"""A post acts on every answer the outbox's claim can give."""

from __future__ import annotations

from gateway.delivery.posts import Posts
from gateway.delivery.reconcile import ThreadSearch
from gateway.slack.client import slack_client
from gateway.slack.workspaces import SlackClients
from storage import OUTBOX_STATES, Database, Outbox


def test_a_post_has_one_action_for_each_claim_answer() -> None:
    """Each answer of the outbox's table (storage/outbox_states.py) has its action, and
    no action waits for an answer the table never gives."""
    clients = SlackClients.single(slack_client(None, "http://127.0.0.1:9/", timeout=15))
    outbox = Outbox(Database("postgresql://unused"), call_seconds=1, settle_seconds=1)
    search = ThreadSearch(
        clients, outbox, bot_user_id=None, bot_id=None, reconcile_seconds=1, orphans=False
    )
    posts = Posts(clients, outbox, search)
    assert set(posts.on_claim) == {rule.answer for rule in OUTBOX_STATES.values()}
