"""Integer factors: pure arithmetic, a leaf module (imported by :mod:`minipar.perf.search` and :mod:`minipar.tp`)."""


def divisors(n: int) -> list[int]:
    """Every positive divisor of ``n`` (>= 1), ascending: ``divisors(12) == [1, 2, 3, 4, 6, 12]``."""
    return [d for d in range(1, n + 1) if n % d == 0]
