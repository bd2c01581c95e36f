"""Answer rewards: counting, choice, numeric, math (with math_verify's argument order)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from math_verify import parse, verify

from vlrollout.rewards.answer import (
    ChoiceReward,
    CountReward,
    MathReward,
    NumericReward,
    clevr_count_reward,
    geometry3k_reward,
    parse_count,
    parse_number,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[4]", 4),  # AReaL's CLEVR format
        ("I count [ 3 ] cubes, not [5]", 5),  # last bracket wins
        ("There are three spheres", 3),  # number word
        ("first 2 then 6", 6),  # last integer
        ("7.0", 7),  # integral decimal
        ("2.5 cubes", None),  # not a count
        ("Seventeen", 17),
        ("none here", None),
        ("twenty-one", 21),  # not "one": gold 1 must not score
        ("Twenty one cubes", 21),
        ("1,000", 1000),  # not "000": gold 0 must not score
        ("about 12,345 grains.", 12345),
        ("-3", -3),  # the sign counts: gold 3 must not score
        ("\u22123", -3),  # Unicode minus
        ("3, 4, and 5.", 5),
        ("someone saw ones", None),
        # A scale word makes one number of the phrase: never its last word alone.
        ("one hundred", 100),
        ("One thousand birds", 1000),
        ("twelve hundred", 1200),
        ("one hundred and five", 105),
        ("two thousand three hundred and forty-five", 2345),
        ("one hundred and twenty one", 121),
        ("3 hundred", 300),
        ("a hundred", None),  # no number word to scale: unread, never 1
        ("I see five. A hundred more are hidden", 5),
        ("five and one hundred", 100),
    ],
)
def test_parse_count(text, expected):
    assert parse_count(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x = 1,234.5", 1234.5),
        ("-3/4", -0.75),
        ("1e-3 and 2", 2.0),
        ("3.", 3.0),
        ("1/0", None),
        # Arabic-Indic digits with the Arabic decimal and thousands signs, not their last digit
        ("\u0663\u066b\u0665", 3.5),
        ("\u0661\u066c\u0662\u0663\u0664", 1234),
        # dots that group thousands (two groups or more: no decimal has two points), not ".000"
        ("1.000.000", 1_000_000),
        ("x = 12.500.000 m", 12_500_000),
        ("1.000", 1.0),  # one group is a decimal point, as in English
    ],
)
def test_parse_number(text, expected):
    assert parse_number(text) == expected


def test_count_reward_exact_tolerance_and_reasons():
    r = CountReward()
    assert r("p", "<answer>[3]</answer>", [], [], answer="3") == 1.0
    assert r("p", "<answer>three</answer>", [], [], answer="3.0") == 1.0  # AReaL: "3" != "3.0"
    assert r("p", "<answer>4</answer>", [], [], answer=3) == 0.0
    assert CountReward(tolerance=1)("p", "<answer>4</answer>", [], [], answer=3) == 1.0
    none = r.score("p", "<answer>many</answer>", [], [], answer="3")
    assert (none.value, none.reason) == (0.0, "no_number")
    with pytest.raises(ValueError, match="not a count"):
        r("p", "3", [], [], answer="lots")


@pytest.mark.parametrize(
    ("text", "gold"), [("twenty-one", 1), ("twenty one", 1), ("1,000", 0), ("-3", 3), ("+-3", 3)]
)
def test_count_false_positives_score_zero(text, gold):
    assert CountReward()("p", f"<answer>{text}</answer>", [], [], answer=gold) == 0.0


def test_count_with_thousands_of_digits_is_a_reason_not_an_exception():
    r = CountReward().score("p", "<answer>" + "7" * 4301 + "</answer>", [], [], answer=3)
    assert (r.value, r.reason) == (0.0, "number_too_long")


def test_clevr_count_reward_accepts_what_areal_rejects():
    from areal.reward.clevr_count_70k import clevr_count_70k_reward_fn

    text = "There are 3 objects."
    assert clevr_count_70k_reward_fn("p", text, [], [], answer="3") == 0.0  # needs "[3]"
    assert clevr_count_reward("p", text, [], [], answer="3") == 1.0


def test_choice_reward():
    r = ChoiceReward()
    assert r("p", "<answer>B</answer>", [], [], answer="B") == 1.0
    assert r("p", "The answer is (c).", [], [], answer="C") == 1.0  # lower-case after "answer is"
    assert r("p", "Answer: D", [], [], answer=3) == 1.0  # 0-based index 3 -> D
    # the article after "the answer is" is not choice A
    article = r.score("p", "The answer is a blue car.", [], [], answer="A")
    assert (article.value, article.reason) == (0.0, "no_choice")
    assert r("p", "The answer is a blue car, so (B).", [], [], answer="B") == 1.0
    assert r("p", "(A) looks wrong", [], [], answer="B") == 0.0
    amb = r.score("p", "either (A) or (B)", [], [], answer="A")
    assert (amb.value, amb.reason) == (0.0, "ambiguous_choice")
    # with two choices, "(C)" is not a valid letter
    none = r.score("p", "(C)", [], [], answer="A", choices=["cat", "dog"])
    assert none.reason == "no_choice"
    assert r("p", "(B)", [], [], answer="dog", choices=["cat", "dog"]) == 1.0


def test_numeric_reward():
    r = NumericReward(rel_tol=0.01)
    assert r("p", "<answer>about 99.5 m</answer>", [], [], answer="100") == 1.0  # |0.5| <= 1
    assert r("p", "<answer>98.9</answer>", [], [], answer=100) == 0.0
    assert NumericReward(abs_tol=0.5)("p", "3/4", [], [], answer="1.2") == 1.0  # |0.45| <= 0.5
    assert r.score("p", "<answer>?</answer>", [], [], answer="1").reason == "no_number"


def test_math_verify_is_not_symmetric_and_we_pass_gold_first():
    gold, pred = parse("$x \\le 1$"), parse("$(-\\infty, 1]$")
    assert verify(gold, pred) is True
    assert verify(pred, gold) is False  # reversed arguments reject a correct answer
    r = MathReward()
    assert r("p", "\\boxed{(-\\infty, 1]}", [], [], answer="x \\le 1") == 1.0


def test_math_reward_values_and_reasons():
    r = MathReward()
    assert r("p", "so \\boxed{\\frac{1}{2}}", [], [], answer="0.5") == 1.0
    assert r("p", "<answer>2\\sqrt{2}</answer>", [], [], answer="\\sqrt{8}") == 1.0
    assert r("p", "\\boxed{3}", [], [], answer="4") == 0.0
    bad = r.score("p", "<answer>no idea</answer>", [], [], answer="4")
    assert (bad.value, bad.reason) == (0.0, "unparseable_answer")


def test_geometry3k_reads_boxed_not_brackets():
    from areal.reward.geometry3k import geometry3k_reward_fn

    text = "Using the cube root \\sqrt[3]{8} we get \\boxed{2}"
    assert geometry3k_reward("p", text, [], [], answer="2") == 1.0
    # AReaL's reader takes the last "[...]" ("3") from \sqrt[3]{8} and misses the boxed answer
    assert geometry3k_reward_fn("p", text, [], [], answer="2") == 0.0
    r = geometry3k_reward.__globals__["_GEOMETRY3K"]
    missing = r.score("p", "the answer is 2", [], [], answer="2")
    assert (missing.value, missing.reason) == (0.0, "no_boxed")


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=120))
def test_answer_rewards_never_raise_on_model_text(text):
    for reward, gold in [(CountReward(), "3"), (ChoiceReward(), "B"), (NumericReward(), "2.5")]:
        result = reward.score("p", text, [], [], answer=gold)
        assert result.value in (0.0, 1.0)
        assert result.value == 1.0 or result.reason is not None or "pred" in result.details


def test_numeric_reads_the_unicode_minus_sign_as_count_does():
    from vlrollout.rewards.answer import NumericReward, parse_number

    assert parse_number("The temperature is \u22123 \u00b0C") == -3.0
    assert parse_number("x = \u22123/4") == -0.75
    assert NumericReward().score("p", "It is \u22123.5", [], [], answer="-3.5").value == 1.0


@pytest.mark.parametrize("answer", [5, -1, 30, "F"])
def test_a_gold_choice_outside_the_choices_is_refused_naming_it(answer):
    from vlrollout.rewards.answer import ChoiceReward

    with pytest.raises(ValueError, match=r"task_data\['answer'\]=.*3 choices"):
        ChoiceReward().score("p", "B", [], [], answer=answer, choices=["x", "y", "z"])


def test_choice_golds_and_choices_from_numpy_columns():
    import numpy as np

    from vlrollout.rewards.answer import ChoiceReward

    choices = np.array(["x", "y", "z"])
    for answer in (np.int64(1), "B", "y"):
        assert ChoiceReward().score("p", "B", [], [], answer=answer, choices=choices).value == 1.0


@pytest.mark.parametrize("answer", [["3", "4"], True, {"count": 3}, None])
def test_a_count_gold_that_is_not_one_count_is_refused(answer):
    from vlrollout.rewards.answer import CountReward

    with pytest.raises((ValueError, KeyError), match="answer"):
        CountReward().score("p", "<answer>4</answer>", [], [], answer=answer)


@pytest.mark.parametrize(
    ("text", "pred"),
    [
        ("Answer: I think it is C.", None),  # no choice written in a form the rules read
        ("The answer is A dog, so (B).", "B"),
        ("Answer: B because it is blue.", "B"),
        ("Answer: I", "I"),
    ],
)
def test_the_words_a_and_i_after_answer_are_not_read_as_choices(text, pred):
    from vlrollout.rewards.answer import ChoiceReward

    result = ChoiceReward(use_answer_tag=False).score("p", text, [], [], answer="I")
    assert (result.details or {}).get("pred") == pred, result
    assert result.reason == (None if pred else "no_choice")


@pytest.mark.parametrize(
    ("text", "pred", "reason"),
    [
        (r"So the answer is \boxed{B}.", "B", None),
        (r"\boxed{(C)}", "C", None),
        ("The correct option is B.", "B", None),
        ("Option B", "B", None),
        ("B\n\nExplanation: the second one is blue.", "B", None),
        ("Option C or option B.", None, "ambiguous_choice"),
        ("A dog is the answer.", None, "no_choice"),  # an article, not choice A
        ("**B**", "B", None),  # Markdown emphasis, as instruct models write it
        ("The answer is **B**.", "B", None),
        ("Answer: **B**", "B", None),
        ("**B. dog**", "B", None),
        ("Answer：B", "B", None),  # a full-width colon
        ("Ｂ", "B", None),  # a full-width letter
        # An answer on the first line goes before an option named in the explanation after it.
        ("B\n\n(C) is incorrect because it is red.", "B", None),
        ("B. b\n(A) a is another colour.", "B", None),
        ("B) b. Not (A).", "B", None),
    ],
)
def test_common_ways_of_giving_a_choice_are_read(text, pred, reason):
    from vlrollout.rewards.answer import ChoiceReward

    result = ChoiceReward(use_answer_tag=False).score(
        "p", text, [], [], answer="B", choices=["a", "b", "c", "d"]
    )
    assert (result.details.get("pred"), result.reason) == (pred, reason), result


def test_the_choice_reward_reads_a_digit_string_gold_as_eval_does():
    """AI2D's "1" is B; digits that are also another choice's text are refused, as by eval."""
    from vlrollout.eval.tasks import get_task
    from vlrollout.rewards.answer import ChoiceReward

    item = {"id": "a", "question": "?", "images": ["i.png"]}
    words = {"answer": "1", "choices": ["red", "blue"]}
    assert ChoiceReward().score("p", "B", [], [], **words).value == 1.0
    assert get_task("mc").score({**item, **words}, "B", [], "qwen2_vl").values["exact_match"] == 1.0
    clash = {"answer": "1", "choices": ["1", "2"]}
    with pytest.raises(ValueError, match="both"):
        ChoiceReward().score("p", "A", [], [], **clash)
    assert get_task("mc").check_item({**item, **clash}) is not None


def test_a_choice_text_answer_without_choices_names_the_missing_field():
    with pytest.raises(ValueError, match=r"task_data\['choices'\] is missing"):
        ChoiceReward()("p", "B", [], [], answer="blue")


@pytest.mark.parametrize(
    ("choices", "says"),
    [(["only"], "2 to 26"), (["same", "same"], "both 'same'")],
)
def test_choices_eval_refuses_are_refused_by_the_reward_too(choices, says):
    """``vlrollout eval --task mc`` refuses these items; the training reward scored them."""
    from vlrollout.rewards.answer import ChoiceReward

    with pytest.raises(ValueError, match=says):
        ChoiceReward().score("p", "A", [], [], answer="A", choices=choices)


@pytest.mark.parametrize("minus", ["\u2212", "\uff0d"], ids=["minus-sign", "full-width"])
def test_a_unicode_minus_makes_a_number_negative(minus):
    from vlrollout.rewards.answer import CountReward, NumericReward

    assert NumericReward().score("p", f"{minus}3", [], [], answer=-3).value == 1.0
    assert CountReward().score("p", f"{minus}\uff13", [], [], answer=3).details["pred"] == -3


CAPITALS = ["London", "Paris", "Rome", "Berlin"]


@pytest.mark.parametrize(
    ("completion", "answer", "value"),
    [
        ("The answer is Paris.", "B", 1.0),  # the option's text, not its letter
        ("Paris", "B", 1.0),
        ("rome", "B", 0.0),
        ("B", "paris", 1.0),  # a gold given as the option's text, in other case
        ("B", " Paris ", 1.0),
    ],
)
def test_the_choice_reward_reads_option_text_as_eval_mc_does(completion, answer, value):
    """A model answering with the option's text is scored as ``vlrollout eval --task mc`` scores
    it: training must not penalise what the evaluator counts as correct."""
    from vlrollout.eval.tasks import get_task

    item = {"id": "x", "question": "Capital of France?", "choices": CAPITALS, "answer": answer}
    evaluated = get_task("mc").score(item, completion, [], "qwen2_vl").values["exact_match"]
    rewarded = ChoiceReward().score("p", completion, [], [], answer=answer, choices=CAPITALS)
    assert rewarded.value == evaluated == value


@pytest.mark.parametrize("choices", ["Paris, Rome", {"A": "Paris", "B": "Rome"}, 3])
def test_choices_that_are_not_a_list_are_refused_naming_the_field(choices):
    """A string would be read one option per character (letter F of "Paris, Rome")."""
    with pytest.raises(ValueError, match=r"task_data\['choices'\]"):
        ChoiceReward().score("p", "F", [], [], answer="F", choices=choices)


def test_a_one_letter_gold_that_is_another_choices_text_is_refused():
    """As eval refuses it: "a" among the, a, an is letter A and the text of choice B."""
    with pytest.raises(ValueError, match="both the letter of choice A and the text of choice B"):
        ChoiceReward().score("p", "B", [], [], answer="a", choices=["the", "a", "an"])
    letters = ["A", "B", "C"]  # choices that are their own letters name themselves
    assert ChoiceReward().score("p", "B", [], [], answer="B", choices=letters).value == 1.0


def test_a_negative_gold_count_is_refused():
    from vlrollout.rewards.answer import CountReward

    for gold in (-1, "-2"):
        with pytest.raises(ValueError, match="a count is 0 or more"):
            CountReward().score("p", "-1", [], [], answer=gold)


def test_the_last_number_decides_even_when_it_is_no_count_or_no_finite_number():
    """An earlier integer is not the answer: "2 cubes; the total is 2.5" scored 1.0 against 2,
    and "5 or 1e400" 1.0 against 5."""
    from vlrollout.rewards.answer import CountReward, NumericReward

    counted = CountReward().score("p", "There are 2 red cubes; the total is 2.5", [], [], answer=2)
    assert (counted.value, counted.reason) == (0.0, "not_a_count")
    assert NumericReward().score("p", "5 or 1e400", [], [], answer=5).value == 0.0
    assert CountReward().score("p", "3 cubes, the answer is 3.0", [], [], answer=3).value == 1.0


def test_a_gold_past_a_floats_range_is_refused_naming_the_field():
    """10**400 raised OverflowError out of the reward, not a ValueError naming the field."""
    from vlrollout.rewards.answer import NumericReward

    with pytest.raises(ValueError, match=r"task_data\['answer'\]=1000.* is not a finite number"):
        NumericReward().score("p", "5", [], [], answer=10**400)


@pytest.mark.parametrize("answer", [["2"], {"value": 2}, True])
def test_a_math_gold_that_is_not_one_answer_is_refused(answer):
    """["2"] was scored as the text "['2']" and matched a completion of 2."""
    from vlrollout.rewards.answer import MathReward

    with pytest.raises(ValueError, match=r"task_data\['answer'\]=.* give the answer as one"):
        MathReward().score("p", "\\boxed{2}", [], [], answer=answer)


def test_a_dash_joined_to_a_word_is_no_minus_sign():
    """ "from 3-4" read -4 and scored 1.0 against a gold of -4."""
    from vlrollout.rewards.answer import NumericReward, parse_number

    assert parse_number("from 3-4") == 4.0 and parse_number("x-4") == 4.0
    assert parse_number("it is -4") == -4.0 and parse_number("(-4)") == -4.0
    assert NumericReward().score("p", "from 3-4", [], [], answer=-4).value == 0.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"\frac{3}{4}", 0.75),  # never the denominator
        (r"-\dfrac{3}{4}", -0.75),
        ("1.5×10^3", 1500.0),  # never the exponent
        (r"1.5 \times 10^{3}", 1500.0),
        ("2.5 * 10^-2", 0.025),
        ("2^{10}", 1024.0),  # a power of numbers is its value
        ("5 m^2", 5.0),  # an exponent on a unit is not the answer
        ("x^{2} = 9, so x = 3", 3.0),
        ("９^{９９９９}", None),  # past a float: no number, not the exponent
    ],
)
def test_latex_fractions_powers_and_scientific_notation_read_as_one_number(text, expected):
    """A reward that reads the exponent or the denominator as "the last number" pays a policy
    for a wrong answer written in LaTeX."""
    assert parse_number(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("１，２３４", 1234),  # full-width digits grouped by a full-width comma
        ("1\u00a0000 ants", 1000),  # no-break space
        ("1\u202f000\u202f000", 1_000_000),  # narrow no-break space (SI grouping)
        ("1\u2009234", 1234),  # thin space
        ("1\u00a02345", 2345),  # not a group of three: two numbers
    ],
)
def test_thousands_grouped_by_full_width_commas_and_no_break_spaces(text, expected):
    assert parse_number(text) == expected
    assert parse_count(text) == expected


@pytest.mark.parametrize(
    ("completion", "pred"),
    [
        (r"\boxed{\text{B}}", "B"),
        (r"\boxed{\textbf{(C)}}", "C"),
        ("(b)", "B"),
        ("b", "B"),
        ("The answer is b", "B"),
        ("The answer is c.", "C"),
        ("Option b", "B"),
        ("the answer is a blue car", None),  # an article, not choice A
        ("Option a is wrong", None),
    ],
)
def test_lower_case_and_latex_text_letters_are_read(completion, pred):
    result = ChoiceReward().score("p", completion, [], [], answer="B", choices=CAPITALS)
    assert (result.details or {}).get("pred") == pred
    assert result.value == (1.0 if pred == "B" else 0.0)


def test_a_lower_case_letter_that_is_a_choices_text_is_that_text():
    """Among the, a, an the answer "a" is the option "a" (B), not the letter A."""
    result = ChoiceReward().score("p", "a", [], [], answer=1, choices=["the", "a", "an"])
    assert (result.value, (result.details or {}).get("pred")) == (1.0, "B")


def test_an_answer_equal_to_a_choice_picks_it_when_normalised_texts_clash():
    from vlrollout.rewards.vqa_answers import match_choice_text

    assert match_choice_text("Paris", ["Paris", "paris."]) == 0
    assert match_choice_text("paris.", ["Paris", "paris."]) == 1
    assert match_choice_text("PARIS", ["Paris", "paris."]) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3/4", (None, "not_a_count")),  # a fraction, never its denominator
        (r"\frac{6}{2}", (None, "not_a_count")),
        ("2^{10}", (None, "not_a_count")),  # a power, never its exponent
        ("1.5×10^3", (None, "no_number")),  # 1.5e3: no whole number in it
        ("5 m^2", (5, None)),  # an exponent on a unit is not the count
        ("I count 7 cubes", (7, None)),
    ],
)
def test_the_count_reader_never_reads_a_denominator_or_an_exponent(text, expected):
    from vlrollout.rewards.answer import read_count

    assert read_count(text) == expected


@pytest.mark.parametrize(
    ("choices", "completion", "letters"),
    [(["Cat", "cat", "bird"], "CAT", ["A", "B"]), (["the cat", "cat", "bird"], "Cat.", ["A", "B"])],
)
def test_a_text_naming_two_options_alike_once_normalised_is_ambiguous(choices, completion, letters):
    result = ChoiceReward().score("p", completion, [], [], answer="B", choices=choices)
    assert (result.value, result.reason, result.details) == (
        0.0,
        "ambiguous_choice",
        {"letters": letters},
    )


@pytest.mark.parametrize(
    ("gold", "count"),
    [("twenty-one", 21), ("one hundred and five", 105), ("Twenty one", 21), (2**53 + 1, 2**53 + 1)],
)
def test_a_count_gold_in_compound_words_or_past_float_precision_is_read(gold, count):
    from vlrollout.rewards.answer import count_gold

    assert count_gold(gold) == count


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("numeric", {"rel_tol": float("nan")}),
        ("numeric", {"abs_tol": float("inf")}),
        ("numeric", {"rel_tol": "x"}),
        ("numeric", {"abs_tol": True}),
        ("count", {"tolerance": "1"}),
        ("count", {"tolerance": float("nan")}),
        ("count", {"tolerance": -1}),
    ],
)
def test_a_tolerance_that_is_not_a_finite_number_at_least_zero_is_refused(name, options):
    """NaN had been accepted (every answer then scored 0); a string failed at the first score."""
    from vlrollout.rewards import get_reward

    (option,) = options
    with pytest.raises(ValueError, match=option):
        get_reward(name, **options)
