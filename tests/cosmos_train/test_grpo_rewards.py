"""GRPO rewards (`cosmos_train.rewards`): the text rewards, the built-in registry behind `build_rewards`,
reward names, user rewards by import path, and the checks that stop a run on a reward that raises or
returns NaN. Everything runs on CPU in-process, with TRL's reward calling convention."""

import asyncio
import math
import sys

import pytest
from trl.trainer.utils import is_async_callable

from cosmos_train.rewards import (
    BUILTINS,
    RewardError,
    RewardSpec,
    build_rewards,
    check_reward,
    check_reward_name,
    checked,
)
from cosmos_train.rewards.text import (
    completion_text,
    exact_match_reward,
    format_reward,
    length_reward,
    single_choice_reward,
)

USER_MODULE = "grpo_user_rewards"
USER_REWARDS = """
import math


def text(completion):
    return completion if isinstance(completion, str) else completion[-1]["content"]


def brevity(completions, *, limit=3, **kwargs):
    return [1.0 if len(c.split()) <= limit else 0.0 for c in completions]


async def async_brevity(completions, *, limit=3, **kwargs):
    return [1.0 if len(c.split()) <= limit else 0.0 for c in completions]


def explode(completions, **kwargs):
    if any("boom" in text(c) for c in completions):
        raise ValueError("cannot score this")
    return [1.0] * len(completions)


async def async_explode(completions, **kwargs):
    if any("boom" in text(c) for c in completions):
        raise ValueError("cannot score this")
    return [1.0] * len(completions)


def bad_solution(completions, solution, **kwargs):
    if "bad" in solution:
        raise KeyError("bad reference")
    return [0.0] * len(completions)


def batch_only(completions, **kwargs):
    if len(completions) > 1:
        raise RuntimeError("batch too large")
    return [0.0]


def nan_on_two(completions, **kwargs):
    return [math.nan if "two" in text(c) else 1.0 for c in completions]


async def async_nan_on_two(completions, **kwargs):
    return [math.nan if "two" in text(c) else 1.0 for c in completions]


def some_none(completions, **kwargs):
    return [None if "skip" in c else 0.5 for c in completions]


def scalar(completions, **kwargs):
    return 1.0


def as_tuple(completions, **kwargs):
    return tuple(0.25 for _ in completions)


def words(completions, **kwargs):
    return ["high" if "two" in c else 1.0 for c in completions]


not_callable = 3
"""


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


PLAIN_OR_CHAT = pytest.mark.parametrize("shape", [str, chat], ids=["plain", "chat"])


def call(reward, completions, **columns):
    """Call `reward` as TRL's GRPOTrainer does: prompts, completions, completion_ids, then dataset columns."""
    columns.setdefault("completion_ids", [[1, 2, 3]] * len(completions))
    return reward(prompts=["question"] * len(completions), completions=completions, **columns)


def build_one(name: str, train: dict | None = None, **parameters):
    (reward,) = build_rewards([RewardSpec(name, 1.0, parameters)], train=train)
    return reward


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """The module name of USER_REWARDS, importable from a temporary folder for this test only."""
    (tmp_path / f"{USER_MODULE}.py").write_text(USER_REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(USER_MODULE, None)
    yield USER_MODULE
    sys.modules.pop(USER_MODULE, None)


# --- text rewards ------------------------------------------------------------------------------------------


@PLAIN_OR_CHAT
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>why</think><answer>42</answer>", 1.0),
        ("  \n<think>multi\nline</think>\n\n<answer> 42 </answer>\n ", 1.0),
        ("<answer>42</answer>", 0.0),  # no reasoning
        ("<answer>42</answer><think>why</think>", 0.0),  # wrong order
        ("Sure! <think>why</think><answer>42</answer>", 0.0),  # text before
        ("<think>why</think><answer>42</answer> Done.", 0.0),  # text after
        ("<think>why</think> so <answer>42</answer>", 0.0),  # text between
        ("<think>why</think><answer>42", 0.0),  # unclosed
    ],
)
def test_format_reward_default_tags(shape, text, expected):
    assert format_reward([shape(text)]) == [expected]


@PLAIN_OR_CHAT
def test_format_reward_custom_tags(shape):
    completions = [
        shape("<reasoning>r</reasoning>\n<final>B</final>"),
        shape("<think>r</think><answer>B</answer>"),  # the default tags no longer count
        shape("<reasoning>r</reasoning><answer>B</answer>"),
    ]
    assert format_reward(completions, think_tag="reasoning", answer_tag="final") == [1.0, 0.0, 0.0]


