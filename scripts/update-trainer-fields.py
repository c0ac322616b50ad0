"""Regenerate cosmos_train/config/trainer_fields.json from the installed trl and transformers (after upgrading
either): the `[train]` fields a job file is validated against before those libraries import."""

from cosmos_train.config.trainer_fields import SNAPSHOT, write_snapshot

if __name__ == "__main__":
    write_snapshot()
    print(f"wrote {SNAPSHOT}")
