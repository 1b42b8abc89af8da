"""Tool arguments: injection attempts are harmless; the text protocol and tool calls parse."""

from __future__ import annotations

import json

import pytest

from scenarios.email.actions import (
    TOOLS,
    Answer,
    Invalid,
    Read,
    Search,
    ToolName,
    parse_text_action,
    parse_tool_call,
    show_hits,
)
from scenarios.email.inbox import generate_inbox
from scenarios.email.store import (
    MAX_TERMS,
    InboxStore,
    ToolInputError,
    fts_match,
    search_terms,
)

INBOXES = (generate_inbox(0, 0), generate_inbox(0, 1))
INBOX = INBOXES[0].id

INJECTIONS = [
    "'; DROP TABLE emails; --",
    '"; DROP TABLE emails; --',
    "x' OR '1'='1",
    "1; DELETE FROM emails",
    "invoice NEAR(meeting, 2)",
    "invoice OR meeting OR *",
    "inv*",
    '"unterminated',
    "subject: invoice",
    "body:meeting NOT flight",
    "^invoice",
    "( ( ( invoice",
    "emails_fts MATCH 'x'",
    "\x00\x01 invoice",
    "🙂 ünïcödé ИНВОЙС",
    "a" * 100_000,
    " ".join(["invoice"] * 5_000),
    "INV-' UNION SELECT sql FROM sqlite_master --",
]


@pytest.fixture(scope="module")
def store() -> InboxStore:
    return InboxStore(INBOXES)


@pytest.mark.parametrize("attack", INJECTIONS)
def test_injection_in_search_is_harmless(store: InboxStore, attack: str) -> None:
    before = store.count()
    for fields in (
        {"keywords": attack},
        {"keywords": "invoice", "sender": attack},
        {"keywords": "invoice", "to": attack},
        {"keywords": "", "sender": attack},
    ):
        hits = store.search(INBOX, **fields)
        assert isinstance(show_hits(hits), str)
        assert all(hit.id.startswith("e") for hit in hits)
    with pytest.raises(ToolInputError):  # a bad date is a message for the model, not a crash
        store.search(INBOX, "invoice", after=attack)
    assert store.read(INBOX, attack) is None
    assert store.count() == before
    assert store.integrity()


def test_store_is_read_only(store: InboxStore) -> None:
    with pytest.raises(Exception, match="readonly"):
        store._db.execute("DELETE FROM emails")
    assert store.integrity()


@pytest.mark.parametrize("attack", INJECTIONS)
def test_fts_terms_are_quoted_literals(attack: str) -> None:
    terms = search_terms(attack)
    assert len(terms) <= MAX_TERMS
    assert all(t.isalnum() or "_" in t for t in terms)
    match = fts_match(terms)
    assert match.count('"') == 2 * len(terms)


def test_fts_operators_are_matched_as_words(store: InboxStore) -> None:
    # "NEAR", "OR" and "NOT" are plain words after quoting: searching them finds nothing special,
    # and a real term next to them still ranks its emails first.
    hits = store.search(INBOX, "NEAR OR NOT AND invoice")
    assert hits and all("invoice" in (h.subject + h.snippet).lower() for h in hits)


