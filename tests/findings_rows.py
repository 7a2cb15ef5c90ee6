"""Findings of two engines (or two runs) as comparable rows."""
import json


def comparable(rows):
    """Rows as sorted JSON text, floats to 6 digits (the engines' last digits differ)."""
    def value(v):
        if isinstance(v, float):
            return round(v, 6)
        if isinstance(v, (list, tuple)):
            return [value(x) for x in v]
        return v
    return sorted(json.dumps({k: value(v) for k, v in r.items()}, sort_keys=True, default=str) for r in rows)
