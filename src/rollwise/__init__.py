"""rollwise: RLVR that spends rollouts only where they teach."""
__version__ = "0.6.0"
