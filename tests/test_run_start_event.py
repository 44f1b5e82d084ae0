"""`fw run start --principal P --bot B --event E` prints the run as `fw run start --json` does;
an event the principal does not take is `denied` with its reason, and changes nothing."""

import json

from conftest import fw, fwj, snapshot
from test_events import setup_bot

EVENT = {"type": "message.received", "actor": {"id": "alice"}, "group": {"id": "g1"}, "message": {"id": "m1", "text": "hi"}}


def start(event, *flags):
    return fw("run", "start", "--principal", "p1", "--bot", "desk", "--event", json.dumps(event), *flags)


def test_the_run_is_printed_as_run_start_prints_one(home):
    setup_bot()
    doc = json.loads(start(EVENT, "--json").stdout)
    plain = fwj("run", "start", "--principal", "p1")
    assert set(doc) == set(plain) | {"bot", "event", "platform_capabilities"}
    assert doc["mode"] == "managed" and doc["identity"] == "p1" and doc["status"] == "active"
    assert fwj("run", "show", doc["run_id"])["event"] == EVENT
    quiet = start(EVENT, "-q")
    assert quiet.exit_code == 0 and quiet.stdout.strip().startswith("run-") and len(quiet.stdout.split()) == 1
    human = start(EVENT)
    assert human.exit_code == 0 and "for event message.received on bot desk" in human.stdout


def test_an_event_the_agent_did_not_select_is_denied_and_changes_nothing(home):
    setup_bot(events=("group.*",))
    fw("run", "list")  # let the state database come into being before the snapshot
    before = snapshot(home)
    r = start(EVENT, "--json")
    assert r.exit_code == 5, r
    assert (r.json["error"]["code"], r.json["error"]["reason"]) == ("denied", "event_not_selected")
    assert "events" in r.json["error"]["hint"]
    assert snapshot(home) == before and fwj("run", "list")["runs"] == []
    human = start(EVENT)
    assert human.exit_code == 5 and "does not select" in human.stderr and "Traceback" not in human.stderr


def test_a_disabled_binding_is_denied_with_its_reason(home):
    setup_bot()
    fwj("binding", "disable", "p1")
    before = snapshot(home)
    r = start(EVENT, "--json")
    assert r.exit_code == 5, r
    assert (r.json["error"]["code"], r.json["error"]["reason"]) == ("denied", "binding_disabled")
    assert "fw binding enable p1" in r.json["error"]["hint"]
    assert snapshot(home) == before and fwj("run", "list")["runs"] == []
