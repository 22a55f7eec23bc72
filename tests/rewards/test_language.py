"""_language: degenerate text (shuffled words, loops, non-words, cut-off replies) scores below fluent text."""
import random

from stateset_plugins.rewards._language import TextShape, content_words, known_word, relevance, tokenise, vocabulary

FLUENT = [
    "I have found your booking. The flight leaves at nine in the morning, and your seat is in the front of the cabin.",
    "Could you please tell me the order number? I will look it up and let you know what options we have.",
    "Thank you for waiting. Your package was handed to the courier this morning and should arrive on Friday.",
    "We can move the appointment to next week. Would you like the morning or the afternoon slot?",
]


def test_fluent_replies_score_one_on_every_fluency_check():
    for text in FLUENT:
        shape = TextShape(text)
        assert (shape.word_order, shape.repetition, shape.vocabulary, shape.complete) == (1.0, 1.0, 1.0, 1.0), text


def test_shuffled_words_break_the_function_word_grammar():
    rng = random.Random(7)
    for text in FLUENT:
        words = text.split()
        for _ in range(5):
            rng.shuffle(words)
            assert TextShape(" ".join(words)).word_order < 1.0, " ".join(words)


def test_a_capitalised_function_word_mid_sentence_and_a_lower_case_sentence_start_count():
    assert TextShape("Please send it to The office by Monday.").word_order < 1.0
    assert TextShape("It has shipped. the courier has it now.").word_order < 1.0
    # "I" is always capitalised, and a new line may start anything
    assert TextShape("Yes, I can do that.\n- the blue one\n- the red one").word_order == 1.0


def test_a_looped_sentence_and_a_looped_phrase_score_low_but_a_list_frame_does_not():
    looped = "I can help you with that. " * 5
    assert TextShape(looped).repetition < 0.5
    stutter = "please wait please wait please wait please wait please wait please wait"
    assert TextShape(stutter).repetition < 0.3
    listing = ("Flight 101 leaves at 8:00 and arrives at 11:00. Flight 205 leaves at 9:30 and arrives at 12:45. "
               "Flight 317 leaves at 14:00 and arrives at 17:10.")
    assert TextShape(listing).repetition == 1.0


def test_non_words_lower_the_vocabulary_score_and_names_or_ids_are_not_judged():
    gibberish = TextShape("What avah, haveenst. We don't have any issue finding the order")
    assert gibberish.vocabulary < 0.5
    names = TextShape("Thank you, Zoltan. Booking QX7781 for Ouagadougou is confirmed.")
    assert names.vocabulary == 1.0


def test_inflections_of_listed_words_are_known():
    for word in ("cancelled", "stopping", "bookings", "happily", "studied", "reservations"):
        assert known_word(word), word
    for word in ("haveenst", "avah", "qwzzk"):
        assert not known_word(word), word
    assert "the" in vocabulary() and len(vocabulary()) > 20_000


def test_a_reply_cut_after_a_function_word_is_incomplete():
    assert TextShape("Your refund will go to the").complete == 0.0
    assert TextShape("Your refund will go to your card").complete == 0.5
    assert TextShape("Your refund will go to your card.").complete == 1.0
    assert TextShape("Done! \U0001F600").complete == 1.0
    assert TextShape("").complete == 0.0


def test_tokenise_keeps_case_and_separating_punctuation():
    tokens, lowered = tokenise("Hi, I'm Ann. OK?")
    assert tokens == ["Hi", ",", "I", "m", "Ann", ".", "OK", "?"]
    assert lowered == ["hi", ",", "i", "m", "ann", ".", "ok", "?"]


def test_relevance_reads_topic_words_shared_with_the_request():
    request = tokenise("Where is my parcel with the blue lamp?")[1]
    assert relevance(tokenise("Your parcel with the lamp left the depot today and arrives soon.")[1], request) == 1.0
    assert relevance(tokenise("Our gym opens at six and the pool is heated all winter long.")[1], request) == 0.0
    assert relevance(tokenise("You're welcome!")[1], request) is None  # too short to judge
    assert "lamp" in content_words(request) and "the" not in content_words(request)
