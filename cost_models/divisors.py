"""Divisors of large integers, fast for any size a spec allows.

Trial division up to sqrt(n) costs 2^31 steps for n = 2^62; factoring first
(small primes by trial division, the rest by Pollard's rho with a
Miller-Rabin primality test) costs microseconds for every n below 2^64 and
stays fast far beyond, and the divisors follow from the factorisation.
"""

from __future__ import annotations

import math
import random
from functools import lru_cache

_SMALL_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47)
# Miller-Rabin with these bases is exact below 3.3e24 (Sorenson and Webster 2015);
# above that a composite passes with probability below 4^-13.
_MR_BASES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
MAX_DIVISORS = 1_000_000  # more than any integer below 10^30 has


def is_probable_prime(n: int) -> bool:
    """Miller-Rabin: exact for n < 3.3e24 with the fixed bases."""
    if n < 2:
        return False
    for p in _SMALL_PRIMES:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d //= 2
        r += 1
    for a in _MR_BASES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _pollard_rho(n: int, rng: random.Random) -> int:
    """A non-trivial factor of the odd composite `n` (Brent's variant)."""
    while True:
        y, c, m = rng.randrange(1, n), rng.randrange(1, n), 128
        g = r = q = 1
        x = ys = y
        while g == 1:
            x = y
            for _ in range(r):
                y = (y * y + c) % n
            k = 0
            while k < r and g == 1:
                ys = y
                for _ in range(min(m, r - k)):
                    y = (y * y + c) % n
                    q = q * abs(x - y) % n
                g = math.gcd(q, n)
                k += m
            r *= 2
        if g == n:
            g = 1
            while g == 1:
                ys = (ys * ys + c) % n
                g = math.gcd(abs(x - ys), n)
        if g != n:
            return g


def prime_factors(n: int) -> dict[int, int]:
    """`{prime: exponent}` of the positive integer `n`."""
    return dict(_prime_factors(n))


@lru_cache(maxsize=65536)
def _prime_factors(n: int) -> tuple[tuple[int, int], ...]:
    if n < 1:
        raise ValueError(f"prime_factors needs a positive integer, got {n}")
    factors: dict[int, int] = {}
    for p in (*_SMALL_PRIMES, *range(53, 1000, 2)):
        while n % p == 0:
            factors[p] = factors.get(p, 0) + 1
            n //= p
    rng = random.Random(n)  # deterministic per input
    stack = [n] if n > 1 else []
    while stack:
        m = stack.pop()
        if is_probable_prime(m):
            factors[m] = factors.get(m, 0) + 1
            continue
        d = _pollard_rho(m, rng)
        stack.extend((d, m // d))
    return tuple(factors.items())


def divisors(n: int, limit: int | None = None) -> list[int]:
    """Every divisor of the positive integer `n` that is <= `limit` (all of
    them when None), ascending. Raises ValueError if there would be more
    than MAX_DIVISORS."""
    return list(_divisors(n, limit))


@lru_cache(maxsize=65536)
def _divisors(n: int, limit: int | None) -> tuple[int, ...]:
    result = [1]
    for p, e in prime_factors(n).items():
        grown = []
        for d in result:
            power = d
            for _ in range(e + 1):
                if limit is not None and power > limit:
                    break
                grown.append(power)
                power *= p
        result = grown
        if len(result) > MAX_DIVISORS:
            raise ValueError(f"{n} has more than {MAX_DIVISORS} divisors")
    return tuple(sorted(result))
