"""Counted nouns in command-line output: "1 record", "2 records", never "1 records"."""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