@PLAIN_OR_CHAT
def test_format_reward_empty_think_tag_wants_the_answer_only(shape):
    completions = [
        shape(" <answer>42</answer> "),
        shape("<think>why</think><answer>42</answer>"),
        shape("42"),
    ]
    assert format_reward(completions, think_tag="") == [1.0, 0.0, 0.0]


def test_completion_text_reads_plain_chat_and_typed_parts():
    assert completion_text("plain") == "plain"
    assert completion_text([{"role": "user", "content": "q"}, *chat("last")]) == "last"
    parts = [{"type": "text", "text": "<answer>"}, {"type": "image"}, {"type": "text", "text": "B</answer>"}]
    assert completion_text([{"role": "assistant", "content": parts}]) == "<answer>B</answer>"
    assert completion_text([]) == ""


@PLAIN_OR_CHAT
@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("B", 1.0),
        ("(B)", 1.0),
        ("B. because it is", 1.0),
        ("B) Paris", 1.0),
        ("b", 1.0),
        (" B ", 1.0),
        ("C", 0.0),
        ("(C) not B", 0.0),
        ("Because", 0.0),  # a word, not an option letter
        ("", 0.0),
    ],
)
def test_single_choice_reward_reads_the_letter_in_the_answer_tag(shape, answer, expected):
    completion = shape(f"<think>A or B?</think><answer>{answer}</answer>")
    assert single_choice_reward([completion], solution=["B"]) == [expected]


@PLAIN_OR_CHAT
def test_single_choice_reward_ignores_letters_outside_the_tag(shape):
    completions = [shape("B"), shape("A <answer>C</answer>"), shape("A <answer>C</answer>")]
    assert single_choice_reward(completions, solution=["B", "A", "c"]) == [0.0, 0.0, 1.0]


def test_single_choice_reward_reference_forms_and_non_letter_reference():
    completions = ["<answer>B</answer>"] * 4
    assert single_choice_reward(completions, solution=["(B)", "b", "B. Paris", "42"]) == [1.0, 1.0, 1.0, None]


def test_single_choice_reward_custom_tag():
    completions = ["<final>(D)</final>", "<answer>D</answer>"]
    assert single_choice_reward(completions, solution=["D", "D"], answer_tag="final") == [1.0, 0.0]


@PLAIN_OR_CHAT
def test_exact_match_reward_ignores_case_spacing_and_final_period(shape):
    completions = [shape("  Paris. "), shape("New   York"), shape("Paris, France"), shape("paris")]
    solution = ["paris", "new york", "Paris", "Paris."]
    assert exact_match_reward(completions, solution=solution) == [1.0, 1.0, 0.0, 1.0]


@PLAIN_OR_CHAT
def test_exact_match_reward_with_answer_tag(shape):
    completions = [
        shape("<think>capital?</think><answer> PARIS </answer>"),
        shape("paris"),  # right text, but no answer tag
        shape("<answer>Lyon</answer>"),
    ]
    assert exact_match_reward(completions, solution=["Paris"] * 3, answer_tag="answer") == [1.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("words", "expected"),
    [(0, 1.0), (7, 1.0), (10, 1.0), (11, 0.9), (15, 0.5), (20, 0.0), (35, 0.0)],
)
def test_length_reward_falls_linearly_to_zero_at_twice_max_words(words, expected):
    text = " ".join(["word"] * words)
    assert length_reward([text, chat(text)], max_words=10) == pytest.approx([expected, expected])


# --- the built-in registry -------------------------------------------------------------------------------

REQUIRED_PARAMETERS = {
    "cosine": {"max_len": 8},
    "overlong": {"soft_punish_cache": 2},
    "length": {"max_words": 5},
}


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_every_builtin_builds_and_scores_plain_text(name):
    reward = build_one(name, train={"max_completion_length": 16}, **REQUIRED_PARAMETERS.get(name, {}))
    assert reward.__name__ == name
    completions = ["<think>easy</think><answer>42</answer>", r"<think>sum</think>\boxed{42}", "B"]
    ids = [[1, 2, 3], [4] * 20, [5, 5, 5, 5, 5, 5]]
    values = call(reward, completions, completion_ids=ids, solution=["42", "42", "B"])
    assert isinstance(values, list)
    assert len(values) == len(completions)
    assert all(v is None or (isinstance(v, float | int) and not math.isnan(v)) for v in values)


