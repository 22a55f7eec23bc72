"""Days spoken of relative to another: "the next day", "a day later", "move it back two days", "tomorrow".

People rarely spell out the date they want; they shift one the conversation already holds. A date the agent works
out that way (the reservation's 2024-05-18, "the day after": 2024-05-19) is read from the context, not made up, so
the grounding of a call's values (`_tool_grounding`) and of a reply's facts (`_grounding`) accepts a date that lies a
shift the user spoke of away from a date in the context. Only the user's words give shifts (a system prompt's
"refunds within 7 days" moves no date). The direction is not read ("move it back a day" means earlier to some and
later to others): either way is accepted.
"""
from __future__ import annotations

import datetime
import re

_COUNTS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
# A count of days ("one day", "2 days", "a day"), or a phrase that means one day away.
_SHIFT = re.compile(r"\b(?:(a|an|one|two|three|four|five|six|seven|\d{1,2})\s+days?\b"
                    r"|(?:next|following|previous|prior)\s+day\b|day\s+(?:after|before)\b|tomorrow\b|yesterday\b)")
_LONGEST_SHIFT = 31  # a larger count of days is a stay or a deadline, not a date moved


def day_shifts(text: str) -> frozenset[int]:
    """The shifts in days that lower-cased `text` speaks of (1 for "the next day"), each at most a month."""
    shifts = set()
    for match in _SHIFT.finditer(text):
        count = match.group(1)
        days = 1 if count is None else _COUNTS.get(count) or int(count)
        if 0 < days <= _LONGEST_SHIFT:
            shifts.add(days)
    return frozenset(shifts)


def shifted_dates(iso_date: str, shifts: frozenset[int]) -> list[str]:
    """The ISO dates `shifts` days before and after `iso_date` ([] when it is no date)."""
    try:
        day = datetime.date.fromisoformat(iso_date)
    except ValueError:
        return []
    found = []
    for days in sorted(shifts):
        for step in (-days, days):
            try:
                found.append((day + datetime.timedelta(days=step)).isoformat())
            except OverflowError:  # past year 1 or 9999
                pass
    return found
