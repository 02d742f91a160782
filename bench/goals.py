"""The verdict a GOAL line ends with (issue 47: one GOAL line per goal, PASS or MISS), for the
benchmarks that judge their own goal; bench/floors.py's ``row`` makes the line."""


def judged(line: str, passed: bool) -> str:
    """``line`` (a GOAL line) with PASS or MISS after it."""
    return f"{line}  {'PASS' if passed else 'MISS'}"
