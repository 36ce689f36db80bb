"""The transit benchmark's seeded points and instants, draw for draw those of the in-process bench
(Benchmarks/Servers/TransitBench/main.swift): SplitMix64 seeded 42, a draw's unit value
(next() >> 11) / 2^53; first 2,000 points (lat = 25.0 + u * 0.3, then lon = 121.3 + u * 0.4, as
the bench's URLs print them: 6 decimals), then 2,000 arrival instants of a day (local midnight +
6 h + int(u * 17 h), whole seconds). Keep the two in step.
"""
import datetime

MASK = (1 << 64) - 1
POINTS = 2000


class SplitMix64:
    def __init__(self, seed=42):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def unit(self):
        return (self.next() >> 11) / float(1 << 53)


def points(count=POINTS, seed=42):
    """[(lat, lon)]: the in-process bench's points (its first `count` when count <= 2000)."""
    rng = SplitMix64(seed)
    result = []
    for _ in range(count):
        lat = 25.0 + rng.unit() * 0.3
        lon = 121.3 + rng.unit() * 0.4
        result.append((float("%.6f" % lat), float("%.6f" % lon)))
    return result


def instants(date, zone, count=POINTS, first_hour=6, last_hour=23, seed=42):
    """UTC seconds: `count` instants of `date` (a datetime.date) in `zone` (a tzinfo), after the
    points' draws: with the defaults, the in-process bench's arrival instants."""
    rng = SplitMix64(seed)
    for _ in range(2 * POINTS):
        rng.next()
    midnight = int(datetime.datetime(date.year, date.month, date.day, tzinfo=zone).timestamp())
    return [midnight + int(first_hour * 3600) + int(rng.unit() * (last_hour - first_hour) * 3600) for _ in range(count)]
