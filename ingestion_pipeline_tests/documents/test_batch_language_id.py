"""The batched language identifier answers what py3langid answers for each text, bit for bit."""

import random

from py3langid.langid import MODEL_FILE, LanguageIdentifier

from ingestion_pipeline.documents.batch_language_id import ROWS_PER_WALK, BatchIdentifier
from ingestion_pipeline.documents.languages import _identifier, text_search_configs

# Passages in several scripts and languages (the first article of the Universal Declaration of Human Rights, and
# prose), cut below into pieces of every length, some upper-cased (py3langid lower-cases an all-capital text).
PASSAGES = [
    "All human beings are born free and equal in dignity and rights. They are endowed with reason and conscience "
    "and should act towards one another in a spirit of brotherhood.",
    "Tous les êtres humains naissent libres et égaux en dignité et en droits. Ils sont doués de raison et de "
    "conscience et doivent agir les uns envers les autres dans un esprit de fraternité.",
    "Alle Menschen sind frei und gleich an Würde und Rechten geboren. Sie sind mit Vernunft und Gewissen begabt "
    "und sollen einander im Geist der Brüderlichkeit begegnen.",
    "Todos los seres humanos nacen libres e iguales en dignidad y derechos y, dotados como están de razón y "
    "conciencia, deben comportarse fraternalmente los unos con los otros.",
    "Все люди рождаются свободными и равными в своем достоинстве и правах. Они наделены разумом и совестью и "
    "должны поступать в отношении друг друга в духе братства.",
    "Όλοι οι άνθρωποι γεννιούνται ελεύθεροι και ίσοι στην αξιοπρέπεια και τα δικαιώματα.",
    "يولد جميع الناس أحرارًا متساوين في الكرامة والحقوق. وقد وهبوا عقلاً وضميرًا وعليهم أن يعامل بعضهم بعضًا بروح الإخاء.",
    "人人生而自由,在尊严和权利上一律平等。他们赋有理性和良心,并应以兄弟关系的精神相对待。",
    "모든 인간은 태어날 때부터 자유로우며 그 존엄과 권리에 있어 동등하다.",
    "सभी मनुष्यों को गौरव और अधिकारों के मामले में जन्मजात स्वतन्त्रता और समानता प्राप्त है।",
    "Quarterly revenue 1,204.5 | 1,310.2 | 9.8 % -- EBITDA (adj.) 311 / 298; see note 14(b).",
]
EDGES = ["", " ", "1234 5678 90", "\x00\x01\x02", "🙂" * 40, "A", "ÉTÉ", "x" * 3000]


def _pieces(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    pieces = list(EDGES)
    while len(pieces) < count:
        text = " ".join(rng.choice(PASSAGES) for _ in range(rng.randint(1, 6)))
        start = rng.randrange(len(text))
        piece = text[start:start + rng.choice([1, 7, 40, 120, 300, 600, 900])]
        pieces.append(piece.upper() if rng.random() < 0.1 else piece)
    return pieces


def test_each_text_gets_what_py3langid_gives_it_across_several_walks():
    identifier = _identifier()
    texts = _pieces(2 * ROWS_PER_WALK + 37)
    batched = BatchIdentifier(identifier)
    assert batched.batched
    assert batched.classify_many(texts) == [identifier.classify(text) for text in texts]
    assert batched.classify_many(texts[:1]) == [identifier.classify(texts[0])]
    assert batched.classify_many([]) == []


def test_an_identifier_it_cannot_batch_is_asked_one_text_at_a_time():
    confident_only = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True, min_confidence=0.99)
    texts = _pieces(60, seed=3)
    batched = BatchIdentifier(confident_only)
    assert not batched.batched
    answers = batched.classify_many(texts)
    assert answers == [confident_only.classify(text) for text in texts]
    assert ("und", answers[EDGES.index("A")][1]) == answers[EDGES.index("A")]  # py3langid's own abstention


def test_a_files_chunks_take_their_own_language_or_else_the_one_most_of_its_text_is_in():
    english, french = PASSAGES[0] * 3, PASSAGES[1]  # more of the file's letters are English
    figures = "1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 | 9 | 10 | 11 | 12 | 13"
    assert text_search_configs([figures, english, "Table 3", french]) == ["english", "english", "english", "french"]
    assert text_search_configs(["Table 3", french]) == ["french", "french"]
