"""`fw message list` writes a session's messages out as it reads them: in JSON one valid
document in order, in human mode the chat log, and past a screenful plain aligned rows."""

import json
import re
import sqlite3

from conftest import fw, fwj

SCREENFUL = 24  # lines, when standard output is not a terminal


def chat(home, count, authors=("al", "bobby")):
    fwj("principal", "create", authors[0], "--kind", "user")
    fwj("principal", "create", authors[1], "--kind", "user")
    fwj("session", "create", "s1", "--member", authors[0], "--member", authors[1])
    for i in range(count):
        fwj("message", "post", "s1", "--as", authors[i % 2], f"message {i} for @{authors[(i + 1) % 2]}")


def test_json_of_many_messages_is_one_document_in_order(home):
    chat(home, 60)
    result = fw("message", "list", "s1", "--json")
    assert result.exit_code == 0, result
    doc = json.loads(result.stdout)  # exactly one document: json.loads refuses trailing data
    assert list(doc) == ["session", "messages"] and doc["session"] == "s1"
    assert [m["text"] for m in doc["messages"]] == [f"message {i} for @{'bobby' if i % 2 == 0 else 'al'}" for i in range(60)]
    assert [m["id"] for m in doc["messages"]] == sorted(m["id"] for m in doc["messages"])
    assert doc["messages"][0]["mentions"] == ["bobby"] and doc["messages"][0]["author"] == "al"
    assert set(doc["messages"][0]) == {"id", "session", "author", "text", "mentions", "hop", "created_at"}


def test_the_last_n_come_oldest_first_and_an_empty_session_is_an_empty_list(home):
    chat(home, 30)
    last = fwj("message", "list", "s1", "--limit", "5")["messages"]
    assert [m["text"][:10] for m in last] == [f"message {i} "[:10] for i in range(25, 30)]
    fwj("session", "create", "quiet", "--member", "al")
    assert fwj("message", "list", "quiet") == {"session": "quiet", "messages": []}


def test_the_tool_lists_what_the_command_lists(home):
    chat(home, 30)
    by_tool = fwj("tool", "call", "--manager", "harness_session_list")
    assert by_tool["sessions"][0]["messages"] == 30
    assert len(fwj("message", "list", "s1")["messages"]) == 30


def test_a_short_chat_reads_as_a_chat_log(home):
    chat(home, 3)
    out = fw("message", "list", "s1").stdout.splitlines()
    assert len(out) == 3
    assert re.fullmatch(r"\d\d:\d\d:\d\d al: message 0 for @bobby", out[0]), out
    assert re.fullmatch(r"\d\d:\d\d:\d\d bobby: message 1 for @al", out[1]), out


def test_past_a_screenful_the_log_is_plain_aligned_rows(home):
    chat(home, SCREENFUL + 1)
    result = fw("message", "list", "s1")
    assert result.exit_code == 0, result
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["time", "author", "text"]
    assert len(lines) == 1 + SCREENFUL + 1
    column = lines[0].index("text")
    for i, line in enumerate(lines[1:]):
        assert re.fullmatch(r"\d\d:\d\d:\d\d  (al   |bobby)  .*", line), line
        assert line[column:] == f"message {i} for @{'bobby' if i % 2 == 0 else 'al'}", line
    assert "\x1b" not in result.stdout


def test_a_text_of_several_lines_keeps_to_its_column(home):
    chat(home, SCREENFUL)
    fwj("message", "post", "s1", "--as", "al", "first line\nsecond line")
    lines = fw("message", "list", "s1").stdout.splitlines()
    column = lines[0].index("text")
    assert lines[-2][column:] == "first line"
    assert lines[-1] == " " * column + "second line"


def test_a_damaged_row_still_ends_one_valid_document_and_says_corrupt(home):
    chat(home, 40)
    with sqlite3.connect(home / "state.db") as db:
        db.execute("UPDATE messages SET mentions = 'not json' WHERE id = 30")
    result = fw("message", "list", "s1", "--json")
    assert result.exit_code == 4, result
    doc = json.loads(result.stdout)
    assert doc["error"]["code"] == "corrupt" and "state.db" in doc["error"]["message"]
    assert [m["id"] for m in doc["messages"]] == list(range(1, 30))
    human = fw("message", "list", "s1")
    assert human.exit_code == 4 and "Error:" in human.stderr and "Traceback" not in human.output


def test_an_unknown_session_is_one_error_document_and_nothing_else(home):
    result = fw("message", "list", "nope", "--json")
    assert result.exit_code == 3
    assert json.loads(result.stdout)["error"]["code"] == "not_found"
