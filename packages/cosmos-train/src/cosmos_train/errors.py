"""Every error cosmos-train shows a user, and the exit code the CLI gives it.

Each message is one line naming the file, section, key or reward at fault. Two families, by what the user does next:
- `UsageError` (exit 2): the job, its data, a model it names or a command's arguments are wrong; fix the input.
  Raised before training, or as soon as a bad record is read.
- `RunError` (exit 1): a run that started went wrong (the loss diverged, a reward raised or its service failed).

The modules that raise them re-export them under the same names (`cosmos_train.config.ConfigError`,
`cosmos_train.data.DataError`, ...), so importing an error from where it is raised keeps working.
"""

from __future__ import annotations

USAGE_EXIT = 2
RUN_EXIT = 1


class UsageError(ValueError):
    """Bad input: a job file, its data, a model it names, or a command's arguments."""


class RunError(RuntimeError):
    """A run that started failed."""


# --- bad input (exit 2) ----------------------------------------------------------------------------------


class ConfigError(UsageError):
    """A job config is invalid; the message is a single line meant for the user."""


class DataError(UsageError):
    """Unusable training data; the message is a single line naming the file and record."""


class SourceError(UsageError):
    """A model a job names cannot be found, or is not of the kind the job needs."""


class BadReferenceError(UsageError):
    """A dotted path (`package.module:attribute`) that does not name an importable object."""


class UnsupportedPipelineError(ConfigError):
    """A diffusers pipeline no model family's adapter supports."""


class OutputDirError(OSError):
    """The output folder cannot be used (`cosmos-train quickstart`)."""


# --- a failed run (exit 1) -------------------------------------------------------------------------------


class NonFiniteLossError(RunError):
    """The loss became NaN or Inf; training stopped before the bad update was applied."""


class RewardError(RunError):
    """A reward function failed or returned NaN during a run; the message names it and the completion."""


class RemoteRewardError(RunError):
    """The reward service could not score a batch (unreachable, refused, timed out, or a bad answer)."""


class ScorerLoadError(RunError):
    """A reward's scorer model could not be loaded."""


def exit_code(error: BaseException) -> int | None:
    """The CLI's exit code for one of these errors (None for any other exception: a bug, shown as a traceback)."""
    if isinstance(error, UsageError | OutputDirError):
        return USAGE_EXIT
    if isinstance(error, RunError):
        return RUN_EXIT
    return None


def first_line(error: BaseException | str, limit: int = 300) -> str:
    """The first line of `error`'s message (its type's name when the message is empty), at most `limit`
    characters: library messages can run to pages."""
    text = str(error).strip()
    if not text:
        return type(error).__name__ if isinstance(error, BaseException) else ""
    return text.splitlines()[0].strip()[:limit]
