"""GenEval-mini's domain and evaluator (`benchmarks/domains/geneval_mini`, imported as `domains.geneval_mini`):
GenEval's metadata format and templates, held-out splits, the evaluator's validation on ground-truth pictures,
GenEval's judging rules case by case, and the reward reached by `module:function` (it is no built-in) and through
the real reward service."""

from __future__ import annotations

import json

import numpy as np
import pytest
from domains.geneval_mini import (
    TASKS,
    Vocabulary,
    all_prompts,
    balanced_by_task,
    bootstrap_error,
    detect,
    evaluate,
    geneval_mini,
    judge,
    relative_position,
    render,
    split_prompts,
    task_scores,
    well_formed_shapes,
    write_metadata,
    write_pairs,
)
from domains.geneval_mini.domain import PlacedObject, draw
from domains.geneval_mini.teacher import FlawedTeacher

from cosmos_train.data import load_prompt_list
from cosmos_train.rewards import (
    MEDIA_BUILTINS,
    RewardSpec,
    build_media_rewards,
    check_reward,
    gen_eval,
    geneval_rules,
)

DEFAULT = Vocabulary()
# A vocabulary nothing was tuned on: other colours, two other shapes, a larger picture.
UNSEEN = Vocabulary(
    colors=("purple", "orange", "cyan", "brown"), shapes=("diamond", "cross", "circle"), size=48
)


def metadata_of(record: dict) -> dict:
    return {key: value for key, value in record.items() if key != "prompt"}


@pytest.mark.parametrize("vocabulary", [DEFAULT, UNSEEN], ids=["default", "unseen"])
def test_the_evaluator_passes_its_own_validation(vocabulary):
    """Ground-truth pictures score >= 0.98 on their own prompts (GenEval's overall: the mean of task means) and
    low on other prompts' pictures."""
    rng = np.random.default_rng(7)
    records = [r for r in all_prompts(vocabulary) for _ in range(3)]
    pictures = [render(r, vocabulary, rng) for r in records]
    tags = [r["tag"] for r in records]
    own = [
        evaluate(p, r, vocabulary.colors, vocabulary.shapes).correct
        for p, r in zip(pictures, records, strict=True)
    ]
    assert task_scores(own, tags)["overall"] >= 0.98
    # Another prompt of another task: the picture answers its own prompt, not this one.
    shift = {task: TASKS[(i + 1) % len(TASKS)] for i, task in enumerate(TASKS)}
    others = [
        next(q for q in records[k:] + records if q["tag"] == shift[r["tag"]]) for k, r in enumerate(records)
    ]
    foreign = [
        evaluate(p, o, vocabulary.colors, vocabulary.shapes).correct
        for p, o in zip(pictures, others, strict=True)
    ]
    assert task_scores(foreign, [o["tag"] for o in others])["overall"] <= 0.35


def test_prompts_are_geneval_records_in_its_templates(tmp_path):
    records = all_prompts(DEFAULT)
    prompts = {r["prompt"] for r in records}
    # GenEval's own wording, task by task.
    for expected in (
        "a photo of a circle",
        "a photo of a circle and a square",
        "a photo of three triangles",
        "a photo of a red square",
        "a photo of a circle left of a square",
        "a photo of a red circle and a blue square",
    ):
        assert expected in prompts
    by_prompt = {r["prompt"]: r for r in records}
    assert by_prompt["a photo of three triangles"] == {
        "tag": "counting",
        "include": [{"class": "triangle", "count": 3}],
        "exclude": [{"class": "triangle", "count": 4}],
        "prompt": "a photo of three triangles",
    }
    # "A left of B": B is the target, include[0]; A names it by index, as GenEval writes position prompts.
    assert by_prompt["a photo of a circle left of a square"]["include"] == [
        {"class": "square", "count": 1},
        {"class": "circle", "count": 1, "position": ["left of", 0]},
    ]
    assert {r["tag"] for r in records} == set(TASKS)
    # The prompt-list reader's GenEval validation accepts every record; metadata keeps everything but the prompt.
    path = write_metadata(tmp_path / "test_metadata.jsonl", records)

    class Data:
        format, split, skip_bad, max_prompts = "auto", "test", False, None

    Data.path = str(path)
    dataset, _ = load_prompt_list(Data)
    assert dataset.format == "geneval" and len(dataset) == len(records)
    assert dataset[5]["metadata"] == metadata_of(records[5])


