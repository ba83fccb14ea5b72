"""Neural network models for the Mario DQN (the Q-network and its builder)."""

from models.qnetwork import QNetwork, build_qnetwork

__all__ = ["QNetwork", "build_qnetwork"]
