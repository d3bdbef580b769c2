"""Search strategies, one per module, behind the batch ask/tell Strategy interface."""
from autotune.search.base import Strategy
from autotune.search.random_search import RandomSearch

__all__ = ["RandomSearch", "Strategy"]