@PLAIN_OR_CHAT
def test_accuracy_scores_boxed_and_inline_math_answers(shape):
    reward = build_one("accuracy")
    completions = [
        shape(r"The sum is \boxed{42}."),
        shape(r"The sum is \boxed{41}."),
        shape(r"Half: \boxed{\frac{1}{2}}"),  # equal as numbers
        shape("The answer is $42$."),
        shape("The answer is 42"),  # math-verify wants LaTeX (boxed or $...$)
    ]
    values = call(reward, completions, solution=["42", "42", "0.5", "42", "42"])
    assert values == [1.0, 0.0, 1.0, 1.0, 0.0]


def test_format_builtin_passes_its_parameters():
    reward = build_one("format", think_tag="reasoning", answer_tag="final")
    completions = ["<reasoning>r</reasoning><final>B</final>", "<think>r</think><answer>B</answer>"]
    assert call(reward, completions) == [1.0, 0.0]
    assert call(build_one("format", think_tag=""), ["<answer>B</answer>"]) == [1.0]


def test_single_choice_and_exact_match_builtins_read_the_solution_column():
    completions = ["<answer>(B)</answer>", chat("<answer>C</answer>")]
    assert call(build_one("single_choice"), completions, solution=["B", "B"]) == [1.0, 0.0]
    completions = ["<answer>Paris.</answer>", chat("<answer>paris</answer>")]
    exact = build_one("exact_match", answer_tag="answer")
    assert call(exact, completions, solution=["paris", "Lyon"]) == [1.0, 0.0]


def test_overlong_takes_max_completion_len_from_train():
    reward = build_one("overlong", train={"max_completion_length": 10}, soft_punish_cache=4)
    ids = [[0] * 5, [0] * 6, [0] * 8, [0] * 10, [0] * 11]
    assert call(reward, ["x"] * 5, completion_ids=ids) == pytest.approx([0.0, 0.0, -0.5, -1.0, -1.0])


def test_overlong_parameter_wins_over_train():
    reward = build_one(
        "overlong", train={"max_completion_length": 10}, max_completion_len=20, soft_punish_cache=4
    )
    assert call(reward, ["x", "x"], completion_ids=[[0] * 11, [0] * 18]) == pytest.approx([0.0, -0.5])


def test_overlong_without_train_length_names_the_missing_parameter():
    with pytest.raises(RewardError, match="max_completion_len"):
        build_one("overlong", soft_punish_cache=4)


def test_repetition_builtin_passes_factory_parameters():
    ids = [[1, 2, 3, 4], [5, 5, 5, 5, 5]]
    assert call(build_one("repetition", ngram_size=2), ["a", "b"], completion_ids=ids) == [0.0, -0.75]
    half = build_one("repetition", ngram_size=2, max_penalty=-0.5)
    assert call(half, ["a", "b"], completion_ids=ids) == [0.0, -0.375]


@pytest.mark.parametrize(
    ("name", "parameters", "accepted"),
    [
        ("format", {"think": "x"}, "think_tag, answer_tag"),
        ("length", {"max_words": 5, "min_words": 1}, "max_words"),
        ("cosine", {"max_length": 8}, "max_len, min_value_wrong, max_value_wrong"),
        ("accuracy", {"timeout": 5}, "none"),
    ],
)
def test_unknown_builtin_parameter_is_named_with_the_accepted_ones(name, parameters, accepted):
    unknown = next(key for key in parameters if key not in ("max_words",))
    with pytest.raises(RewardError) as raised:
        build_one(name, **parameters)
    message = str(raised.value)
    assert name in message
    assert f"unknown parameter '{unknown}'" in message
    assert f"it takes: {accepted}" in message


def test_missing_required_builtin_parameter_raises():
    with pytest.raises(RewardError, match=r"length: .*max_words"):
        build_one("length")


def test_remote_reward_takes_a_score_key_and_nothing_else():
    with pytest.raises(RewardError, match="remote rewards take weight and score_key only, not scale"):
        build_one("remote:pickscore", scale=2)
    with pytest.raises(RewardError, match="score_key must name a key of the service's answer"):
        build_one("remote:dance_grpo", score_key="vq_reward+")


