"""A generated inbox: seeded, deterministic, verifiable fact by fact.

No email corpus is available offline, so each inbox is built from a small set of facts (meetings
and their reschedules, invoices, travel bookings) rendered into emails, with newsletters and office
chit-chat as distractors. Questions are derived from the same facts, so every expected answer and
every supporting email id is known exactly. Randomness comes only from `random.Random` and a
seeded Faker instance per inbox: same (seed, index) -> same inbox, and no wall-clock time.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from faker import Faker
from pydantic import BaseModel, ConfigDict

# The inboxes live in the first half of 2024; dates never depend on today's date.
EPOCH = datetime(2024, 1, 8, 8, 0)
SPAN_DAYS = 170

NOT_IN_INBOX = "not in the inbox"

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip


class QuestionKind(StrEnum):
    """What a question needs from the inbox."""

    SINGLE = "single"  # one fact stated in one email
    LATEST = "latest"  # the latest state of a thread that was changed (reschedules)
    AGGREGATE = "aggregate"  # a total or a count over several emails
    ABSENT = "absent"  # the inbox does not say; the right answer is NOT_IN_INBOX


class AnswerType(StrEnum):
    """How an expected answer is compared (see scoring)."""

    TEXT = "text"
    MONEY = "money"
    COUNT = "count"
    ABSENT = "absent"


class Email(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    inbox: str
    sender: str
    to: tuple[str, ...]
    cc: tuple[str, ...] = ()
    date: datetime
    subject: str
    body: str
    thread: str

    def text(self) -> str:
        """Everything a reader of the email sees, for mechanical checks."""
        return "\n".join(
            [self.sender, *self.to, *self.cc, self.date.isoformat(), self.subject, self.body]
        )


class Question(BaseModel):
    """A question with its exact answer and the emails that support it. `entity` is the thing
    asked about (an invoice number, a topic, a city): for ABSENT questions no email mentions it."""

    model_config = ConfigDict(frozen=True)

    id: str
    inbox: str
    kind: QuestionKind
    text: str
    answer: str
    answer_type: AnswerType
    supporting_ids: tuple[str, ...]
    entity: str


class Person(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    address: str

    @property
    def first(self) -> str:
        return self.name.split()[0]

    def header(self) -> str:
        return f"{self.name} <{self.address}>"


class Inbox(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    owner: Person
    emails: tuple[Email, ...]
    questions: tuple[Question, ...]

    def email(self, email_id: str) -> Email:
        return next(e for e in self.emails if e.id == email_id)


# --- Vocabulary -----------------------------------------------------------------------------------

TOPICS = (
    "budget review", "vendor onboarding", "roadmap planning", "security audit",
    "hiring committee", "launch retrospective", "board prep", "escalation review",
    "pricing workshop", "data migration kickoff", "office move planning", "calibration session",
    "partner integration sync", "campaign review", "compliance training", "incident postmortem",
    "pipeline review", "design critique", "capacity planning", "contract renewal",
    "deprecation plan", "website redesign", "quarterly business review", "onboarding curriculum",
    "tooling demo", "warehouse expansion", "sustainability report", "intern program planning",
    "dashboard review", "localization kickoff",
)  # fmt: skip
ROOMS = (
    "Room 4B", "the Harbor Room", "the third-floor boardroom", "Conference Room Atlas",
    "the Juniper Room", "Room 12A", "the Lakeview Room", "the east wing lounge",
    "Conference Room Orion", "the Maple Room", "Room 2C", "the library on floor 5",
)  # fmt: skip
SERVICES = (
    "cloud hosting", "legal review", "office cleaning", "catering for the offsite",
    "software licenses", "consulting hours", "equipment rental", "translation services",
    "print materials", "security monitoring", "freight and shipping", "recruiting fees",
)  # fmt: skip
CITIES = (
    "Lisbon", "Toronto", "Denver", "Oslo", "Singapore", "Melbourne", "Austin", "Dublin",
    "Seattle", "Prague", "Nairobi", "Montreal", "Vienna", "Osaka", "Boston", "Edinburgh",
    "Copenhagen", "Helsinki", "Santiago", "Phoenix", "Rotterdam", "Zurich", "Atlanta",
    "Barcelona", "Stockholm", "Vancouver", "Chicago", "Auckland", "Budapest", "Marseille",
)  # fmt: skip
AIRLINES = (
    ("Northwind Airways", "NW"), ("Blue Heron Air", "BH"), ("Atlantic Crest", "AC"),
    ("SkyBridge Airlines", "SB"), ("Meridian Air", "MR"),
)  # fmt: skip
HOTEL_SUFFIXES = ("Grand", "Plaza", "Suites", "Inn", "House", "Lodge")
NEWSLETTERS = (
    ("The Morning Ledger", "news@morningledger.com"),
    ("Ops Weekly", "digest@opsweekly.io"),
    ("Founder Notes", "hello@foundernotes.co"),
    ("Travel Deals Digest", "deals@traveldeals.example"),
    ("Finance Brief", "brief@financebrief.net"),
)
HEADLINES = (
    "How to run a shorter meeting", "Five ways to speed up invoice approvals",
    "Cheap flight deals this spring", "Why hotel prices keep climbing",
    "The case for async status updates", "What finance teams automate first",
    "A checklist for your next offsite", "Reading the quarterly numbers",
)  # fmt: skip
CHATTER = (
    ("Lunch on Friday?", "Anyone up for lunch on Friday? The new noodle place opened next door."),
    ("Slides for the all-hands", "I dropped the draft slides in the shared folder. Comments welcome before Thursday."),
    ("Parking garage closed", "Heads up: the parking garage is closed for repairs all week."),
    ("Team offsite ideas", "Collecting ideas for the team offsite. Hiking and a cooking class are on the list so far."),
    ("Coffee machine", "The coffee machine on our floor is fixed again."),
    ("Reading list", "Sharing a few articles on planning that I found useful."),
    ("Expense report reminder", "Please submit last month's expense reports by the end of the week."),
    ("Desk moves", "Facilities will move a few desks on Saturday; label anything you want kept."),
    ("Welcome our new teammate", "Please welcome our new teammate who starts on Monday."),
    ("Fire drill", "There will be a short fire drill tomorrow morning."),
)  # fmt: skip


# --- Formatting -----------------------------------------------------------------------------------


def fmt_day(when: datetime) -> str:
    """'Tuesday, 12 March 2024' (locale-independent)."""
    return f"{WEEKDAYS[when.weekday()]}, {when.day} {MONTHS[when.month - 1]} {when.year}"


def fmt_when(when: datetime) -> str:
    """'Tuesday, 12 March 2024 at 14:30'."""
    return f"{fmt_day(when)} at {when:%H:%M}"


def fmt_date(when: datetime) -> str:
    """'12 March 2024'."""
    return f"{when.day} {MONTHS[when.month - 1]} {when.year}"


def fmt_money(cents: int) -> str:
    return f"${cents // 100:,}.{cents % 100:02d}"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", text.lower())


# --- Generation -----------------------------------------------------------------------------------


@dataclass
class _Draft:
    """An email before ids are assigned (ids follow date order once the inbox is complete)."""

    key: int
    sender: Person
    to: tuple[Person, ...]
    date: datetime
    subject: str
    body: str
    thread: str
    cc: tuple[Person, ...] = ()


@dataclass
class _QuestionDraft:
    kind: QuestionKind
    text: str
    answer: str
    answer_type: AnswerType
    support: tuple[int, ...]
    entity: str


@dataclass
class _Builder:
    rng: random.Random
    fake: Faker
    owner: Person
    drafts: list[_Draft] = field(default_factory=list)
    questions: list[_QuestionDraft] = field(default_factory=list)
    threads: int = 0

    def thread(self) -> str:
        self.threads += 1
        return f"t{self.threads:02d}"

    def add(self, **fields) -> int:
        key = len(self.drafts)
        self.drafts.append(_Draft(key=key, **fields))
        return key

    def when(self, start: datetime | None = None, max_days: int = SPAN_DAYS) -> datetime:
        """A weekday business-hours datetime at a quarter hour, on or after `start`."""
        base = start or EPOCH
        day = base + timedelta(days=self.rng.randint(0, max_days))
        while day.weekday() >= 5:
            day += timedelta(days=1)
        return day.replace(hour=self.rng.randint(8, 17), minute=self.rng.choice((0, 15, 30, 45)))

    def person(self, domain: str) -> Person:
        first, last = self.fake.unique.first_name(), self.fake.unique.last_name()
        return Person(name=f"{first} {last}", address=f"{first}.{last}@{domain}".lower())


def _seed_int(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "big")


def _meetings(b: _Builder, colleagues: list[Person], topics: list[str]) -> None:
    rooms = b.rng.sample(ROOMS, len(topics))
    for n, (topic, room) in enumerate(zip(topics, rooms, strict=True)):
        organizer = b.rng.choice(colleagues)
        thread = b.thread()
        sent = b.when(max_days=SPAN_DAYS - 30)
        slot = b.when(sent + timedelta(days=3), max_days=10)
        subject = f"{topic.capitalize()} meeting"
        cc = tuple(b.rng.sample([c for c in colleagues if c != organizer], 1))
        first = b.add(
            sender=organizer,
            to=(b.owner,),
            cc=cc,
            date=sent,
            subject=subject,
            thread=thread,
            body=(
                f"Hi {b.owner.first},\n\nLet's hold the {topic} meeting on {fmt_when(slot)} "
                f"in {room}. I'll bring the latest numbers; please review the notes beforehand.\n\n"
                f"Thanks,\n{organizer.first}"
            ),
        )
        chain, latest_slot, day = [first], slot, sent
        # Two meetings out of the first three move at least once, so every inbox has LATEST items.
        moves = b.rng.choice((1, 2)) if n < 2 else b.rng.choice((0, 0, 1))
        for _ in range(moves):
            day = (day + timedelta(days=b.rng.randint(1, 2))).replace(
                hour=b.rng.randint(8, 15), minute=b.rng.choice((0, 15, 30, 45))
            )
            latest_slot = b.when(day + timedelta(days=2), max_days=12)
            chain.append(
                b.add(
                    sender=organizer,
                    to=(b.owner,),
                    cc=cc,
                    date=day,
                    subject=f"Re: {subject}",
                    thread=thread,
                    body=(
                        f"Hi {b.owner.first},\n\nSomething came up, so I need to move the {topic} "
                        f"meeting. New time: {fmt_when(latest_slot)}. Same room as before.\n\n"
                        f"Sorry for the shuffle,\n{organizer.first}"
                    ),
                )
            )
            day += timedelta(hours=1, minutes=b.rng.choice((5, 20, 40)))
            b.add(
                sender=b.owner,
                to=(organizer,),
                date=day,
                subject=f"Re: {subject}",
                thread=thread,
                body=f"Works for me, thanks {organizer.first}.",
            )
        who = organizer.name
        b.questions.append(
            _QuestionDraft(
                QuestionKind.SINGLE,
                f"Where will the {topic} meeting with {who} take place?",
                room,
                AnswerType.TEXT,
                (first,),
                topic,
            )
        )
        if moves:
            b.questions.append(
                _QuestionDraft(
                    QuestionKind.LATEST,
                    f"When is the {topic} meeting with {who} scheduled now?",
                    fmt_when(latest_slot),
                    AnswerType.TEXT,
                    tuple(chain),
                    topic,
                )
            )


def _invoices(b: _Builder, vendors: list[tuple[str, Person]], services: list[str]) -> None:
    used: set[str] = set()
    for v, (company, contact) in enumerate(vendors):
        service = services[v]
        # One busy month with 2-3 invoices (the aggregation target) plus 1-2 invoices elsewhere.
        busy_month = b.rng.randint(2, 5)
        busy_start = datetime(2024, busy_month, 1, 8)
        dates = [b.when(busy_start, max_days=20) for _ in range(b.rng.randint(2, 3))]
        dates = [d for d in dates if d.month == busy_month] or [busy_start.replace(day=4)]
        others = [b.when() for _ in range(b.rng.randint(1, 2))]
        dates += [d for d in others if d.month != busy_month]
        keys: list[tuple[int, datetime, int, str]] = []
        for date in sorted(dates):
            number = f"INV-{b.rng.randint(10000, 99999)}"
            while number in used:
                number = f"INV-{b.rng.randint(10000, 99999)}"
            used.add(number)
            cents = b.rng.randint(120_00, 9_800_00)
            due = date + timedelta(days=30)
            key = b.add(
                sender=contact,
                to=(b.owner,),
                date=date,
                subject=f"Invoice {number} from {company}",
                thread=b.thread(),
                body=(
                    f"Hi {b.owner.first},\n\nPlease find attached invoice {number} for {service}.\n\n"
                    f"Invoice date: {fmt_date(date)}\nAmount due: {fmt_money(cents)}\n"
                    f"Due date: {fmt_date(due)}\n\nThank you for your business,\n"
                    f"{contact.name}\n{company} Accounts"
                ),
            )
            keys.append((key, date, cents, number))
            if b.rng.random() < 0.35:  # a reminder names the invoice but not the amount
                b.add(
                    sender=contact,
                    to=(b.owner,),
                    date=due - timedelta(days=5),
                    subject=f"Reminder: invoice {number}",
                    thread=b.drafts[key].thread,
                    body=(
                        f"Hi {b.owner.first},\n\nA friendly reminder that invoice {number} from "
                        f"{company} is due on {fmt_date(due)}.\n\nBest,\n{contact.first}"
                    ),
                )
        key, date, cents, number = b.rng.choice(keys)
        if v < 2:
            b.questions.append(
                _QuestionDraft(
                    QuestionKind.SINGLE,
                    f"What is the amount due on invoice {number}?",
                    fmt_money(cents),
                    AnswerType.MONEY,
                    (key,),
                    number,
                )
            )
        else:
            b.questions.append(
                _QuestionDraft(
                    QuestionKind.SINGLE,
                    f"When is payment for invoice {number} from {company} due?",
                    fmt_date(date + timedelta(days=30)),
                    AnswerType.TEXT,
                    (key,),
                    number,
                )
            )
        in_month = [(k, c) for k, d, c, _ in keys if d.month == busy_month]
        if v < 2 and len(in_month) >= 2:
            month = f"{MONTHS[busy_month - 1]} 2024"
            b.questions.append(
                _QuestionDraft(
                    QuestionKind.AGGREGATE,
                    f"What is the total amount of the invoices {company} sent in {month}?",
                    fmt_money(sum(c for _, c in in_month)),
                    AnswerType.MONEY,
                    tuple(k for k, _ in in_month),
                    company,
                )
            )
        elif v == 2:
            b.questions.append(
                _QuestionDraft(
                    QuestionKind.AGGREGATE,
                    f"How many invoices did {company} send?",
                    str(len(keys)),
                    AnswerType.COUNT,
                    tuple(k for k, *_ in keys),
                    company,
                )
            )


def _travel(b: _Builder, home: str, destinations: list[str]) -> None:
    for n, city in enumerate(destinations):
        airline, code = b.rng.choice(AIRLINES)
        flight = f"{code} {b.rng.randint(100, 999)}"
        booked = b.when(max_days=SPAN_DAYS - 40)
        departs = b.when(booked + timedelta(days=7), max_days=25)
        confirmation = "".join(b.rng.choices("ABCDEFGHJKLMNPQRSTUVWXYZ23456789", k=6))
        sender = Person(name=airline, address=f"reservations@{slug(airline)}.com")
        thread = b.thread()
        key = b.add(
            sender=sender,
            to=(b.owner,),
            date=booked,
            subject=f"Booking confirmation: {home} to {city}",
            thread=thread,
            body=(
                f"Dear {b.owner.name},\n\nYour trip is booked.\n\nConfirmation code: {confirmation}\n"
                f"Flight {flight} departs {home} on {fmt_when(departs)} and arrives in {city} the "
                f"same day.\nPassenger: {b.owner.name}\n\nHave a pleasant journey,\n{airline}"
            ),
        )
        b.questions.append(
            _QuestionDraft(
                QuestionKind.SINGLE,
                f"What is the confirmation code for the flight to {city}?",
                confirmation,
                AnswerType.TEXT,
                (key,),
                city,
            )
        )
        if n == 0 or b.rng.random() < 0.4:  # a schedule change: the LATEST departure counts
            changed = departs + timedelta(minutes=b.rng.choice((-90, -45, 50, 95, 130)))
            change = b.add(
                sender=sender,
                to=(b.owner,),
                date=booked + timedelta(days=3, hours=2),
                subject=f"Schedule change: flight {flight} to {city}",
                thread=thread,
                body=(
                    f"Dear {b.owner.name},\n\nThe departure of flight {flight} to {city} has "
                    f"changed. It now departs {home} on {fmt_when(changed)}. Your confirmation "
                    f"code {confirmation} stays the same.\n\n{airline}"
                ),
            )
            b.questions.append(
                _QuestionDraft(
                    QuestionKind.LATEST,
                    f"When does the flight to {city} depart now?",
                    fmt_when(changed),
                    AnswerType.TEXT,
                    (key, change),
                    city,
                )
            )
        else:
            b.questions.append(
                _QuestionDraft(
                    QuestionKind.SINGLE,
                    f"When does the flight to {city} depart?",
                    fmt_when(departs),
                    AnswerType.TEXT,
                    (key,),
                    city,
                )
            )
        if n == 0:
            hotel = f"The {b.fake.last_name()} {b.rng.choice(HOTEL_SUFFIXES)}"
            check_out = departs + timedelta(days=b.rng.randint(2, 5))
            key = b.add(
                sender=Person(name="StayFinder", address="stays@stayfinder.example"),
                to=(b.owner,),
                date=booked + timedelta(hours=1),
                subject=f"Your stay in {city}: reservation confirmed",
                thread=b.thread(),
                body=(
                    f"Hello {b.owner.first},\n\nYour reservation at {hotel} in {city} is confirmed."
                    f"\nCheck-in: {fmt_date(departs)}\nCheck-out: {fmt_date(check_out)}\n"
                    f"Reservation number: {b.rng.randint(1000000, 9999999)}\n\nStayFinder"
                ),
            )
            b.questions.append(
                _QuestionDraft(
                    QuestionKind.SINGLE,
                    f"Which hotel is booked for the stay in {city}?",
                    hotel,
                    AnswerType.TEXT,
                    (key,),
                    city,
                )
            )


def _distractors(b: _Builder, colleagues: list[Person]) -> None:
    for name, address in b.rng.sample(NEWSLETTERS, 4):
        picks = b.rng.sample(HEADLINES, 2)
        items = [f"- {h}. {b.fake.catch_phrase()}: {b.fake.bs()}." for h in picks]
        b.add(
            sender=Person(name=name, address=address),
            to=(b.owner,),
            date=b.when(),
            subject=f"{name}: {picks[0]}",
            thread=b.thread(),
            body="This week:\n" + "\n".join(items) + "\n\nUnsubscribe any time.",
        )
    for subject, text in b.rng.sample(CHATTER, 6):
        sender = b.rng.choice(colleagues)
        b.add(
            sender=sender,
            to=(b.owner,),
            cc=tuple(b.rng.sample([c for c in colleagues if c != sender], 2)),
            date=b.when(),
            subject=subject,
            thread=b.thread(),
            body=f"Hi all,\n\n{text}\n\n{sender.first}",
        )


def _absent(b: _Builder, corpus: str, topics: list[str], cities: list[str]) -> None:
    """Questions about things no email mentions (verified against the whole inbox text)."""
    lowered = corpus.lower()
    number = f"INV-{b.rng.randint(10000, 99999)}"
    while number.lower() in lowered:
        number = f"INV-{b.rng.randint(10000, 99999)}"
    topic = next(t for t in topics if t not in lowered)
    city = next(c for c in cities if c.lower() not in lowered)
    for text, entity in (
        (f"What is the amount due on invoice {number}?", number),
        (f"When is the {topic} meeting scheduled?", topic),
        (f"What is the confirmation code for the flight to {city}?", city),
    ):
        b.questions.append(
            _QuestionDraft(QuestionKind.ABSENT, text, NOT_IN_INBOX, AnswerType.ABSENT, (), entity)
        )


def generate_inbox(seed: int, index: int) -> Inbox:
    """Inbox number `index` of corpus `seed`; independent of how many inboxes are generated."""
    rng = random.Random(_seed_int("email-inbox", seed, index))
    fake = Faker("en_US")
    fake.seed_instance(_seed_int("email-faker", seed, index))
    home_company = fake.unique.company()
    domain = f"{slug(home_company)}.com"
    first, last = fake.unique.first_name(), fake.unique.last_name()
    owner = Person(name=f"{first} {last}", address=f"{first}.{last}@{domain}".lower())
    b = _Builder(rng=rng, fake=fake, owner=owner)

    colleagues = [b.person(domain) for _ in range(5)]
    vendor_names = [fake.unique.company() for _ in range(3)]
    vendors = [(name, b.person(f"{slug(name)}.com")) for name in vendor_names]
    topics = rng.sample(TOPICS, len(TOPICS))
    cities = rng.sample(CITIES, len(CITIES))
    home, destinations, spare_cities = cities[0], cities[1:3], cities[3:]

    _meetings(b, colleagues, topics[:4])
    _invoices(b, vendors, rng.sample(SERVICES, 3))
    _travel(b, home, destinations)
    _distractors(b, colleagues)
    corpus = "\n".join(
        "\n".join([d.subject, d.body, *(p.header() for p in (d.sender, *d.to, *d.cc))])
        for d in b.drafts
    )
    _absent(b, corpus, topics[4:], spare_cities)

    inbox_id = f"inbox-{index:03d}"
    order = sorted(b.drafts, key=lambda d: (d.date, d.key))
    ids = {d.key: f"e{n:03d}" for n, d in enumerate(order, start=1)}
    emails = tuple(
        Email(
            id=ids[d.key],
            inbox=inbox_id,
            sender=d.sender.header(),
            to=tuple(p.header() for p in d.to),
            cc=tuple(p.header() for p in d.cc),
            date=d.date,
            subject=d.subject,
            body=d.body,
            thread=d.thread,
        )
        for d in order
    )
    questions = tuple(
        Question(
            id=f"q{n:02d}",
            inbox=inbox_id,
            kind=q.kind,
            text=q.text,
            answer=q.answer,
            answer_type=q.answer_type,
            supporting_ids=tuple(sorted(ids[k] for k in q.support)),
            entity=q.entity,
        )
        for n, q in enumerate(b.questions, start=1)
    )
    return Inbox(id=inbox_id, owner=owner, emails=emails, questions=questions)