def test_held_out_prompts_are_never_trained_on_and_the_split_is_seeded():
    train, test = split_prompts(DEFAULT, seed=0)
    assert split_prompts(DEFAULT, seed=0) == (train, test)
    assert split_prompts(DEFAULT, seed=1) != (train, test)
    trained = {r["prompt"] for r in train}
    for task in TASKS:
        held = [r for r in test if r["tag"] == task]
        assert held, task
        if len([r for r in all_prompts(DEFAULT) if r["tag"] == task]) >= 4:
            assert not {r["prompt"] for r in held} & trained, task


def test_training_gives_every_task_the_same_share_of_prompts():
    train, _ = split_prompts(DEFAULT, seed=0)
    counts = {task: sum(r["tag"] == task for r in train) for task in TASKS}
    assert counts["color_attr"] > sum(counts.values()) / 2  # why it is balanced
    balanced = balanced_by_task(train)
    assert {task: sum(r["tag"] == task for r in balanced) for task in TASKS} == dict.fromkeys(TASKS, 54)
    assert {r["prompt"] for r in balanced} == {r["prompt"] for r in train}
    singles = [r["prompt"] for r in balanced if r["tag"] == "single_object"]
    assert singles[:6] == [r["prompt"] for r in train if r["tag"] == "single_object"] * 2


def test_relative_position_is_genevals_rule():
    # The domain and its evaluator judge by the rules the `gen_eval` reward uses: one copy, in cosmos-train.
    assert relative_position is geneval_rules.relative_position and judge is geneval_rules.judge
    assert TASKS == geneval_rules.TASKS == gen_eval.TAGS
    box = (10, 10, 20, 20)
    assert relative_position((0, 10, 8, 20), box) == {"left of"}
    assert relative_position((22, 10, 30, 20), box) == {"right of"}
    assert relative_position((10, 0, 20, 8), box) == {"above"}  # image y grows downwards
    assert relative_position((10, 22, 20, 30), box) == {"below"}
    assert relative_position((0, 0, 8, 8), box) == {"left of", "above"}  # a diagonal is both
    # The offset shrinks by 0.1 x the summed sizes: 1.5 pixels apart at sizes 8 + 10 is no relation.
    assert relative_position((10.5, 10, 18.5, 20), (9, 10, 19, 20)) == set()


def picture(*objects, vocabulary=DEFAULT):
    return draw([PlacedObject(shape, color, box) for shape, color, box in objects], vocabulary)


def test_judging_follows_genevals_rules_per_task():
    red_circle = ("circle", "red", (2, 10, 12, 20))
    blue_square = ("square", "blue", (18, 10, 28, 20))
    image = picture(red_circle, blue_square)
    objects, _ = detect(image, DEFAULT.colors, DEFAULT.shapes)
    assert {name: [(o.color, o.box) for o in found] for name, found in objects.items()} == {
        "circle": [("red", (2, 10, 12, 20))],
        "square": [("blue", (18, 10, 28, 20))],
    }

    def judged(prompt: str):
        record = next(r for r in all_prompts(DEFAULT) if r["prompt"] == prompt)
        return evaluate(image, record, DEFAULT.colors, DEFAULT.shapes)

    assert judged("a photo of a red circle and a blue square").correct
    swapped = judged("a photo of a blue circle and a red square")
    assert not swapped.correct and swapped.score == 0.0
    half = judged("a photo of a red circle and a green square")
    assert not half.correct and half.score == 0.5
    assert judged("a photo of a circle left of a square").correct
    assert not judged("a photo of a circle right of a square").correct
    assert not judged("a photo of a circle above a square").correct
    assert judged("a photo of a circle and a square").correct
    assert not judged("a photo of a triangle and a square").correct
    assert not judged("a photo of two circles").correct
    # Counting is exact: three circles fail "two circles" through the exclude.
    three = picture(
        *[
            ("circle", color, box)
            for color, box in (("red", (1, 1, 11, 11)), ("blue", (18, 1, 28, 11)), ("green", (1, 18, 11, 28)))
        ]
    )
    record = next(r for r in all_prompts(DEFAULT) if r["prompt"] == "a photo of two circles")
    verdict = evaluate(three, record, DEFAULT.colors, DEFAULT.shapes)
    assert not verdict.correct and verdict.score == 0.5 and "circle<3" in verdict.reasons[0]


