"""The turn storm: under policy `all`, agents answer every message of a person, but a message an
agent wrote starts turns only for the members it mentions (issue 22, item 8)."""

import pytest
from conftest import fwj
from fakes.chat_server import ChatServer
from test_sessions import messages, post, setup

pytestmark = pytest.mark.engines

AGENTS = ("a", "b", "c", "d")


def test_four_agents_under_all_answer_each_user_message_once_and_not_each_other(home):
    with ChatServer([{"content": "noted, thanks"}], repeat_last=True) as server:
        setup(server.base_url, *AGENTS, policy="all")
        fwj("session", "create", "s1", "--member", "alice", *sum((["--member", a] for a in AGENTS), []))
        for i in range(3):
            assert len(post("s1", "alice", f"news {i}")["turns"]) == 4  # every message of a user, under all
        summary = fwj("dispatch", "--once")
    assert summary["turns"] == {"run": 12, "answered": 12, "failed": 0, "cancelled": 0}
    log = messages("s1")
    assert len(log) == 15 and sorted(author for author, _ in log[3:]) == sorted(AGENTS * 3)
    assert len(server.requests) == 12
    assert all(t["status"] == "done" for t in fwj("session", "show", "s1")["session"]["turns"])


def test_an_agents_message_starts_turns_only_for_whom_it_mentions_whatever_the_policy(home):
    with ChatServer([]) as server:
        setup(server.base_url, *AGENTS, policy="all")
    fwj("session", "create", "s1", "--member", "alice", *sum((["--member", a] for a in AGENTS), []))
    quiet = post("s1", "a", "just thinking aloud")  # an agent's message, posted by the operator as it
    assert quiet["turns"] == []
    asked = post("s1", "a", "@c what do you think? @a notes to self")
    assert [t["principal"] for t in asked["turns"]] == ["c"]  # never its author
    fwj("binding", "set", "b", "--agent", "b", "--policy", "mentioned")
    assert [t["principal"] for t in post("s1", "d", "@b over to you")["turns"]] == ["b"]
    assert [t["principal"] for t in post("s1", "alice", "hello")["turns"]] == ["a", "c", "d"]  # b is mentioned-only now
