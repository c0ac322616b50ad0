"""Write the `shapes` toy dataset: 12 tiny PNGs, a short clip, `llava.json`, `chat.jsonl` and the
text-only `text.jsonl` (the same questions, with the picture described in words).

Answers are one word so a tiny model's loss falls within a few dozen steps. Deterministic: rerunning
rewrites identical files (PNG and the mpeg4 clip carry no timestamps).

    python examples/data/make_shapes.py [OUT_DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

SIZE = 32
COLORS = {"red": (220, 30, 30), "green": (30, 170, 60), "blue": (40, 70, 220), "yellow": (235, 200, 20)}
SHAPES = ("square", "circle", "triangle")
CLIP_FPS = 4
CLIP_FRAMES = 8


def draw(shape: str, rgb: tuple[int, int, int], offset: int = 0) -> Image.Image:
    image = Image.new("RGB", (SIZE, SIZE), (255, 255, 255))
    pen = ImageDraw.Draw(image)
    box = (6 + offset, 6, 25 + offset, 25)
    if shape == "square":
        pen.rectangle(box, fill=rgb)
    elif shape == "circle":
        pen.ellipse(box, fill=rgb)
    else:
        pen.polygon([(box[0], box[3]), (box[2], box[3]), ((box[0] + box[2]) // 2, box[1])], fill=rgb)
    return image


def write_clip(path: Path) -> None:
    """A red square sliding right: CLIP_FRAMES frames at CLIP_FPS, mpeg4 in MP4 (a few KB)."""
    import av

    with av.open(str(path), "w", format="mp4", options={"fflags": "+bitexact"}) as container:
        stream = container.add_stream("mpeg4", rate=CLIP_FPS, options={"flags": "+bitexact"})
        stream.width = stream.height = SIZE
        stream.pix_fmt = "yuv420p"
        for index in range(CLIP_FRAMES):
            frame = np.asarray(draw("square", COLORS["red"], offset=index - 4))
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode(None))


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "images").mkdir(exist_ok=True)
    llava, chat, text = [], [], []
    for shape in SHAPES:
        for color, rgb in COLORS.items():
            name = f"images/{color}_{shape}.png"
            draw(shape, rgb).save(out / name, optimize=True)
            for question, answer in (("What color is the shape?", color), ("What shape is this?", shape)):
                llava.append(
                    {
                        "image": name,
                        "conversations": [
                            {"from": "human", "value": f"<image>\n{question}"},
                            {"from": "gpt", "value": answer},
                        ],
                    }
                )
                described = f"The picture shows a {color} {shape}. {question}"
                text.append(
                    {
                        "messages": [
                            {"role": "user", "content": described},
                            {"role": "assistant", "content": answer},
                        ]
                    }
                )
                chat.append(
                    {
                        "messages": [
                            {
                                "role": "user",
                                "content": [
                                    {"type": "image", "image": name},
                                    {"type": "text", "text": question},
                                ],
                            },
                            {"role": "assistant", "content": answer},
                        ]
                    }
                )
    write_clip(out / "clip.mp4")
    for question, answer in (
        ("What color is the moving shape?", "red"),
        ("Which way does it move?", "right"),
    ):
        chat.append(
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "video", "video": "clip.mp4"},
                            {"type": "text", "text": question},
                        ],
                    },
                    {"role": "assistant", "content": answer},
                ]
            }
        )
    (out / "llava.json").write_text(json.dumps(llava, indent=1) + "\n")
    for name, records in (("chat.jsonl", chat), ("text.jsonl", text)):
        (out / name).write_text("".join(json.dumps(record) + "\n" for record in records))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "shapes")