def test_a_smeared_region_is_malformed_and_counts_as_no_object():
    image = picture(("square", "red", (4, 4, 14, 14)))
    image[4:6, 14:30] = (220, 30, 30)  # a streak out of the square's corner
    objects, regions = detect(image, DEFAULT.colors, DEFAULT.shapes)
    assert objects == {} and len(regions) == 1 and regions[0].shape is None
    clean = picture(("square", "red", (4, 4, 14, 14)))
    assert well_formed_shapes(np.stack([clean, image])) == [1.0, 0.0]


def test_the_reward_by_import_path_and_through_the_service():
    from cosmos_train.rewards.remote import RemoteRewardClient
    from cosmos_train.service.app import ENQUEUE_PATH, PULL_PATH, ServiceSettings, serving

    rng = np.random.default_rng(3)
    train, _ = split_prompts(DEFAULT)
    records = train[::12]
    # Each picture against its own record, then against the next record: correct, then mostly not.
    media = np.stack([render(r, DEFAULT, rng) for r in records] * 2)
    metadata = [metadata_of(r) for r in records] + [metadata_of(r) for r in records[1:] + records[:1]]
    prompts = [m.get("tag", "") for m in metadata]
    expected = [
        evaluate(m, r, DEFAULT.colors, DEFAULT.shapes).score for m, r in zip(media, metadata, strict=True)
    ]
    assert expected[: len(records)] == [1.0] * len(records) and min(expected[len(records) :]) < 1.0

    # Not a built-in of cosmos-train: a job names it by import path, as any reward of its own.
    assert "geneval_mini" not in MEDIA_BUILTINS and "well_formed_shapes" not in MEDIA_BUILTINS
    with pytest.raises(ValueError, match="unknown reward 'geneval_mini'"):
        check_reward("geneval_mini", media=True)
    (by_path,) = build_media_rewards(
        [RewardSpec("domains.geneval_mini.evaluator:geneval_mini", 1.0, {"colors": list(DEFAULT.colors)})]
    )
    (strict,) = build_media_rewards([RewardSpec("domains.geneval_mini:geneval_mini", 1.0, {"strict": True})])
    assert by_path(media, prompts, metadata) == pytest.approx(expected)
    assert strict(media, prompts, metadata) == [float(s == 1.0) for s in expected]
    with pytest.raises(ValueError, match="needs each prompt's GenEval record"):
        geneval_mini(media, prompts, None)

    settings = ServiceSettings(
        token="t0k3n", max_body_bytes=1 << 20, max_batch=64, max_queue=4, result_ttl=30.0
    )
    # Hosted as `reward-serve --rewards-config` hosts a `module:function`: under its import path.
    with serving(settings, {by_path.name: by_path}) as base:
        client = RemoteRewardClient(base + ENQUEUE_PATH, base + PULL_PATH, token="t0k3n", timeout=5.0)
        assert client.score(by_path.name, prompts, media, metadata=metadata) == pytest.approx(expected)


def test_pairs_for_sft_are_pictures_of_their_captions(tmp_path):
    train, _ = split_prompts(UNSEEN)
    folder = write_pairs(tmp_path / "pairs", train, 20, UNSEEN, seed=1)
    from PIL import Image

    captions = sorted(folder.glob("*.json"))
    assert len(captions) == 20
    for caption in captions:
        record = json.loads(caption.read_text())
        image = np.asarray(Image.open(caption.with_suffix(".png")).convert("RGB"))
        assert image.shape == (48, 48, 3)
        assert evaluate(image, record, UNSEEN.colors, UNSEEN.shapes).correct, record["prompt"]


