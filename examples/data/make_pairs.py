"""Write the `pairs` toy dataset for diffusion training: 8 coloured-shape PNGs (32x32), each with a
`{"prompt": ...}` JSON sharing its basename (`[data] path = "examples/data/pairs"`, format "folder").

Deterministic: rerunning rewrites identical files. The shapes are drawn by `make_shapes.draw`.

    python examples/data/make_pairs.py [OUT_DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_shapes import COLORS, draw

SHAPES = ("square", "circle")


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    index = 0
    for shape in SHAPES:
        for color, rgb in COLORS.items():
            index += 1
            draw(shape, rgb).save(out / f"{index:04d}.png", optimize=True)
            record = {"prompt": f"a {color} {shape} on a white background", "color": color, "shape": shape}
            (out / f"{index:04d}.json").write_text(json.dumps(record) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "pairs")