def test_search_filters(store: InboxStore) -> None:
    inbox = INBOXES[0]
    invoice = next(e for e in inbox.emails if e.subject.startswith("Invoice "))
    address = invoice.sender.split("<")[1].rstrip(">")
    hits = store.search(INBOX, "invoice", sender=address)
    assert hits and all(address in h.sender for h in hits)
    day = invoice.date.date().isoformat()
    assert all(h.date.date().isoformat() >= day for h in store.search(INBOX, "invoice", after=day))
    assert all(h.date.date().isoformat() < day for h in store.search(INBOX, "invoice", before=day))
    assert store.search(INBOX, "", to=inbox.owner.address)
    with pytest.raises(ToolInputError, match="keywords"):
        store.search(INBOX, "the of and")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SEARCH: invoice Cox-Mills", Search(keywords="invoice Cox-Mills")),
        ("search: budget review", Search(keywords="budget review")),
        (
            "SEARCH: invoice from:coxmills.com after:2024-02-01 before:2024-03-01",
            Search(
                keywords="invoice", sender="coxmills.com", after="2024-02-01", before="2024-03-01"
            ),
        ),
        ("SEARCH: meeting to:joseph", Search(keywords="meeting", to="joseph")),
        ("READ: e012", Read(id="e012")),
        ("READ: [E012]", Read(id="e012")),
        ("I will read it.\nREAD: email e7 please", Read(id="e7")),
        ("READ: msg-77", Read(id="msg-77")),
        ("ANSWER: Room 4B | e012", Answer(answer="Room 4B", source_ids=("e012",))),
        ("ANSWER: $1,234.50 | e003, e005", Answer(answer="$1,234.50", source_ids=("e003", "e005"))),
        ("ANSWER: not in the inbox |", Answer(answer="not in the inbox")),
        ("ANSWER: Room 4B", Answer(answer="Room 4B")),
        ("**ANSWER:** Room 4B | [e1]", Answer(answer="Room 4B", source_ids=("e1",))),
        ("- Answer: 'Lisbon' | e4 e9", Answer(answer="Lisbon", source_ids=("e4", "e9"))),
        ("ANSWER:\nThe Harbor Room | e2", Answer(answer="The Harbor Room", source_ids=("e2",))),
        ("ANSWER: a | b | e3", Answer(answer="a | b", source_ids=("e3",))),
        ("ANSWER：Room 4B | e12", Answer(answer="Room 4B", source_ids=("e12",))),
        ("Let me think.\nSEARCH: flight\nANSWER: x | e1", Search(keywords="flight")),
        (
            "ANSWER: | e3",
            Invalid(error="ANSWER: give the answer text, e.g. ANSWER: Room 4B | e012"),
        ),
        ("READ:", Invalid(error="READ: give an email id, e.g. READ: e012")),
        ("The meeting is in Room 4B.", None),
        ("", None),
        (None, None),
        ("SEARCHING: invoices", None),
        ("My answer: nothing here", None),
    ],
)
def test_text_protocol_parser(text: str | None, expected: object) -> None:
    assert parse_text_action(text) == expected


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("search_inbox", '{"keywords": "invoice"}', Search(keywords="invoice")),
        (
            "search_inbox",
            '{"keywords": ["budget", "review"], "from": "anna", "after": "2024-01-01"}',
            Search(keywords="budget review", sender="anna", after="2024-01-01"),
        ),
        ("search_inbox", '{"keywords": null}', Search(keywords="")),
        ("read_email", '{"id": "e012"}', Read(id="e012")),
        ("read_email", '{"id": 12}', Read(id="12")),
        (
            "return_final_answer",
            '{"answer": "Room 4B", "source_ids": ["e1", "e2"]}',
            Answer(answer="Room 4B", source_ids=("e1", "e2")),
        ),
        (
            "return_final_answer",
            '{"answer": 42, "source_ids": "e1, e2"}',
            Answer(answer="42", source_ids=("e1", "e2")),
        ),
        ("return_final_answer", '{"answer": "x"}', Answer(answer="x")),
    ],
)
def test_tool_call_parser(name: str, arguments: str, expected: object) -> None:
    assert parse_tool_call(name, arguments) == expected


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("delete_inbox", "{}", "unknown tool 'delete_inbox'"),
        (None, "{}", "unknown tool"),
        ("read_email", "{not json", "not valid JSON"),
        ("read_email", "[1, 2]", "must be a JSON object"),
        ("read_email", "{}", "read_email: id: Field required"),
        ("return_final_answer", '{"source_ids": []}', "return_final_answer: answer"),
        ("search_inbox", '{"keywords": {"a": 1}}', "search_inbox: keywords"),
        ("read_email", "[" * 100_000, "not valid JSON"),
    ],
)
def test_malformed_tool_calls_become_errors(name: str | None, arguments: str, message: str) -> None:
    action = parse_tool_call(name, arguments)
    assert isinstance(action, Invalid)
    assert message in action.error
    assert "\n" not in action.error


def test_tool_schemas_are_openai_functions() -> None:
    names = [tool["function"]["name"] for tool in TOOLS]
    assert names == [t.value for t in ToolName]
    for tool in TOOLS:
        assert tool["type"] == "function"
        json.dumps(tool)  # plain JSON
        params = tool["function"]["parameters"]
        assert set(params["required"]) <= set(params["properties"])