def test_the_flawed_teacher_draws_its_mistakes_at_their_shares_and_nothing_else_wrong(tmp_path):
    """The teacher's pictures fail the evaluator on their own caption exactly where the teacher erred (and then
    satisfy the record it says it drew), at the shares asked, in the tasks named; a teacher who never errs writes
    the same pairs as none."""
    from PIL import Image

    train, _ = split_prompts(DEFAULT)
    records = balanced_by_task(train)
    teacher = FlawedTeacher(counting=0.5, colors=0.4, position=0.25, color_attr=0.75)
    folder = write_pairs(tmp_path / "taught", records, 600, DEFAULT, seed=3, teacher=teacher)
    wrong = {task: [] for task in TASKS}
    for caption in sorted(folder.glob("*.json")):
        pair = json.loads(caption.read_text())
        image = np.asarray(Image.open(caption.with_suffix(".png")).convert("RGB"))
        right = evaluate(image, pair, DEFAULT.colors, DEFAULT.shapes).correct
        assert right == ("shown" not in pair), pair
        if "shown" in pair:
            assert evaluate(image, pair["shown"], DEFAULT.colors, DEFAULT.shapes).correct, pair
        wrong[pair["tag"]].append(not right)
    shares = {task: float(np.mean(flags)) for task, flags in wrong.items()}
    assert shares["single_object"] == shares["two_object"] == 0.0
    for task in ("counting", "colors", "position", "color_attr"):
        assert abs(shares[task] - getattr(teacher, task)) < 0.12, shares  # 100 pairs a task
    plain = write_pairs(tmp_path / "plain", records, 30, DEFAULT, seed=3)
    faithful = write_pairs(tmp_path / "faithful", records, 30, DEFAULT, seed=3, teacher=FlawedTeacher())
    for a, b in zip(sorted(plain.iterdir()), sorted(faithful.iterdir()), strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name
    with pytest.raises(ValueError, match=r"teacher share for counting must lie in \[0, 1\], got 1\.5"):
        FlawedTeacher(counting=1.5)


def test_the_bootstrap_error_of_the_overall_score_is_the_textbook_one():
    """Redrawing each task's samples gives the binomial standard error of a mean of task means,
    sqrt(sum p(1 - p) / n) / tasks, here for unequal shares and counts."""
    rng = np.random.default_rng(0)
    counts, shares = (40, 80, 120, 60, 100, 50), (0.9, 0.5, 0.3, 0.7, 0.2, 0.5)
    correct, tags = [], []
    for task, n, p in zip(TASKS, counts, shares, strict=True):
        correct += list((rng.random(n) < p).astype(float))
        tags += [task] * n
    observed = [np.mean([c for c, t in zip(correct, tags, strict=True) if t == task]) for task in TASKS]
    textbook = np.sqrt(sum(p * (1 - p) / n for p, n in zip(observed, counts, strict=True))) / len(TASKS)
    assert bootstrap_error(correct, tags, rounds=4000) == pytest.approx(textbook, rel=0.08)
    assert bootstrap_error([1.0] * 10, ["colors"] * 10) == 0.0


def test_a_vocabulary_with_unknown_names_is_refused_in_one_line():
    with pytest.raises(ValueError, match="unknown colour 'teal'; known: red, green"):
        Vocabulary(colors=("red", "teal"))
    with pytest.raises(ValueError, match="unknown shape 'star'"):
        Vocabulary(shapes=("circle", "star"))


def test_a_video_scores_the_mean_of_its_frames():
    rng = np.random.default_rng(4)
    record = next(r for r in all_prompts(DEFAULT) if r["prompt"] == "a photo of a red square")
    other = next(r for r in all_prompts(DEFAULT) if r["prompt"] == "a photo of a blue circle")
    clip = np.stack([render(record, DEFAULT, rng), render(other, DEFAULT, rng)])[None]  # 1 x 2 frames
    assert geneval_mini(clip, ["a photo of a red square"], [metadata_of(record)], strict=True) == [0.5]
    assert well_formed_shapes(clip) == [1.0]
