""""Did you mean": the closest known name to a mistyped one, and words put right."""

from __future__ import annotations

from collections.abc import Iterable

MAX_EDITS = 2


def edits(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions and swaps of
    two neighbours, each one edit."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[-1]


def closest(word: object, candidates: Iterable[str]) -> str | None:
    """The candidate one or two edits from `word` (case aside), the nearest first; None if
    none is that close or `word` is one of them."""
    if not isinstance(word, str) or not word or len(word) > 100:
        return None
    names = sorted(set(candidates))
    if word in names:
        return None
    lowered = word.lower()
    best: tuple[int, str] | None = None
    for name in names:
        distance = min(edits(word, name), edits(lowered, name) if lowered != word else MAX_EDITS + 1)
        if distance <= MAX_EDITS and (best is None or distance < best[0]):
            best = (distance, name)
    return best[1] if best else None


def did_you_mean(word: object, candidates: Iterable[str]) -> dict[str, str]:
    """Extra fields of an error: {"given", "did_you_mean"} when a close name exists, else {}.
    The CLI turns them into the corrected command line."""
    found = closest(word, candidates)
    return {"given": str(word), "did_you_mean": found} if found else {}


def hint_with(suggestion: dict[str, str], hint: str) -> str:
    """`hint`, led by the suggestion when there is one."""
    if not suggestion:
        return hint
    return f"did you mean {suggestion['did_you_mean']!r}? {hint}"


def article(word: str) -> str:
    """'an agent', 'a model', 'an mcp' (said em-see-pee)."""
    vowel_sound = word[:1].lower() in "aeiou" or word.lower().startswith("mcp")
    return f"{'an' if vowel_sound else 'a'} {word}"


def plural(count: int, singular: str, many: str | None = None) -> str:
    """'1 entry', '3 entries'."""
    return f"{count} {singular if count == 1 else (many or singular + 's')}"