# --- reward names -----------------------------------------------------------------------------------------


def test_unknown_reward_name_lists_every_builtin_on_one_line():
    with pytest.raises(ValueError) as raised:
        check_reward_name("accurracy")
    message = str(raised.value)
    assert "\n" not in message
    assert "'accurracy'" in message
    for name in BUILTINS:
        assert name in message


@pytest.mark.parametrize("name", [*BUILTINS, "pkg.mod:func", "mod:_private", "remote:pickscore"])
def test_valid_reward_names_pass(name):
    check_reward_name(name)


@pytest.mark.parametrize("name", ["remote:", "mod:1x", ":func", "pkg.mod:", "mod:a-b"])
def test_malformed_reward_names_are_rejected(name):
    with pytest.raises(ValueError) as raised:
        check_reward_name(name)
    assert "\n" not in str(raised.value)


def test_check_reward_checks_builtin_parameters_before_the_run():
    check_reward("format", {"think_tag": "reasoning", "answer_tag": "final"})
    check_reward("pkg.mod:func", {"anything": 1})  # a user function's parameters are its own business
    with pytest.raises(ValueError) as raised:
        check_reward("format", {"think": "x"})
    message = str(raised.value)
    assert "\n" not in message
    assert "unknown parameter 'think'" in message
    assert "think_tag, answer_tag" in message
    with pytest.raises(ValueError, match="unknown reward 'nope'"):
        check_reward("nope", {})


# --- rewards by import path -------------------------------------------------------------------------------


def test_import_path_reward_is_imported_and_gets_its_parameters(user_module):
    default, limited = build_rewards(
        [
            RewardSpec(f"{user_module}:brevity", 1.0, {}),
            RewardSpec(f"{user_module}:brevity", 0.2, {"limit": 1}),
        ]
    )
    completions = ["one", "one two", "one two three four"]
    assert call(default, completions) == [1.0, 1.0, 0.0]
    assert call(limited, completions) == [1.0, 0.0, 0.0]
    assert limited.__name__ == f"{user_module}:brevity"
    assert not is_async_callable(limited)


def test_async_import_path_reward_stays_async_with_parameters(user_module):
    (reward,) = build_rewards([RewardSpec(f"{user_module}:async_brevity", 1.0, {"limit": 1})])
    assert is_async_callable(reward)
    assert asyncio.run(call(reward, ["one", "one two"])) == [1.0, 0.0]


