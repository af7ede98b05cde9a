"""The publish side: writing what a re-tune or an `adopt` produced.

`swap` archives the previous log set as `.bak` and publishes the new one atomically
(and recovers an interrupted publish), `readme` renders the generated README and
curve, `merge` joins logs, `gitwrite` commits and pushes, `adopt` moves a renamed
template's log set. It imports `core` and `check`, never `tune`.
"""
