"""A generated multi-hop corpus: seeded, deterministic, every answer derivable hop by hop.

A world of people, companies and cities is drawn with a seeded Faker; each entity gets one short
passage (its "page") that states its facts. A question names a start entity and composes a chain
of relations (person -> employer -> headquarters city -> country, ...); each hop's fact is stated
in the passage of that hop's subject, so the supporting passages of a question are exactly the
passages of the entities along its chain. Bridge entities never appear in the question.

Distractors are MuSiQue's hard negatives: passages that mention a hop's answer without being on
the chain (a colleague at the same company, another company in the same city, another city in the
same country), so the answer's words alone do not find the right passage.

Cities are invented (Faker), countries are real names: a model cannot answer from memory, only
from the passages. Same (seed, people) -> same corpus; no wall-clock time enters.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from enum import StrEnum

from faker import Faker
from pydantic import BaseModel, ConfigDict

# fmt: off
COUNTRIES = (
    "Norway", "Portugal", "Kenya", "Chile", "Canada", "Japan", "Peru", "Egypt", "Finland",
    "Vietnam", "Ireland", "Morocco", "Austria", "Brazil", "India", "Greece", "Mexico", "Poland",
)
INDUSTRIES = (
    "software", "shipping", "biotech", "furniture", "textile", "solar energy", "insurance",
    "robotics", "publishing", "food processing", "mining", "aerospace", "toy", "pharmaceutical",
)
ROLES = (
    "an engineer", "an accountant", "a designer", "a lawyer", "a chemist", "a sales manager",
    "a data analyst", "a recruiter", "a technician", "a product manager", "a translator",
    "a pilot", "an architect", "a copywriter",
)
# fmt: on
DISTRACTORS_PER_QUESTION = 3
MIN_PEOPLE = 12
COMPANY_SHARE = 4  # one company and one city per this many people


class EntityKind(StrEnum):
    PERSON = "person"
    COMPANY = "company"
    CITY = "city"


class Relation(StrEnum):
    """A fact stated in the passage of its subject."""

    EMPLOYER = "employer"  # person -> company
    BIRTHPLACE = "birthplace"  # person -> city
    HEADQUARTERS = "headquarters"  # company -> city
    FOUNDER = "founder"  # company -> person
    COUNTRY = "country"  # city -> country


SUB_QUESTIONS: dict[Relation, str] = {
    Relation.EMPLOYER: "Which company does {} work for?",
    Relation.BIRTHPLACE: "In which city was {} born?",
    Relation.HEADQUARTERS: "In which city is {} headquartered?",
    Relation.FOUNDER: "Who founded {}?",
    Relation.COUNTRY: "In which country is {}?",
}


# How each fact reads in its subject's passage (the templates in `_world`): a reader that knows
# only these can walk a question's chain through the passage texts, which is how the tests prove
# every answer derivable and how the oracle answers without looking at the label.
FACT_PATTERNS: dict[Relation, re.Pattern[str]] = {
    Relation.EMPLOYER: re.compile(r" works as an? .+? at (.+?)\. "),
    Relation.BIRTHPLACE: re.compile(r" was born in (.+?)(?: and joined .+)?\.$"),
    Relation.HEADQUARTERS: re.compile(r"Its headquarters are in (.+?)\.$"),
    Relation.FOUNDER: re.compile(r" company founded by (.+?) in \d{4}\."),
    Relation.COUNTRY: re.compile(r" is a city in (.+?), home to "),
}


def read_fact(relation: Relation, text: str) -> str | None:
    """The object of `relation` as `text` states it, or None when it does not."""
    found = FACT_PATTERNS[relation].search(text)
    return found.group(1) if found else None


class QuestionKind(StrEnum):
    """A chain of relations from the start entity to the answer."""

    EMPLOYER_CITY = "employer_city"
    EMPLOYER_FOUNDER = "employer_founder"
    BIRTH_COUNTRY = "birth_country"
    HQ_COUNTRY = "hq_country"
    FOUNDER_BIRTHPLACE = "founder_birthplace"
    EMPLOYER_COUNTRY = "employer_country"
    FOUNDER_COUNTRY = "founder_country"


class Template(BaseModel):
    model_config = ConfigDict(frozen=True)

    chain: tuple[Relation, ...]
    text: str


TEMPLATES: dict[QuestionKind, Template] = {
    QuestionKind.EMPLOYER_CITY: Template(
        chain=(Relation.EMPLOYER, Relation.HEADQUARTERS),
        text="In which city is the headquarters of the company that {} works for?",
    ),
    QuestionKind.EMPLOYER_FOUNDER: Template(
        chain=(Relation.EMPLOYER, Relation.FOUNDER),
        text="Who founded the company that {} works for?",
    ),
    QuestionKind.BIRTH_COUNTRY: Template(
        chain=(Relation.BIRTHPLACE, Relation.COUNTRY), text="In which country was {} born?"
    ),
    QuestionKind.HQ_COUNTRY: Template(
        chain=(Relation.HEADQUARTERS, Relation.COUNTRY),
        text="In which country is the company {} headquartered?",
    ),
    QuestionKind.FOUNDER_BIRTHPLACE: Template(
        chain=(Relation.FOUNDER, Relation.BIRTHPLACE),
        text="In which city was the founder of {} born?",
    ),
    QuestionKind.EMPLOYER_COUNTRY: Template(
        chain=(Relation.EMPLOYER, Relation.HEADQUARTERS, Relation.COUNTRY),
        text="In which country is the headquarters of the company that {} works for?",
    ),
    QuestionKind.FOUNDER_COUNTRY: Template(
        chain=(Relation.FOUNDER, Relation.BIRTHPLACE, Relation.COUNTRY),
        text="In which country was the founder of {} born?",
    ),
}


class Passage(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    title: str  # the entity's name
    text: str
    kind: EntityKind


class Hop(BaseModel):
    """One step of a chain: `subject`'s `relation` is `answer`, stated in passage `passage_id`."""

    model_config = ConfigDict(frozen=True)

    relation: Relation
    subject: str
    answer: str
    passage_id: str
    question: str  # the single-hop sub-question (MuSiQue's decomposition)


