"""Issue 21, item 21: the catalogue shows the event patterns as they are and marks which
event types fw produces, so `message.edited` is no longer a surprise."""

from __future__ import annotations

from conftest import fw, fwj, make_basics


def tool(doc, name):
    return next(t for t in doc["event_tools"] if t["name"] == name)


def test_each_event_tool_names_the_produced_types_it_fits_and_the_patterns_none_match(home):
    doc = fwj("tool", "catalogue")
    produced = doc["event_types"]
    assert "message.edited" not in produced and "message.received" in produced
    delete = tool(doc, "event_delete_message")
    assert delete["event_patterns"] == ["message.received", "message.edited"]  # as they are
    assert delete["produced_event_types"] == ["message.received"]
    assert delete["unproduced_patterns"] == ["message.edited"]
    reply = tool(doc, "event_reply")
    assert "feedback.*" in reply["unproduced_patterns"] and "message.*" not in reply["unproduced_patterns"]
    for entry in doc["event_tools"]:
        assert set(entry["produced_event_types"]) <= set(produced)


def test_the_table_marks_patterns_fw_never_produces(home):
    text = fw("tool", "catalogue").stdout
    assert text.startswith("Event types fw produces: message.received, friend.request_received")
    assert "(not produced): the pattern matches no event type fw produces" in text
    rows = text.split("event_delete_message", 1)[1].split("event_get_actor", 1)[0]
    assert "(not" in rows and "message.edited" in rows


def test_a_pattern_marked_not_produced_is_the_one_an_agent_cannot_select(home):
    make_basics()
    error = fwj("agent", "edit", "a1", "--add-event", "message.edited", code=4)["error"]
    assert error["field"] == "events"
    fwj("agent", "edit", "a1", "--add-event", "message.received")