def test_import_path_reward_found_through_search_path(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", [*sys.path])  # build_rewards appends the search path for good
    module = "grpo_job_folder_rewards"
    (tmp_path / f"{module}.py").write_text(
        "def one(completions, **kwargs):\n    return [1.0] * len(completions)\n"
    )
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(RewardError, match=f"cannot import {module}"):
        build_rewards([RewardSpec(f"{module}:one", 1.0, {})])
    (reward,) = build_rewards([RewardSpec(f"{module}:one", 1.0, {})], search_path=tmp_path)
    assert call(reward, ["a", "b"]) == [1.0, 1.0]
    sys.modules.pop(module, None)


def test_missing_reward_module_is_named():
    with pytest.raises(
        RewardError, match=r"no_such_reward_module_xyz:score: cannot import no_such_reward_module_xyz"
    ):
        build_rewards([RewardSpec("no_such_reward_module_xyz:score", 1.0, {})])


@pytest.mark.parametrize(
    ("attribute", "reason"),
    [("nope", "{module} has no 'nope'"), ("not_callable", "is a \\w+, not a function")],
)
def test_missing_reward_function_is_named(user_module, attribute, reason):
    with pytest.raises(RewardError, match=f"{user_module}:{attribute}: " + reason.format(module=user_module)):
        build_rewards([RewardSpec(f"{user_module}:{attribute}", 1.0, {})])


# --- failures stop the run, naming the reward and the completion ------------------------------------------


def build_user(user_module: str, function: str):
    (reward,) = build_rewards([RewardSpec(f"{user_module}:{function}", 1.0, {})])
    return reward


def test_raising_reward_names_itself_and_the_completion(user_module):
    reward = build_user(user_module, "explode")
    completions = ["fine", "also fine", "this one goes boom", "fine again"]
    with pytest.raises(RewardError) as raised:
        call(reward, completions)
    message = str(raised.value)
    assert f"'{user_module}:explode'" in message
    assert "ValueError: cannot score this" in message
    assert "on completion 2: 'this one goes boom'" in message
    assert isinstance(raised.value.__cause__, ValueError)


def test_raising_reward_shows_a_chat_completion_truncated(user_module):
    reward = build_user(user_module, "explode")
    long = "boom " + "x" * 1000
    with pytest.raises(RewardError) as raised:
        call(reward, [chat("ok"), chat(long)])
    message = str(raised.value)
    assert "on completion 1: 'boom xxx" in message
    assert "x" * 300 not in message


def test_raising_reward_finds_the_sample_through_its_columns(user_module):
    reward = build_user(user_module, "bad_solution")
    with pytest.raises(RewardError, match=r"KeyError: 'bad reference' on completion 1: 'second'"):
        call(reward, ["first", "second", "third"], solution=["ok", "bad", "ok"])


def test_batch_level_failure_names_no_completion(user_module):
    reward = build_user(user_module, "batch_only")
    assert call(reward, ["alone"]) == [0.0]
    with pytest.raises(RewardError) as raised:
        call(reward, ["one", "two"])
    message = str(raised.value)
    assert f"reward '{user_module}:batch_only' raised RuntimeError: batch too large" in message
    assert "on completion" not in message


def test_nan_reward_names_itself_and_the_completion(user_module):
    reward = build_user(user_module, "nan_on_two")
    assert call(reward, ["one", "three"]) == [1.0, 1.0]
    with pytest.raises(RewardError) as raised:
        call(reward, ["one", chat("number two"), "three"])
    message = str(raised.value)
    assert f"reward '{user_module}:nan_on_two' returned nan for completion 1: 'number two'" in message


def test_non_number_value_is_rejected(user_module):
    with pytest.raises(RewardError, match=r"returned 'high' for completion 1: 'two'"):
        call(build_user(user_module, "words"), ["one", "two"])


def test_none_values_pass_through(user_module):
    values = call(build_user(user_module, "some_none"), ["a", "skip me", "b"])
    assert values == [0.5, None, 0.5]


def test_tuple_result_becomes_a_list(user_module):
    assert call(build_user(user_module, "as_tuple"), ["a", "b"]) == [0.25, 0.25]


def test_non_list_result_is_rejected(user_module):
    with pytest.raises(RewardError, match=rf"reward '{user_module}:scalar' returned float, expected a list"):
        call(build_user(user_module, "scalar"), ["a", "b"])


def test_async_raising_reward_names_itself_and_the_completion(user_module):
    reward = build_user(user_module, "async_explode")
    assert is_async_callable(reward)
    assert asyncio.run(call(reward, ["a", "b"])) == [1.0, 1.0]
    with pytest.raises(RewardError) as raised:
        asyncio.run(call(reward, ["fine", "boom here", "fine"]))
    message = str(raised.value)
    assert f"'{user_module}:async_explode'" in message
    assert "ValueError: cannot score this on completion 1: 'boom here'" in message


def test_async_nan_reward_names_itself_and_the_completion(user_module):
    reward = build_user(user_module, "async_nan_on_two")
    with pytest.raises(
        RewardError, match=rf"'{user_module}:async_nan_on_two' returned nan for completion 2: 'two'"
    ):
        asyncio.run(call(reward, ["one", "three", "two"]))


def test_checked_builtin_reward_failure_names_it():
    """A built-in fed the wrong columns still fails with its own name and the completion."""
    reward = checked(
        "my_reward", lambda completions, **_: [1.0 if c != "?" else math.nan for c in completions]
    )
    with pytest.raises(RewardError, match=r"'my_reward' returned nan for completion 0: '\?'"):
        call(reward, ["?"])
    with pytest.raises(RewardError, match=r"single_choice' raised TypeError"):
        call(build_one("single_choice"), ["<answer>B</answer>"])  # no solution column


def test_math_rewards_name_math_verify_when_it_is_missing(monkeypatch):
    from trl import import_utils

    monkeypatch.setattr(import_utils, "is_math_verify_available", lambda: False)
    for name in ("accuracy", "reasoning_accuracy", "cosine"):
        with pytest.raises(RewardError, match=r"needs math-verify: pip install 'cosmos-train\[math\]'"):
            build_rewards([RewardSpec(name, 1.0, {"max_len": 8} if name == "cosine" else {})])