class Question(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    kind: QuestionKind
    text: str
    answer: str
    hops: tuple[Hop, ...]
    distractor_ids: tuple[str, ...]

    @property
    def supporting_ids(self) -> tuple[str, ...]:
        return tuple(h.passage_id for h in self.hops)


class Corpus(BaseModel):
    model_config = ConfigDict(frozen=True)

    seed: int
    passages: tuple[Passage, ...]
    questions: tuple[Question, ...]  # every composable question, shuffled by seed

    def passage(self, passage_id: str) -> Passage:
        return self.passages[int(passage_id.removeprefix("p")) - 1]


# --- The world ------------------------------------------------------------------------------------


class _World(BaseModel):
    """Every fact as (relation, subject) -> object, and one passage per entity."""

    model_config = ConfigDict(frozen=True)

    facts: dict[tuple[Relation, str], str]
    passages: tuple[Passage, ...]


def _unique(make: Callable[[], str], count: int) -> list[str]:
    """`count` distinct names from `make()` (Faker repeats names in larger worlds)."""
    names: dict[str, None] = {}
    while len(names) < count:
        names.setdefault(make(), None)
    return list(names)


def _world(seed: int, people: int) -> _World:
    fake = Faker("en_US")
    fake.seed_instance(seed)
    rng = random.Random(f"multihop-{seed}")
    n_places = max(3, people // COMPANY_SHARE)
    cities = _unique(fake.city, n_places)
    companies = _unique(fake.company, n_places)
    persons = _unique(lambda: f"{fake.first_name()} {fake.last_name()}", people)
    founders = dict(zip(companies, persons, strict=False))  # the first persons found companies
    founded = {f: c for c, f in founders.items()}

    facts: dict[tuple[Relation, str], str] = {}
    passages: list[tuple[str, str, EntityKind]] = []
    for city in cities:
        country = rng.choice(COUNTRIES)
        facts[Relation.COUNTRY, city] = country
        text = f"{city} is a city in {country}, home to about {rng.randrange(20, 900) * 1000:,} people."
        passages.append((city, text, EntityKind.CITY))
    for company in companies:
        hq, founder = rng.choice(cities), founders[company]
        facts[Relation.HEADQUARTERS, company] = hq
        facts[Relation.FOUNDER, company] = founder
        industry = rng.choice(INDUSTRIES)
        article = "an" if industry[0] in "aeiou" else "a"
        text = (
            f"{company} is {article} {industry} company founded by {founder} in "
            f"{rng.randrange(1950, 2015)}. Its headquarters are in {hq}."
        )
        passages.append((company, text, EntityKind.COMPANY))
    for person in persons:
        birthplace, first = rng.choice(cities), person.split()[0]
        facts[Relation.BIRTHPLACE, person] = birthplace
        if person in founded:  # founders run their company; no EMPLOYER fact to ask about
            text = (
                f"{person} founded {founded[person]} and still runs it. "
                f"{first} was born in {birthplace}."
            )
        else:
            employer = rng.choice(companies)
            facts[Relation.EMPLOYER, person] = employer
            text = (
                f"{person} works as {rng.choice(ROLES)} at {employer}. {first} was born in "
                f"{birthplace} and joined {employer} in {rng.randrange(1995, 2024)}."
            )
        passages.append((person, text, EntityKind.PERSON))
    return _World(
        facts=facts,
        passages=tuple(
            Passage(id=f"p{n:03d}", title=title, text=text, kind=kind)
            for n, (title, text, kind) in enumerate(passages, start=1)
        ),
    )


def _compose(
    world: _World, kind: QuestionKind, start: str, passage_of: dict[str, str]
) -> tuple[Hop, ...] | None:
    """The hops of `kind` from `start`, or None when a fact is missing or the chain revisits an
    entity (a founder asked who founded their own company would be a one-hop question)."""
    hops: list[Hop] = []
    subject = start
    for relation in TEMPLATES[kind].chain:
        answer = world.facts.get((relation, subject))
        if answer is None or answer == start or any(h.subject == answer for h in hops):
            return None
        hops.append(
            Hop(
                relation=relation,
                subject=subject,
                answer=answer,
                passage_id=passage_of[subject],
                question=SUB_QUESTIONS[relation].format(subject),
            )
        )
        subject = answer
    return tuple(hops)


def _distractors(
    hops: tuple[Hop, ...], mentioned_in: dict[str, list[str]], rng: random.Random
) -> tuple[str, ...]:
    """Hard negatives: passages that mention a hop's answer but are not on the chain."""
    supporting = {h.passage_id for h in hops}
    mentions = [pid for h in hops for pid in mentioned_in[h.answer] if pid not in supporting]
    candidates = list(dict.fromkeys(mentions))
    return tuple(sorted(rng.sample(candidates, min(DISTRACTORS_PER_QUESTION, len(candidates)))))


def generate_corpus(seed: int, people: int = 60) -> Corpus:
    """The passages of a world of `people` persons (and a quarter as many companies and cities)
    and every question composable over it, in a seeded order."""
    if people < MIN_PEOPLE:
        raise ValueError(f"generate_corpus: expected people >= {MIN_PEOPLE}, got {people}")
    world = _world(seed, people)
    passage_of = {p.title: p.id for p in world.passages}
    starts = {
        kind: [s for (r, s) in world.facts if r is TEMPLATES[kind].chain[0]] for kind in TEMPLATES
    }
    chains = [
        (kind, start, hops)
        for kind, subjects in starts.items()
        for start in subjects
        if (hops := _compose(world, kind, start, passage_of)) is not None
    ]
    rng = random.Random(f"multihop-questions-{seed}")
    rng.shuffle(chains)
    answers = {h.answer for _, _, hops in chains for h in hops}
    mentioned_in = {
        a: [p.id for p in world.passages if a in p.text and p.title != a] for a in answers
    }
    questions = tuple(
        Question(
            id=f"q{n:04d}",
            kind=kind,
            text=TEMPLATES[kind].text.format(start),
            answer=hops[-1].answer,
            hops=hops,
            distractor_ids=_distractors(hops, mentioned_in, rng),
        )
        for n, (kind, start, hops) in enumerate(chains, start=1)
    )
    return Corpus(seed=seed, passages=world.passages, questions=questions)
