"""The inbox tools: injection attempts are harmless; both protocols reach the same store through
the episode layer; the final reply parses into an answer."""

from __future__ import annotations

import json

import pytest

from rlvr.agent import as_tools
from rlvr.agent.episode import run_call
from rlvr.agent.search import MAX_TERMS
from scenarios.email.inbox import generate_inbox
from scenarios.email.store import (
    InboxStore,
    ToolInputError,
    fts_match,
    search_terms,
)
from scenarios.email.tools import (
    Answer,
    answer_line,
    inbox_tools,
    parse_answer,
    read_ids,
    seen_ids,
    show_email,
    show_hits,
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


@pytest.fixture
def tools(store: InboxStore) -> dict:  # an episode's tools remember its calls: one per test
    return as_tools(inbox_tools(store, INBOX))


@pytest.mark.parametrize(
    ("name", "arguments", "rest", "shows"),
    [
        ("search", None, "invoice", "emails found"),
        ("SEARCH", None, "invoice sender:nobody@example.org", "No emails match"),
        ("search", None, "invoice after:2099-01-01", "No emails match"),
        ("search", '{"keywords": ["invoice", "due"]}', None, "emails found"),
        ("search", '{"keywords": "invoice", "before": "1999-01-01"}', None, "No emails match"),
        ("read", None, "[E001]", "[e001]"),
        ("read", None, "email e001 please", "[e001]"),
        ("read", '{"id": "e001"}', None, "Subject:"),
    ],
)
async def test_tools_in_both_protocols(
    tools: dict, name: str, arguments: str | None, rest: str | None, shows: str
) -> None:
    observation, ran = await run_call(tools, name, arguments, rest)
    assert ran == name.lower() and shows in observation


@pytest.mark.parametrize(
    ("name", "arguments", "rest", "message"),
    [
        ("delete_inbox", "{}", None, "unknown tool 'delete_inbox'"),
        (None, "{}", None, "unknown tool"),
        ("read", "{not json", None, "not valid JSON"),
        ("read", "[1, 2]", None, "must be a JSON object"),
        ("read", "{}", None, "read: id: Field required"),
        ("read", None, "msg-77", "no email with id 'msg-77'"),
        ("search", '{"keywords": {"a": 1}}', None, "search: keywords"),
        ("search", None, "the of and", "keywords"),
        ("read", "[" * 100_000, None, "not valid JSON"),
    ],
)
async def test_malformed_calls_become_one_line_errors(
    tools: dict, name: str | None, arguments: str | None, rest: str | None, message: str
) -> None:
    observation, ran = await run_call(tools, name, arguments, rest)
    assert ran is None and observation.startswith("Error: ")
    assert message in observation and "\n" not in observation


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("ANSWER: Room 4B | e012", Answer(answer="Room 4B", source_ids=("e012",))),
        ("ANSWER: $1,234.50 | e003, e005", Answer(answer="$1,234.50", source_ids=("e003", "e005"))),
        ("ANSWER: not in the inbox |", Answer(answer="not in the inbox")),
        ("ANSWER: Room 4B", Answer(answer="Room 4B")),
        ("**ANSWER:** Room 4B | [e1]", Answer(answer="Room 4B", source_ids=("e1",))),
        ("- Answer: 'Lisbon' | e4 e9", Answer(answer="Lisbon", source_ids=("e4", "e9"))),
        ("ANSWER:\nThe Harbor Room | e2", Answer(answer="The Harbor Room", source_ids=("e2",))),
        ("ANSWER: a | b | e3", Answer(answer="a | b", source_ids=("e3",))),
        ("ANSWER：Room 4B | e12", Answer(answer="Room 4B", source_ids=("e12",))),
        (
            "It is Room 4B, see e7.",
            Answer(answer="It is Room 4B, see e7.", source_ids=("e7",), implicit=True),
        ),
        ("ANSWER: | e3", Answer(answer="ANSWER: | e3", source_ids=("e3",), implicit=True)),
        ("", None),
        (None, None),
    ],
)
def test_final_replies_parse_into_answers(reply: str | None, expected: Answer | None) -> None:
    assert parse_answer(reply) == expected


@pytest.mark.parametrize(("answer", "ids"), [("Room 4B", ("e1", "e22")), ("not in the inbox", ())])
def test_answer_lines_read_back(answer: str, ids: tuple[str, ...]) -> None:
    assert parse_answer(answer_line(answer, ids)) == Answer(answer=answer, source_ids=ids)


def test_tool_schemas_are_openai_functions(tools: dict) -> None:
    assert list(tools) == ["search", "read"]
    for tool in tools.values():
        schema = tool.schema()
        assert schema["type"] == "function"
        json.dumps(schema)  # plain JSON
        params = schema["function"]["parameters"]
        assert set(params["required"]) <= set(params["properties"])
        assert all(p.get("description") for p in params["properties"].values())


def test_read_ids_are_the_emails_shown_whole_not_those_listed(store: InboxStore) -> None:
    hits = store.search(INBOX, "invoice")
    email = INBOXES[0].email(hits[0].id)
    listed, whole = show_hits(hits), show_email(email)
    assert seen_ids([listed]) >= {hits[0].id} and read_ids([listed]) == set()
    assert read_ids([whole]) == {email.id}
    assert read_ids([f"Evidence:\n\n{whole}\n\n{show_email(INBOXES[0].emails[1])}"]) == {
        email.id,
        INBOXES[0].emails[1].id,
    }
