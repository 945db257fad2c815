"""Test helpers for code built on rollwise. `check_engine` runs the Engine protocol's rules
(rollwise/generate/engine.py) against any engine: call it from your own test (docs/engines.md)."""
from .engine_kit import CAPABILITIES, check_engine

__all__ = ["CAPABILITIES", "check_engine"]
