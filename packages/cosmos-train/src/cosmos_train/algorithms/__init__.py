"""One trainer per file, each with its TRL config beside it."""
